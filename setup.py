"""Which packages the wheel holds (the metadata is in pyproject.toml): every package under
bildlib/, found rather than listed, and kernels/, which must only ever import as bildlib.kernels:
transformers probes for a top-level `kernels` package (Hugging Face hub kernels)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["bildlib", "bildlib.*"]), "bildlib.kernels"],
    package_dir={"bildlib.kernels": "kernels"},
)
