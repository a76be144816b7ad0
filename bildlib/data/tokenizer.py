"""The joint De+En subword tokenizer of the embedded default (Unigram, like T5's SentencePiece).

Trained on Multi30k train (both sides) with the `tokenizers` library and saved as a Hugging
Face fast tokenizer, so `AutoTokenizer.from_pretrained(folder)` loads it like `t5-small`.
Ids follow T5: <pad> = 0, </s> = 1, <unk> = 2; every encoded sequence ends with </s>.

    python -m bildlib.data.tokenizer --out data/checkpoints/multi30k-tokenizer --vocab-size 8000
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from bildlib import REPO_ROOT

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPECIALS = [PAD, EOS, UNK]  # ids 0, 1, 2 as in T5
DEFAULT_DIR = REPO_ROOT / "data" / "checkpoints" / "multi30k-tokenizer"
MODEL_MAX_LENGTH = 512


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8000) -> PreTrainedTokenizerFast:
    """A Unigram tokenizer with T5's special-token layout, trained on texts."""
    if vocab_size <= len(SPECIALS):
        raise ValueError(f"vocab_size must be > {len(SPECIALS)}, got {vocab_size}")
    tok = Tokenizer(models.Unigram())
    # NFKC and whitespace collapsing, as T5's SentencePiece models normalise their input
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        unk_token=UNK,
        max_piece_length=16,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.model = models.Unigram(_canonical_vocab(json.loads(tok.to_str())["model"]["vocab"]), unk_id=2)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, tok.token_to_id(EOS))]
    )
    ids = [tok.token_to_id(t) for t in SPECIALS]
    if ids != [0, 1, 2]:
        raise RuntimeError(f"special tokens {SPECIALS} got ids {ids}, expected [0, 1, 2]")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def _canonical_vocab(vocab: list[list]) -> list[tuple[str, float]]:
    """The trained [piece, log-prob] list in an order that does not depend on the run.

    Two things vary between runs of the trainer: scores by ~1e-11 (its threads sum in varying
    order), and the order of the characters it appends after the learned pieces, which get
    scores on a ladder min - 1e-4 * i (then tied) in hash-map order. Round the scores, give the ladder one
    score, and sort ties by piece, so that a rebuild gives the same ids.
    """
    specials = [(p, s) for p, s in vocab[: len(SPECIALS)]]
    pieces = [(p, round(s, 6)) for p, s in vocab[len(SPECIALS) :]]
    i = len(pieces) - 1
    while i > 0 and min(abs(d := pieces[i - 1][1] - pieces[i][1]), abs(d - 1e-4)) < 1e-7:
        i -= 1
    floor = pieces[-1][1]
    pieces[i:] = [(p, floor) for p, _ in pieces[i:]]
    return specials + sorted(pieces, key=lambda ps: (-ps[1], ps[0]))


def normalise(tokenizer: PreTrainedTokenizerFast, text: str) -> str:
    """text as the tokenizer's own normaliser sees it: what a lossless round trip gives back."""
    return tokenizer.backend_tokenizer.normalizer.normalize_str(text)


def build_multi30k_tokenizer(out: Path = DEFAULT_DIR, vocab_size: int = 8000) -> PreTrainedTokenizerFast:
    from bildlib.data import load_multi30k

    train = load_multi30k("train")
    tokenizer = train_tokenizer((t for pair in train for t in pair), vocab_size)
    tokenizer.save_pretrained(out)
    return tokenizer


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="output folder (default: %(default)s)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    args = ap.parse_args(argv)
    tok = build_multi30k_tokenizer(args.out, args.vocab_size)
    print(f"saved a {len(tok)}-entry tokenizer to {args.out}")


if __name__ == "__main__":
    main()
