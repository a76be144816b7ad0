import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

# Triton kernels run on CPU tensors in Triton's interpreter; it must be chosen before the first
# `import triton`. bildlib only sends CUDA tensors to Triton, so this changes nothing else.
os.environ.setdefault("TRITON_INTERPRET", "1")

# make test runs the files in several processes (pytest-xdist). Each gets its share of the CPUs
# as torch threads, set before every test (a test that wants another count sets its own), and
# OpenMP threads that wait asleep, not spinning: with more threads than CPUs (a test at 2 threads
# beside another process), spinning ones kept a test that takes 6 s alone running for minutes.
# The wait policy is set here, before this process or a subprocess of it loads OpenMP.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
CPU_SHARE = max(1, len(os.sched_getaffinity(0)) // WORKERS)
OPENMP_LOADED_FIRST = "torch" in sys.modules  # then the wait policy came too late (tests/test_workers.py)
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent
# Seconds a cell of a notebook the tests run may take (papermill's execution_timeout): a hang fails
# in minutes with the cell named, not at CI's limit; the slowest tiny cell takes well under a minute.
CELL_TIMEOUT = 300


def run_python(code: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter of this environment; fail the test with its stderr if it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def run_together(runs: list[dict], timeout: float = 600,
                 at_once: int = 2) -> list[subprocess.CompletedProcess]:
    """Fresh interpreters side by side, at_once at a time, one per dict of subprocess.Popen's
    arguments (args, cwd, env), their output in files (a full pipe would stall one). Each pays its
    own imports (seconds, on one CPU), so two CPUs run two in about the time of one. Every process
    has ended when this returns; one still running at `timeout` seconds in all is killed."""
    import tempfile
    import time

    procs: list[subprocess.Popen] = []
    files = []
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for i, kw in enumerate(runs):
                while sum(p.poll() is None for p in procs) >= at_once and time.monotonic() < deadline:
                    time.sleep(0.05)
                files.append((open(Path(tmp) / f"{i}.out", "w+"), open(Path(tmp) / f"{i}.err", "w+")))
                procs.append(subprocess.Popen(stdout=files[-1][0], stderr=files[-1][1], text=True, **kw))
            for p in procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass  # killed below; its returncode says so
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        done = []
        for p, (o, e) in zip(procs, files, strict=True):
            o.seek(0), e.seek(0)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, o.read(), e.read()))
            o.close(), e.close()
        return done


def as_git_has_it(path: Path) -> str:
    """The text git has staged for path (a clone: the committed file), or the file where git has
    none. A notebook saved with its outputs in a Jupyter other than make lab's keeps them on disk,
    and nbstripout's git filter (make setup) strips them when it is staged: the tests check what
    git holds. (Not `git status`: on a fresh clone it runs the filter on every notebook, 20 s.)"""
    rel = str(path.relative_to(REPO))
    show = subprocess.run(["git", "show", f":{rel}"], cwd=REPO, capture_output=True, text=True)
    return show.stdout if show.returncode == 0 else path.read_text()


def course_solutions():
    """course/solutions.py, the tutorial's solutions: outside the package, loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_solutions", REPO / "course" / "solutions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The folder holding the real Multi30k files. Absent, the test is skipped with a reason,
    except in CI (CI=true or BILD_REQUIRE_DATA=1), where missing data is a failure."""
    from bildlib.data.multi30k import multi30k_candidates

    for d in multi30k_candidates():  # the full dataset: the repo's data/multi30k/ ships no train
        if (d / "val.de.gz").is_file() and (d / "train.de.gz").is_file():
            return d
    msg = "Multi30k not found: set BILD_DATA_DIR to a folder holding multi30k/ (see docs/data-and-models.md)"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("BILD_REQUIRE_DATA") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


# Tiny random-init models sharing one word-level vocabulary (pad 0, eos 1, unk 2), saved as
# plain checkpoints so the tests load them the way users load real ones.
TINY_VOCAB = 40


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, TINY_VOCAB)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def tiny_model(kind: str, seed: int, d: int = 32, layers: int = 2, scale: float = 1.0):
    """A random model: kind t5 (encoder-decoder), gpt2 or llama (decoder-only). `scale`
    multiplies the output logits so that distributions are peaked like a trained model's."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    common = {"vocab_size": TINY_VOCAB, "eos_token_id": 1, "pad_token_id": 0}
    if kind == "t5":
        cfg = tf.T5Config(
            d_model=d,
            d_ff=2 * d,
            d_kv=d // 2,
            num_heads=2,
            num_layers=layers,
            decoder_start_token_id=0,
            tie_word_embeddings=False,
            **common,
        )
        m = tf.T5ForConditionalGeneration(cfg)
    elif kind == "gpt2":
        cfg = tf.GPT2Config(
            n_embd=d,
            n_layer=layers,
            n_head=2,
            n_positions=256,
            bos_token_id=1,
            tie_word_embeddings=False,
            **common,
        )
        m = tf.GPT2LMHeadModel(cfg)
    elif kind == "llama":
        cfg = tf.LlamaConfig(
            hidden_size=d,
            intermediate_size=2 * d,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=256,
            bos_token_id=1,
            tie_word_embeddings=False,
            **common,
        )
        m = tf.LlamaForCausalLM(cfg)
    else:
        raise ValueError(kind)
    with torch.no_grad():
        m.get_output_embeddings().weight.mul_(scale)  # untied: the inputs keep their scale
    return m.eval()


def perturbed(model, seed: int, noise: float):
    """A different model near `model`: each weight plus noise * its std of Gaussian noise."""
    import copy

    import torch

    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g) * p.std() * noise)
    return m


def save_tiny(model, path: Path) -> Path:
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


# --- a paper preset's plumbing with tiny models (tests of the experiment harness) ------------

PRESET = "iwslt2017-mt5"


def sentences(n, seed):
    r = random.Random(seed)
    return [" ".join(f"w{r.randrange(3, TINY_VOCAB)}" for _ in range(r.randrange(2, 7))) for _ in range(n)]


@pytest.fixture(scope="module")
def mod():
    """The native engine's built C++ module (bildlib.kernels.cpu), for the tests of its products."""
    from bildlib.kernels import cpu

    m = cpu.load()
    assert m is not None, cpu.why()
    return m


def rows_are_alone(product, x, res, threads: int) -> None:
    """A native product's row-invariance (tests/test_gemm.py, test_gemm8.py): at `threads` torch
    threads, product(x, res, relu) over the first k rows of x, for k of 2 to 13, plain, with relu and
    with a residual, equals its one-row calls bit for bit, and each row keeps its bits wherever it
    sits in the call (the rows reversed)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for k in (2, 3, 4, 5, 6, 7, 10, 12, 13):
            for relu, r in ((False, None), (True, None), (False, res[:k])):
                rows = product(x[:k], r, relu)
                one = lambda j, r=r: None if r is None else r[j : j + 1].clone()  # noqa: E731
                alone = [product(x[j : j + 1].clone(), one(j), relu) for j in range(k)]
                assert torch.equal(rows, torch.cat(alone)), (k, relu, r is not None)
                flipped = product(x[:k].flip(0), None if r is None else r.flip(0), relu)
                assert torch.equal(flipped, rows.flip(0)), (k, relu, r is not None)
    finally:
        torch.set_num_threads(old)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """The tiny models saved under PRESET's hub names (pass as $BILD_MODELS)."""
    from bildlib.experiments import presets

    root = tmp_path_factory.mktemp("hub")
    p = presets.PRESETS[PRESET]
    large = tiny_model("t5", seed=1, d=48, scale=0.3)
    save_tiny(large, root / p.large)
    save_tiny(perturbed(large, seed=2, noise=0.8), root / p.small)
    save_tiny(perturbed(large, seed=3, noise=0.4), root / p.aligned)
    return root


@pytest.fixture
def env(mirror, tmp_path, monkeypatch):
    """PRESET on the tiny models (max 10 new tokens) and 12 stand-in pairs; returns a results folder."""
    from bildlib import data
    from bildlib.experiments import presets

    monkeypatch.setenv("BILD_MODELS", str(mirror))
    monkeypatch.setitem(
        presets.PRESETS, PRESET, dataclasses.replace(presets.PRESETS[PRESET], max_new_tokens=10)
    )
    pairs = list(zip(sentences(12, 0), sentences(12, 1), strict=True))
    task = data.Task("iwslt2017", "translation", "de", "en")
    monkeypatch.setattr(data, "load", lambda name, split="val", n=None: data.Split(task, split, pairs[:n]))
    return tmp_path / "results"


@pytest.fixture(autouse=True)
def _cpu_share():
    """Each test starts at this process's share of torch threads (above), whatever the test
    before it left (a sweep keeps the count it was given)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        import torch

        torch.set_num_threads(CPU_SHARE)
    yield
