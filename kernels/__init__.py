"""Policy arithmetic of BiLD: fused Triton kernels with torch references.

This folder is the package ``bildlib.kernels`` (see ``package-dir`` in pyproject.toml).
It must never act as a top-level ``kernels`` module: transformers probes for Hugging
Face's hub-kernels package of that name, and Python finds this folder under that name
whenever the repository root is on ``sys.path`` (``python`` or a Jupyter kernel started
in the checkout). Imported that way, the module keeps none of its contents and looks
like a bare namespace folder, which transformers reads as "not installed".
"""

if __name__ == "bildlib.kernels":
    from .dispatch import (
        HAS_TRITON,
        argmax,
        attention,
        lut_matvec,
        max_prob,
        mm,
        nucleus,
        rms_norm,
        rollback_distance,
        sample,
        saturation,
        speculative_accept,
    )  # fmt: skip

    __all__ = [
        "HAS_TRITON", "argmax", "attention", "lut_matvec", "max_prob", "mm", "nucleus", "rms_norm",
        "rollback_distance",
        "sample", "saturation", "speculative_accept",
    ]  # fmt: skip
else:  # found as top-level `kernels`: not ours to provide under that name
    del __file__  # a namespace folder has no __file__; transformers then skips it
