"""Measurements beyond the paper's sweeps: the peers and CTranslate2, the engines' calls, batch > 1,
the candidate small models, the decoder-only Table 2 and the GPU check (gpu)."""
