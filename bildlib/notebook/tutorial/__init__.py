"""The course tutorial (notebooks/tutorial.ipynb): fake models with known logits (`fakes`), a
recorder of what a decoder did to its models (`record`), the trace picture (`picture`), the
exercises' checks (`checks`, `checks_loop`), the hidden tests' fresh run of them (`grading`) and
the nbgrader course built around the notebook (`course`). `make grade` (`autograde`) takes each
submission through the intake (`intake`), runs it in a sandbox (`sandbox`) within its limits
(`limits`) under nbgrader (`execute`), checks each exercise in the grader (`verdict`, over
`wire`; the package's own answers refuse meanwhile: `answers`) and writes the gradebook one
student at a time (`gradebook`). The solutions are not in the package: they are
course/solutions.py in the repository (docs/teaching.md)."""
