"""bildlib installs as one package; its kernels import only as bildlib.kernels."""

import importlib.util

import pytest

from conftest import REPO, run_python


def test_imports_work_from_the_repo_root():
    # From the checkout's root, `kernels/` is on sys.path as a top-level name: transformers'
    # probe for Hugging Face's `kernels` package finds it and must not be fooled.
    out = run_python(
        "import bildlib, bildlib.kernels, transformers.modeling_utils\n"
        "from transformers.utils import is_kernels_available\n"
        "import sys\n"
        "print(is_kernels_available(), 'kernels' in sys.modules, hasattr(bildlib.kernels, 'max_prob'))",
        cwd=REPO,
    ).stdout.split()
    # not available, yet probed (transformers imported our folder under the name `kernels`)
    assert out == ["False", "True", "True"]


def test_top_level_kernels_folder_is_inert():
    out = run_python(
        "import kernels, bildlib.kernels\n"
        "print(getattr(kernels, '__file__', None), hasattr(kernels, 'max_prob'), kernels is bildlib.kernels)",
        cwd=REPO,
    ).stdout.split()
    assert out == ["None", "False", "False"]


def test_install_exposes_no_top_level_kernels(tmp_path):
    out = run_python(
        "import importlib.util, bildlib.kernels\n"
        "print(importlib.util.find_spec('kernels'), bildlib.kernels.__file__)",
        cwd=tmp_path,
    ).stdout.split()
    assert out[0] == "None"
    assert out[1] == str(REPO / "kernels" / "__init__.py")


def test_kernels_import_without_triton(tmp_path):
    out = run_python(
        "import sys; sys.modules['triton'] = None  # what an environment without Triton sees\n"
        "import torch, bildlib.kernels as k\n"
        "p, i = k.max_prob(torch.tensor([[0.0, 2.0, 1.0]]))\n"
        "print(k.HAS_TRITON, int(i), round(float(p), 4))",
        cwd=tmp_path,
    ).stdout.split()
    assert out == ["False", "1", "0.6652"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed here")
def test_kernels_import_with_triton(tmp_path):
    out = run_python("import triton, bildlib.kernels as k; print(k.HAS_TRITON)", cwd=tmp_path).stdout.split()
    assert out == ["True"]
