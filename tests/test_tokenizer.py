"""The committed Multi30k tokenizer: T5 layout, lossless round trip, reproducible build."""

import pytest
from transformers import AutoTokenizer

from bildlib import data
from bildlib.data.tokenizer import DEFAULT_DIR, build_multi30k_tokenizer, normalise, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(DEFAULT_DIR)


def test_t5_layout(tok):
    assert tok.is_fast
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert len(tok) == 8000
    batch = tok(["Ein Hund.", "Zwei Hunde laufen im Park."], padding=True)
    assert batch.input_ids[0][-1] == 0 and batch.input_ids[1][-1] == 1  # padded with 0; ends with EOS
    assert batch.input_ids[0].count(1) == 1


def test_round_trip_on_val(tok, multi30k_dir):
    val = data.load_multi30k("val", download_missing=False)
    texts = val.sources + val.references
    ok = sum(tok.decode(tok(t).input_ids, skip_special_tokens=True) == normalise(tok, t) for t in texts)
    assert ok / len(texts) >= 0.99, f"{ok}/{len(texts)} lines round-trip"


def test_normalise_is_nfkc_and_whitespace():
    t = train_tokenizer(["ein kleiner test", "noch ein test"] * 20, vocab_size=40)
    assert normalise(t, "  ein\u00a0 ﬁ  test ") == "ein fi test"


def test_rebuild_reproduces_committed_tokenizer(tmp_path, multi30k_dir):
    build_multi30k_tokenizer(tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (DEFAULT_DIR / "tokenizer.json").read_bytes()


def test_bad_vocab_size():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["a b c"], vocab_size=3)
