"""The course tutorial (notebooks/tutorial.ipynb): fake models with known logits (`fakes`), a
recorder of what a decoder did to its models (`record`), the trace picture (`picture`), the
exercises' checks (`checks`) and their solutions (`solutions`, kept out of the notebook)."""
