"""Tiny stand-ins for the paper's hub datasets, in the schema `datasets.load_dataset` returns for
each (IWSLT2017 and WMT14: translation {de, en}; XSUM: document, summary, id; CNN/DM: article,
highlights, id) and its split names (train, validation, test), written as parquet under
<root>/<hub id>/<config>/<split>.parquet (hub.local_file). With $BILD_HUB_DATA=<root>,
hub.load_hub loads them through `datasets.load_dataset("parquet", ...)` and the same field
checks and extraction as the hub's copies (docs/paper-checkpoints.md).
"""

from __future__ import annotations

from pathlib import Path

from bildlib.data.hub import HUB_DATASETS, local_file

PAIRS = [
    ("Ein Mann fährt Fahrrad auf der Straße.", "A man rides a bike on the street."),
    ("Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."),
    ("Eine Frau kocht in einer kleinen Küche.", "A woman cooks in a small kitchen."),
    ("Kinder laufen über eine grüne Wiese.", "Children run across a green meadow."),
]
DOCUMENTS = [
    ("The city council met on Monday to discuss the new bridge. Members agreed to fund the repairs "
     "and work will start in the spring.", "The council agreed to fund repairs to the bridge."),
    ("A local team won the regional cup after a late goal. Fans gathered in the square to celebrate "
     "the first title in ten years.", "A late goal gave the team its first cup in ten years."),
    ("Heavy rain flooded several roads in the north of the county. Police asked drivers to avoid the "
     "area until the water goes down.", "Floods closed roads in the north of the county."),
    ("Scientists found a new species of frog in the forest. It is smaller than a coin and lives high "
     "in the trees.", "A tiny new frog species was found in the forest."),
]  # fmt: skip


def lines() -> list[str]:
    """WikiText-2's raw layout: a heading, blank lines, paragraphs of two documents and their
    summaries each (long enough to give a prompt and its continuation, hub.lm_split), each line
    ending " \n"."""
    docs = [f"{d} {s}" for d, s in DOCUMENTS]
    paras = [f"{docs[i]} {docs[(i + 1) % len(docs)]}" for i in range(len(docs))]
    return [" = Local news = \n", ""] + [x for p in paras for x in (f" {p} \n", "")]


def rows(name: str) -> list[dict]:
    """The examples of dataset `name` (a key of data.HUB_DATASETS) in its hub schema."""
    spec = HUB_DATASETS[name]
    t = spec.task
    if t.kind == "language_modeling":
        return [{spec.source_field: x} for x in lines()]
    if t.kind == "translation":
        return [{spec.source_field: {t.source_lang: s, t.target_lang: r}} for s, r in PAIRS]
    docs = enumerate(DOCUMENTS)
    return [{spec.source_field: d, spec.target_field: s, "id": f"{name}-{i}"} for i, (d, s) in docs]


def words() -> list[str]:
    """Every word of the fixtures, for a tokenizer that knows them (paper.shapes.tokenizer)."""
    text = " ".join(" ".join(p) for p in PAIRS + DOCUMENTS)
    return list(dict.fromkeys(text.split()))


def write(root: Path, names: list[str] | None = None, mutate=None) -> Path:
    """Parquet files for each dataset in `names` (default: all) and each split; mutate(name, rows)
    -> rows, if given, changes them first (a test renames a column)."""
    import datasets

    for name in names or list(HUB_DATASETS):
        r = rows(name)
        if mutate is not None:
            r = mutate(name, r)
        for split in ("train", "validation", "test"):
            f = local_file(root, HUB_DATASETS[name], split)
            f.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(r).to_parquet(str(f))
    return Path(root)
