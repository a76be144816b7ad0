"""Multi30k De->En, the embedded default, read from its raw gzip files. Lookup order:
`$BILD_DATA_DIR/multi30k/`, then `data/multi30k/` in the checkout (val and the test splits ship
there, so evaluation works offline: data/multi30k/README.md), then a download from the
multi30k/dataset GitHub repository into `data/multi30k/`, checked against SHA-256 (needed only for
train)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from bildlib import REPO_ROOT
from bildlib.data.files import download
from bildlib.data.splits import DataError, Split, Task

MULTI30K = Task("multi30k", "translation", "de", "en")
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr")
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
# SHA-256 of the raw files (data/task1/raw/ of github.com/multi30k/dataset), computed on the
# copies this project was developed with.
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
}


def multi30k_candidates() -> list[Path]:
    """Folders searched for the Multi30k files, in order."""
    dirs = []
    if os.environ.get("BILD_DATA_DIR"):
        dirs.append(Path(os.environ["BILD_DATA_DIR"]) / "multi30k")
    dirs.append(REPO_ROOT / "data" / "multi30k")
    return dirs


def multi30k_files(split: str, download_missing: bool = True) -> tuple[Path, Path]:
    """(source, target) gzip files of a Multi30k split, found or downloaded (see module doc)."""
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"split must be one of {MULTI30K_SPLITS}, got {split!r}")
    names = [f"{split}.{lang}.gz" for lang in (MULTI30K.source_lang, MULTI30K.target_lang)]
    candidates = multi30k_candidates()
    for d in candidates:
        if all((d / n).is_file() for n in names):
            return d / names[0], d / names[1]
    searched = ", ".join(str(d) for d in candidates)
    if not download_missing:
        raise FileNotFoundError(f"Multi30k files {names} not found in {searched}")
    base = os.environ.get("BILD_MULTI30K_URL", MULTI30K_URL).rstrip("/")
    dest = REPO_ROOT / "data" / "multi30k"
    made = not dest.exists()  # a failed download leaves no empty folder behind
    try:
        for n in names:
            if not (dest / n).is_file():
                download(f"{base}/{n}", dest / n, MULTI30K_SHA256[n])
        failed = None
    except OSError as e:  # URLError and timeouts are OSErrors; a ChecksumError propagates as is
        failed = e
    finally:
        if made and dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
    if failed is not None:  # one paragraph, not urllib's chained traceback
        why = getattr(failed, "reason", None) or failed
        raise FileNotFoundError(
            f"Multi30k's {split} split ({', '.join(names)}) is not in {searched}, and downloading it "
            f"from {base} failed ({why}). Put the raw files (data/task1/raw/ of "
            "github.com/multi30k/dataset) in one of those folders, or point BILD_DATA_DIR at a folder "
            "that holds multi30k/. Only train is downloaded: val and the test splits ship in the "
            "repository's data/multi30k/."
        ) from None
    return dest / names[0], dest / names[1]


def read_lines(path: Path) -> list[str]:
    """Lines of a gzip text file; an empty file, an empty line or a bad gzip is a DataError."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [line.rstrip("\r\n") for line in f]
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not a readable UTF-8 gzip text file: {e}") from e
    if not lines:
        raise DataError(f"{path} is empty")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise DataError(f"{path}:{i} is an empty line")
    return lines


def read_parallel(source: Path, target: Path) -> list[tuple[str, str]]:
    src, tgt = read_lines(source), read_lines(target)
    if len(src) != len(tgt):
        raise DataError(f"{source} has {len(src)} lines but {target} has {len(tgt)}; they must be parallel")
    return list(zip(src, tgt, strict=True))


def load_multi30k(split: str = "val", download_missing: bool = True) -> Split:
    """Multi30k De->En: train (29,000 pairs), val (1,014), test_2016_flickr and test_2017_flickr (1,000)."""
    return Split(MULTI30K, split, read_parallel(*multi30k_files(split, download_missing)))
