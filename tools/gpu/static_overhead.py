"""Where a sentence's time goes on the static engine (run by hand on the H200 of 2026-11-28, at
commit fd563c4 as figures/gpu/static/by-hand/overhead.py, after the regime and lossless parts;
output in figures/gpu/static/by-hand/overhead.txt, whose README names this script; the large
model was `l` then, renamed here for the linter). Run from the repository root on a CUDA machine:
PYTHONPATH=. python tools/gpu/static_overhead.py"""
import time

import torch

from bildlib import decoding as D
from bildlib.experiments.presets import PRESETS
from bildlib.kernels import max_prob
from bildlib.models import load_pair

p = PRESETS["multi30k"]
s, lg = load_pair(p.model("aligned"), p.model("large"), "cuda", "bfloat16", "static")
x = s.encode("Ein Mann fährt auf einem Fahrrad die Straße entlang.")


def t(f, n=50):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    a = time.perf_counter()
    for _ in range(n):
        f()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - a) / n


bos = lg.start(x)
lg.forward([bos])
tok = torch.tensor([5], device="cuda")
print("engine.forward k=1 ms", t(lambda: lg.impl.forward(tok, 1)))


def lmf():
    lg.forward([5])
    lg.crop(1)


print("LM.forward k=1 ms", t(lmf))


def lmf_argmax():
    z = lg.forward([5])
    int(z[-1].argmax())
    lg.crop(1)


print("LM.forward+argmax.item ms", t(lmf_argmax))


def lmf_mp():
    z = lg.forward([5])
    pm, i = max_prob(z[-1:])
    float(pm[0])
    int(i[0])
    lg.crop(1)


print("LM.forward+max_prob+2 items ms", t(lmf_mp))
print("vanilla sentence ms", t(lambda: D.vanilla(lg, x), 10), "tokens", len(D.vanilla(lg, x)[0]))
print("bild lossless ms", t(lambda: D.bild(s, lg, x, distance="exact"), 10),
      D.bild(s, lg, x, distance="exact")[1])
