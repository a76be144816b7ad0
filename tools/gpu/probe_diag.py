"""Which attention paths the row-invariance probe refuses on this device, and where."""
import sys, time, torch
from bildlib.models import rowinv, lean_common as L
dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
t0 = time.time()
print(torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else "cpu", flush=True)
for dtype in (torch.float32, torch.bfloat16):
    for H, dh in ((6, 64), (4, 32)):
        for no_bias in (True, False):
            g = torch.Generator().manual_seed(1)
            keys = (1, 2, 3, 5, 8, 13, 20, 41)
            kvs = [torch.randn(2, H, n, dh, generator=g).to(device=dev, dtype=dtype) for n in keys]
            for name, f in rowinv.paths(L._attend, 1, (0, 3)).items():
                bad = {}
                for kv in kvs:
                    n = kv.shape[2]
                    def row_fn(x, kv=kv, n=n, f=f):
                        r = x.shape[0]
                        q = x[:, : H * dh].reshape(r, H, dh).transpose(0, 1)
                        b = None if no_bias else x[:, H * dh :].reshape(r, H, n).transpose(0, 1)
                        return f(q, kv[0], kv[1], b).transpose(0, 1).reshape(r, -1)
                    r = rowinv.probe(row_fn, H * dh + H * n, dtype, dev)
                    if r:
                        bad[n] = (len(r), r[:4])
                print(f"attend {str(dtype)[6:]} H{H} dh{dh} {'nobias' if no_bias else 'bias'} {name}: "
                      f"{'ok' if not bad else bad}", flush=True)
    for H, dh in ((6, 64), (4, 32)):
        key = (dtype, dev, H, dh, False, 1)
        f = L._causal_path(key)
        print("causal", str(dtype)[6:], H, dh, rowinv.CHOSEN[("attention", str(dtype)[6:], H, dh, "causal")], flush=True)
print(f"{time.time() - t0:.1f} s")
