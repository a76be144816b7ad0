"""The course tutorial (notebooks/tutorial.ipynb): fake models with known logits (`fakes`), a
recorder of what a decoder did to its models (`record`), the trace picture (`picture`), the
exercises' checks (`checks`, `checks_loop`), the hidden tests' fresh run of them (`grading`) and
the nbgrader course built around the notebook (`course`). The solutions are not in the package:
they are course/solutions.py in the repository (docs/teaching.md)."""
