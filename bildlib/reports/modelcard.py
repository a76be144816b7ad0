"""Model cards: measure a model this project trains and write its card. Four kinds, which differ by
data (KINDS: their models, how each is measured, the template in reports/cards/, where the card
goes), not by module:

    python -m bildlib.reports.modelcard pair            # the shipped Multi30k pair; about 3 min on 2 CPU cores
    python -m bildlib.reports.modelcard pair --sizes    # latency of random-init models of the preset sizes
    python -m bildlib.reports.modelcard ee              # make models-ee's two models; about 10 min
    python -m bildlib.reports.modelcard lm [NAME ...]   # make models-lm's three (each with its partner)
    python -m bildlib.reports.modelcard student [PATH]  # make models-student's student
    python -m bildlib.reports.modelcard render          # every committed card from its committed numbers

pair: the shipped checkpoints; its cards and numbers (data/checkpoints/<name>/README.md,
pair.json) are committed with the weights. ee, lm and student: built, not shipped. Their weights
are not committed but their cards are (data/checkpoints/cards/), each describing the model the
committed results came from. So a build never rewrites a committed card: it writes its own beside
the weights (README.md, card.json) and under build/cards/ and prints how its numbers differ from
the committed card's; `--publish` (with the results made from the new model) replaces it.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

from bildlib import REPO_ROOT, data, repo_relative
from bildlib.bench import models as M

CHECKPOINTS = M.CHECKPOINTS
COMMITTED = CHECKPOINTS / "cards"  # the built models' committed cards
BUILT = REPO_ROOT / "build" / "cards"
TEMPLATES = Path(__file__).parent / "cards"


@dataclass(frozen=True)
class Kind:
    """One kind of card (its template: reports/cards/<kind>.md): its models, and which model's
    numbers a card shows beside its own."""

    models: tuple[str, ...]
    partner: str  # "": a card alone; "first": beside the kind's first model; "pair": small <-> large


KINDS = {
    "pair": Kind(M.PAIR, ""),
    "ee": Kind(M.EE, "first"),
    "lm": Kind(M.LM_NAMES, "pair"),
    "student": Kind((), ""),
}


def partner(kind: str, name: str) -> str | None:
    """The model a card is compared with: ee's later models beside its first; lm's small models
    beside the large, the large beside the small; None otherwise."""
    k = KINDS[kind]
    if k.partner == "first":
        return None if name == k.models[0] else k.models[0]
    if k.partner == "pair":
        return k.models[0] if name == k.models[1] else k.models[1]
    return None


def card(kind: str, m: dict, other: dict | None = None) -> str:
    """The card's text: reports/cards/<kind>.md filled with fields(kind, m, other). other: the
    partner's measurements (ee, lm), or for the pair the whole pair.json (machine, dtype)."""
    return (TEMPLATES / f"{kind}.md").read_text().format_map(fields(kind, m, other or {}))


def precision(t: dict) -> str:
    """How a training run multiplied: its log's `autocast` (train.loop.use_bf16: bf16 only where the
    hardware has it); a log from before that was recorded autocast whenever its config's bf16 said so."""
    asked = t["config"].get("bf16", False)
    ran = t.get("autocast") or ("bfloat16" if asked else "float32")
    if ran == "bfloat16":
        return "bf16 autocast"
    return "float32 (bf16 asked; no native bf16 here: train.loop.use_bf16)" if asked else "float32"


def fields(kind: str, m: dict, other: dict) -> dict:
    """What a template names beyond m's own numbers: derived values, phrases and defaults."""
    t = m["train"]
    mach = t["machine"]
    f = {"name": m["name"], "m": m, "t": t, "mach": mach, "wall_min": t["wall_s"] / 60,
         "gpu": mach.get("cuda") or "no GPU", "c": t["config"], "precision": precision(t)}  # fmt: skip
    if kind == "pair":
        f["c"], cmd = m["config"], f"python -m bildlib.train {m['name']}"
        if m["name"] == "multi30k-small-aligned":
            cmd = "python -m bildlib.train calibrate data/checkpoints/multi30k-large && " + cmd
        what = M.PAIR_ROLES[m["name"]]
        dt = other.get("dtype", "float32")  # cards measured before the default became auto ran in float32
        return f | {"what": what[0].upper() + what[1:], "cmd": cmd, "params_m": m["params"] / 1e6, "dt": dt,
                    "lat": m["latency"], "threads": other["machine"]["threads"]}  # fmt: skip
    if kind == "ee":
        c, n = t["config"], max(m["exits"])
        loss = f"L = ½(L_{c['exit_layer']} + L_{n})" if c["exits"] == "ee" else "L = Σ_i w_i L_i, w_i = i / Σ_j j (CALM's)"
        rows = "\n".join(f"| {i}{' (full model)' if i == n else ''} | {e['bleu']:.2f} | {e['ms_per_token']:.2f} |"
                         for i, e in sorted(m["exits"].items(), key=lambda kv: int(kv[0])))  # fmt: skip
        match = ""
        if other:
            a, b = m["exits"][n]["bleu"], other["exits"][max(other["exits"])]["bleu"]
            match = f"\nFull-model BLEU against {other['name']}: {a:.2f} vs {b:.2f} (difference {a - b:+.2f}).\n"
        return f | {"loss": loss, "rows": rows, "match": match, "signature": m["exits"][n]["signature"]}
    if kind == "lm":
        g, og, c = m["greedy"], other["greedy"], t["config"]
        ratio = max(g["ms_per_token"], og["ms_per_token"]) / min(g["ms_per_token"], og["ms_per_token"])
        distilled = "" if not c.get("teacher") else (
            f"\nDistilled from `{c['teacher']}` on the same texts: (1 - λ) CE + λ T² KL, "
            f"λ {c['kd_lambda']}, T {c['kd_temperature']}, the teacher in the loop.")  # fmt: skip
        return f | {"z": m["size"], "params_m": m["size"]["parameters"] / 1e6, "other": other, "g": g, "og": og,
                    "ratio": ratio, "distilled": distilled}  # fmt: skip
    p, s, c = m["profile"], m["step_ms"], t["config"]  # student
    return f | {"p": p, "s": s, "pet": f"; PET sharing {p['pet']}" if p.get("pet") else "",
                "command": t["command"] or "python -m bildlib.train", "topk": c.get("teacher_topk") or "all (in the loop)",
                "warmup": c.get("pet_warmup_epochs", 0), "agreement_pct": 100 * p["agreement"],
                "ratio_f32": s["student_float32"] / s["large_float32"],
                "ratio_bf16": s["student_bfloat16"] / s["large_bfloat16"]}  # fmt: skip


def pair_cards(pair: dict) -> dict[str, str]:
    """{checkpoint: card} of the shipped pair from its numbers (pair.json)."""
    return {n: card("pair", m | {"name": n}, pair) for n, m in pair["models"].items()}


def committed_cards() -> dict[Path, str]:
    """Every committed card as its committed numbers render it: {file: text}."""
    pair = json.loads((CHECKPOINTS / "pair.json").read_text())
    out = {CHECKPOINTS / n / "README.md": text for n, text in pair_cards(pair).items()}
    ms = {f.stem: json.loads(f.read_text()) for f in sorted(COMMITTED.glob("*.json"))}
    for name, m in ms.items():
        kind = next((k for k, v in KINDS.items() if name in v.models), "student")
        other = ms.get(partner(kind, name) or "")
        out[COMMITTED / f"{name}.md"] = card(kind, m, other)
    return out


def write_card(name: str, text: str, m: dict, checkpoint: Path | None, publish: bool = False) -> str:
    """Write the card (text, the measurements m) of the built model `name` at checkpoint; returns
    the comparison with the committed card (printed too)."""
    files = [BUILT / f"{name}.md", BUILT / f"{name}.json"]
    if checkpoint is not None and Path(checkpoint).is_dir():
        files += [Path(checkpoint) / "README.md", Path(checkpoint) / "card.json"]
    if publish:
        files += [COMMITTED / f"{name}.md", COMMITTED / f"{name}.json"]
    doc = json.dumps(m, indent=1, default=str) + "\n"
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        with data.atomic_path(f) as tmp:
            tmp.write_text(doc if f.suffix == ".json" else text)
    said = "the committed card replaced (--publish)" if publish else compare(name, json.loads(doc))
    print(text)
    print(f"{name}: card in {', '.join(repo_relative(f) for f in files)}; {said}")
    return said


def compare(name: str, m: dict) -> str:
    """How the measurements m differ from the committed card's, one line per number."""
    f = COMMITTED / f"{name}.json"
    if not f.is_file():
        return f"no committed card {repo_relative(f)} to compare with"
    old, new = dict(_leaves(json.loads(f.read_text()))), dict(_leaves(m))
    lines = [f"{k}: committed {old[k]}, this build {new[k]}" for k in sorted(old.keys() & new.keys())
             if _differ(old[k], new[k])]  # fmt: skip
    lines += [f"{k}: only in the committed card" for k in sorted(old.keys() - new.keys())]
    head = f"differences from the committed card {repo_relative(f)} (left as it is; --publish replaces it)"
    return head + (":\n  " + "\n  ".join(lines) if lines else ": none")


def _leaves(x, prefix: str = ""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif not isinstance(x, list):
        yield prefix, x


def _differ(a, b) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a != b


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=[*KINDS, "render"], help="which cards; render: every committed card")
    ap.add_argument("names", nargs="*", help="lm: the models (default all three); student: its folder")
    ap.add_argument("--publish", action="store_true", help="replace the committed card (a built model's)")
    ap.add_argument("--sizes", action="store_true", help="pair: only time random-init models of the sizes")
    ap.add_argument("--n", type=int, default=None, help="student: first n sentences of each split")
    a = ap.parse_intermixed_args(argv)  # names may follow --publish
    if a.kind == "render":
        for f, text in committed_cards().items():
            f.write_text(text)
            print(f"rendered {repo_relative(f)}")
    elif a.kind == "pair" and a.sizes:
        print(json.dumps({"machine": M.machine(), "latency": M.size_latency()}, indent=1))
    elif a.kind == "pair":
        pair = M.measure_pair()
        (CHECKPOINTS / "pair.json").write_text(json.dumps(pair, indent=1) + "\n")
        for n, text in pair_cards(pair).items():
            (CHECKPOINTS / n / "README.md").write_text(text)
        print(json.dumps(pair["conditions"], indent=1))
    elif a.kind == "student":
        m = M.measure_student(a.names[0] if a.names else M.student_path(), a.n)
        write_card(m["name"], card("student", m), m, M.locate(m["path"]), a.publish)
    else:  # ee, lm: each card with its partner's numbers
        names = a.names or list(KINDS[a.kind].models)
        if bad := [n for n in names if n not in KINDS[a.kind].models]:
            raise SystemExit(f"modelcard {a.kind}: no model {bad[0]!r}; the names are "
                             f"{', '.join(KINDS[a.kind].models)}")  # fmt: skip
        want = dict.fromkeys(names + [p for n in names if (p := partner(a.kind, n))])
        ms = {n: M.measure_ee(n) if a.kind == "ee" else M.measure_lm(n) for n in want}
        for n in names:
            other = ms.get(partner(a.kind, n) or "")
            write_card(n, card(a.kind, ms[n], other), ms[n], CHECKPOINTS / n, a.publish)


if __name__ == "__main__":
    main()
