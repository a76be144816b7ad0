"""Multi30k lookup, download and bad-input errors; hub datasets' plumbing and offline errors."""

import functools
import gzip
import hashlib
import http.server
import json
import subprocess
import threading
from contextlib import contextmanager

import pytest

from bildlib import data
from bildlib.data import multi30k as m30k
from conftest import REPO, run_python


def write_gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def write_split(folder, split="val", src=("Ein Hund.", "Zwei Katzen."), tgt=("A dog.", "Two cats.")):
    write_gz(folder / f"{split}.de.gz", src)
    write_gz(folder / f"{split}.en.gz", tgt)


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """A fake checkout (REPO_ROOT) and a BILD_DATA_DIR, both empty; downloads disabled by default."""
    repo, env = tmp_path / "repo", tmp_path / "env"
    monkeypatch.setattr(m30k, "REPO_ROOT", repo)
    monkeypatch.setenv("BILD_DATA_DIR", str(env))
    monkeypatch.setenv("BILD_MULTI30K_URL", "http://127.0.0.1:9/nothing-listens-here")
    return repo / "data" / "multi30k", env / "multi30k"


@contextmanager
def file_server(folder):
    """An HTTP server on 127.0.0.1 serving folder, for the download path without internet."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- lookup order


def test_env_dir_comes_first(roots):
    repo_dir, env_dir = roots
    write_split(env_dir, src=["Aus env."], tgt=["From env."])
    write_split(repo_dir, src=["Aus repo."], tgt=["From repo."])
    s = data.load_multi30k("val")
    assert s.pairs == [("Aus env.", "From env.")]
    assert m30k.multi30k_files("val")[0] == env_dir / "val.de.gz"


def test_repo_data_dir_is_second(roots):
    repo_dir, env_dir = roots
    write_split(env_dir, split="train")  # env folder exists but lacks val
    write_split(repo_dir, src=["Aus repo."], tgt=["From repo."])
    assert data.load_multi30k("val").pairs == [("Aus repo.", "From repo.")]


def test_unset_env_is_skipped(roots, monkeypatch):
    repo_dir, _ = roots
    monkeypatch.delenv("BILD_DATA_DIR")
    write_split(repo_dir)
    assert m30k.multi30k_candidates() == [repo_dir]
    assert len(data.load_multi30k("val")) == 2


def test_download_is_last_and_checked(roots, tmp_path, monkeypatch):
    repo_dir, _ = roots
    served = tmp_path / "served"
    write_split(served)
    sums = {n: hashlib.sha256((served / n).read_bytes()).hexdigest() for n in ("val.de.gz", "val.en.gz")}
    monkeypatch.setattr(m30k, "MULTI30K_SHA256", {**m30k.MULTI30K_SHA256, **sums})
    with file_server(served) as url:
        monkeypatch.setenv("BILD_MULTI30K_URL", url)
        s = data.load_multi30k("val")
    assert s.pairs == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    assert sorted(p.name for p in repo_dir.iterdir()) == ["val.de.gz", "val.en.gz"]  # no temp files left
    # now found locally: no server needed
    monkeypatch.setenv("BILD_MULTI30K_URL", "http://127.0.0.1:9/")
    assert data.load_multi30k("val").pairs == s.pairs


def test_download_with_wrong_checksum_keeps_nothing(roots, tmp_path, monkeypatch):
    repo_dir, _ = roots
    served = tmp_path / "served"
    write_split(served)  # not the real Multi30k val: its SHA-256 is not the pinned one
    with file_server(served) as url:
        monkeypatch.setenv("BILD_MULTI30K_URL", url)
        with pytest.raises(
            data.ChecksumError, match=r"val\.de\.gz.*expected " + m30k.MULTI30K_SHA256["val.de.gz"]
        ):
            data.load_multi30k("val")
    assert not repo_dir.exists() or list(repo_dir.iterdir()) == []


def test_pinned_checksums_match_the_real_files(roots, multi30k_dir, monkeypatch):
    # serve the real files: the download path accepts them with the pinned checksums
    repo_dir, _ = roots
    with file_server(multi30k_dir) as url:
        monkeypatch.setenv("BILD_MULTI30K_URL", url)
        s = data.load_multi30k("test_2016_flickr")
    assert len(s) == 1000
    for n in ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz"):
        assert (repo_dir / n).read_bytes() == (multi30k_dir / n).read_bytes()


def test_no_files_and_no_network_is_a_clear_error(roots):
    repo_dir, _ = roots
    with pytest.raises(FileNotFoundError, match=r"val\.de\.gz.*is not in .*env/multi30k.*downloading") as e:
        data.load_multi30k("val")
    assert e.value.__cause__ is None and e.value.__suppress_context__  # one paragraph, no urllib chain
    assert "BILD_DATA_DIR" in str(e.value)
    assert not repo_dir.exists()  # the failed download left no empty folder behind
    with pytest.raises(FileNotFoundError, match=r"not found in"):
        data.load_multi30k("val", download_missing=False)


def test_the_evaluation_splits_ship_with_the_repository(monkeypatch):
    # no BILD_DATA_DIR and no network: val and the test splits are found in the checkout's data/
    monkeypatch.delenv("BILD_DATA_DIR", raising=False)
    monkeypatch.setenv("BILD_MULTI30K_URL", "http://127.0.0.1:9/nothing-listens-here")
    shipped = REPO / "data" / "multi30k"
    for split, n in (("val", 1014), ("test_2016_flickr", 1000), ("test_2017_flickr", 1000)):
        src, tgt = m30k.multi30k_files(split, download_missing=False)
        assert src.parent == tgt.parent == shipped
        assert all(data.sha256(p) == m30k.MULTI30K_SHA256[p.name] for p in (src, tgt))
        assert len(data.load_multi30k(split, download_missing=False)) == n

    def ignored(name):
        check = ["git", "check-ignore", "-q", f"data/multi30k/{name}"]
        return subprocess.run(check, cwd=REPO).returncode == 0

    assert not ignored("val.de.gz") and ignored("train.de.gz")  # val ships; train is downloaded


# ---------------------------------------------------------------- bad input


def test_unknown_split(roots):
    with pytest.raises(ValueError, match=r"split must be one of .*'dev'"):
        data.load_multi30k("dev")


def test_empty_file(roots):
    repo_dir, _ = roots
    write_split(repo_dir)
    write_gz(repo_dir / "val.en.gz", [])
    with pytest.raises(data.DataError, match=r"val\.en\.gz is empty"):
        data.load_multi30k("val")


def test_mismatched_line_counts(roots):
    repo_dir, _ = roots
    write_split(repo_dir, src=["Eins.", "Zwei.", "Drei."], tgt=["One.", "Two."])
    with pytest.raises(data.DataError, match=r"val\.de\.gz has 3 lines but .*val\.en\.gz has 2"):
        data.load_multi30k("val")


def test_empty_line(roots):
    repo_dir, _ = roots
    write_split(repo_dir, src=["Eins.", "  "], tgt=["One.", "Two."])
    with pytest.raises(data.DataError, match=r"val\.de\.gz:2 is an empty line"):
        data.load_multi30k("val")


def test_corrupt_gzip(roots):
    repo_dir, _ = roots
    write_split(repo_dir)
    (repo_dir / "val.de.gz").write_bytes(b"this is not gzip")
    with pytest.raises(data.DataError, match=r"val\.de\.gz is not a readable UTF-8 gzip"):
        data.load_multi30k("val")


def test_split_api():
    s = data.Split(m30k.MULTI30K, "val", [("a", "b"), ("c", "d"), ("e", "f")])
    assert s.sources == ["a", "c", "e"] and s.references == ["b", "d", "f"]
    assert s.head(2).pairs == [("a", "b"), ("c", "d")]
    with pytest.raises(ValueError, match="n must be"):
        s.head(0)
    with pytest.raises(ValueError, match="Task.kind"):
        data.Task("x", "classification", "en", "en")


# ---------------------------------------------------------------- real Multi30k


def test_real_multi30k_splits(multi30k_dir, monkeypatch):
    monkeypatch.setenv("BILD_DATA_DIR", str(multi30k_dir.parent))
    sizes = {split: len(data.load_multi30k(split, download_missing=False)) for split in data.MULTI30K_SPLITS}
    assert sizes == {"train": 29000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000}
    val = data.load("multi30k", "val", n=3)
    assert val.task.source_lang == "de" and val.task.target_lang == "en" and val.task.prefix == ""
    assert val[0] == (
        "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
        "A group of men are loading cotton onto a truck",
    )


# ---------------------------------------------------------------- hub datasets


HUB_ROWS = {
    "iwslt2017": {"translation": [{"de": "Hallo Welt.", "en": "Hello world."}]},
    "wmt14": {"translation": [{"de": "Hallo Welt.", "en": "Hello world."}]},
    "xsum": {"document": ["A long article."], "summary": ["Short."], "id": ["1"]},
    "cnn_dailymail": {"article": ["A long article."], "highlights": ["Short."], "id": ["1"]},
    # WikiText-2 raw: lines, headings and blank lines included
    "wikitext2": {"text": ["", " = Title = \n", "", " " + " ".join(f"w{i}" for i in range(50)) + " \n",
                           " Short line . \n"]},
}


@pytest.mark.parametrize("name", sorted(data.HUB_DATASETS))
def test_hub_plumbing(name, monkeypatch):
    # the rows as the hub's schema has them; load_dataset itself is the real one elsewhere
    import datasets

    calls = []

    def fake_load_dataset(path, config, split):
        calls.append((path, config, split))
        return datasets.Dataset.from_dict(HUB_ROWS[name])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no reachability probe
    s = data.load_hub(name, "val", n=5)
    spec = data.HUB_DATASETS[name]
    lm = spec.task.kind == "language_modeling"  # n counts prompts: the whole split is read
    assert calls == [(spec.path, spec.config, "validation" if lm else "validation[:5]")]
    if lm:  # every non-empty line is a text; the long paragraph gives the one prompt (24 words)
        assert s.texts == ["= Title =", " ".join(f"w{i}" for i in range(50)), "Short line ."]
        assert s.pairs == [(" ".join(f"w{i}" for i in range(24)), " ".join(f"w{i}" for i in range(24, 50)))]
    elif spec.task.kind == "translation":
        assert s.pairs == [("Hallo Welt.", "Hello world.")] and s.task.prefix == ""
    else:
        assert s.pairs == [("A long article.", "Short.")] and s.task.prefix == "summarize: "


def test_hub_bad_arguments():
    with pytest.raises(ValueError, match="name must be one of"):
        data.load_hub("wmt19")
    with pytest.raises(ValueError, match="split must be one of"):
        data.load_hub("xsum", "dev")
    with pytest.raises(ValueError, match="name must be 'multi30k' or"):
        data.load("imdb")


def test_hub_offline_mode_error(tmp_path):
    # the real datasets.load_dataset, forced offline, with an empty cache
    code = (
        "import json, time\n"
        "from bildlib import data\n"
        "out = {}\n"
        "for name in sorted(data.HUB_DATASETS):\n"
        "    t = time.time()\n"
        "    try:\n"
        "        data.load_hub(name, 'val', n=2)\n"
        "        out[name] = 'loaded'\n"
        "    except data.DatasetUnavailableError as e:\n"
        "        out[name] = str(e)\n"
        "print(json.dumps(out))\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = json.loads(run_python(code, cwd=tmp_path, env=env).stdout.strip().splitlines()[-1])
    for name, spec in data.HUB_DATASETS.items():
        assert spec.path in out[name] and "HF_HUB_OFFLINE=1" in out[name] and "load_dataset" in out[name], (
            out[name]
        )


def test_hub_unreachable_fails_at_once(tmp_path):
    # not in offline mode, but nothing answers at the hub's address: the reachability probe fails
    # it before datasets is even imported (datasets itself would retry for ~25 s)
    code = (
        "import sys\n"
        "from bildlib import data\n"
        "try:\n"
        "    data.load_hub('wmt14', 'test')\n"
        "except data.DatasetUnavailableError as e:\n"
        "    print('datasets' in sys.modules, e)\n"
    )
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": ""}
    imported, msg = run_python(code, cwd=tmp_path, env=env).stdout.split(" ", 1)
    assert imported == "False"
    assert "'wmt/wmt14'" in msg and "not reachable" in msg and "HF_HUB_OFFLINE=1" in msg


def test_only_the_evaluation_splits_are_committed():
    # val and the test splits ship (with their README); train and hub datasets never live in git
    proc = subprocess.run(["git", "ls-files", "data"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    shipped = {f"data/multi30k/{s}.{lang}.gz" for s in ("val", "test_2016_flickr", "test_2017_flickr")
               for lang in ("de", "en")} | {"data/multi30k/README.md"}  # fmt: skip
    data_files = {f for f in proc.stdout.splitlines() if f.endswith(".gz") or "multi30k/" in f}
    assert data_files == shipped
