"""The GPU check (`make gpu-check`): kernel tests and benchmark, engine steps, fig4 and lossless BiLD
on a CUDA GPU, into figures/gpu/ (check: the parts; lossless; render: summary.md and the docs block)."""
