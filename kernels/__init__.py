"""Policy arithmetic of BiLD: fused Triton kernels with torch references.

This folder is the package ``bildlib.kernels`` (see ``package-dir`` in pyproject.toml).
It must never act as a top-level ``kernels`` module: transformers probes for Hugging
Face's hub-kernels package of that name, and Python finds this folder under that name
whenever the repository root is on ``sys.path`` (``python`` or a Jupyter kernel started
in the checkout). Imported that way, the module keeps none of its contents and looks
like a bare namespace folder, which transformers reads as "not installed".
"""

if __name__ == "bildlib.kernels":
    try:  # Triton is optional: without it every function runs its torch reference
        import triton  # noqa: F401

        HAS_TRITON = True
    except ImportError:
        HAS_TRITON = False

    from .reference import max_prob_ref as max_prob
    from .reference import nucleus_ref as nucleus
    from .reference import rollback_distance_ref as rollback_distance
    from .reference import sample_ref as sample
    from .reference import speculative_accept_ref as speculative_accept

    __all__ = ["HAS_TRITON", "max_prob", "nucleus", "rollback_distance", "sample", "speculative_accept"]
else:  # found as top-level `kernels`: not ours to provide under that name
    del __file__  # a namespace folder has no __file__; transformers then skips it
