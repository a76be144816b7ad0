"""After the alignment fix and the GPU linear probe: lossless BiLD per dtype on the lean engine, what the probe chose."""
import logging, sys, time, torch
logging.basicConfig(level=logging.INFO, format="%(message)s")
from bildlib.bench.gpu.lossless import lossless
from bildlib.bench import callbench
from bildlib.models import rowinv
dev, n = sys.argv[1], int(sys.argv[2])
t0 = time.time()
df = lossless(torch.device(dev), n, 5, settings=[("bfloat16", "lean"), ("float32", "lean")])
df.to_csv(sys.argv[3] + "/bild_after.csv", index=False)
print(rowinv.summary())
for k, c in rowinv.CHOSEN.items():
    print(k, c.path, c.invariant, c.tried)
s = callbench.bench(device=dev, dtype="bfloat16", rounds=5)
s.to_csv(sys.argv[3] + "/steps_after.csv", index=False)
print(s.round(3).to_string(index=False))
print(f"{time.time() - t0:.1f} s")
