"""CTranslate2's greedy decoding in a process of its own (bildlib.bench.ct2peer starts it).

Never imports torch: torch and CTranslate2 each bring an OpenMP runtime, and in one process
CTranslate2 ran 3.5x slower (docs/engines-cpu.md, *CTranslate2*). Requests are JSON lines on stdin,
{"tokens": [source tokens], "max": max_decoding_length} (and "min": min_decoding_length,
to force a length); each answer is one JSON line,
{"tokens": [output tokens], "s": seconds of translate_batch alone}. The first line it writes
says it is ready: {"ready": true, "version": ..., "torch": false}. COMPUTE_TYPE is CTranslate2's
(float32, the default; int8_float32, its int8 on a CPU, the weights quantized as it loads them).

    python -m bildlib.bench.ct2worker MODEL_DIR THREADS [COMPUTE_TYPE]
"""

from __future__ import annotations

import json
import sys
import time


def serve(model_dir: str, threads: int, compute_type: str = "float32") -> None:
    import ctranslate2

    tr = ctranslate2.Translator(model_dir, device="cpu", inter_threads=1, intra_threads=threads,
                                compute_type=compute_type)
    ready = {"ready": True, "version": ctranslate2.__version__, "torch": "torch" in sys.modules}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.perf_counter()
        n = {"max_decoding_length": req["max"], "min_decoding_length": req.get("min", 0)}
        r = tr.translate_batch([req["tokens"]], beam_size=1, **n)
        dt = time.perf_counter() - t0
        print(json.dumps({"tokens": r[0].hypotheses[0], "s": dt}), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
