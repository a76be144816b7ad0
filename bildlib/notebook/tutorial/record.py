"""What a decoder did to its models, call by call: `Recorded` wraps a model (an LM or a fake) and
logs every forward and crop; `story` turns the log of a greedy BiLD decode into the events the
tutorial draws (which model wrote each token, the small tokens dropped by fallbacks, those
discarded by rollbacks, and the calls on a time line).

    log = []
    s, l = Recorded(small, "S", log), Recorded(large, "L", log)
    out, trace = decoding.bild(s, l, src, fallback=0.5, rollback=1.0)
    st = story(log, out)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


class Recorded:
    """A model that appends ("forward", who, seq, t0, t1, p, y, k) and ("crop", who, n) to `log`:
    seq is the decoder sequence the call saw (its cache and the k new tokens), p and y are each
    row's max probability and argmax (k,). Everything else is the wrapped model's."""

    def __init__(self, model, who: str, log: list):
        object.__setattr__(self, "_m", model)
        object.__setattr__(self, "_who", who)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name):
        return getattr(self._m, name)

    def __setattr__(self, name, value):  # decoding's pair check sets width on both models
        setattr(self._m, name, value)

    def forward(self, tokens):
        seq = list(self._m.ids) + list(tokens)
        t0 = time.perf_counter()
        logits = self._m.forward(tokens)
        if logits.is_cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        p, y = logits.float().softmax(-1).max(-1)  # (k,) each
        self._log.append(("forward", self._who, seq, t0, t1, p.tolist(), y.tolist(), len(tokens)))
        return logits

    def draft(self, seq, run):
        """No native run (decoding.draft): the Python loop runs, so every call is logged here."""
        return None

    def crop(self, n: int) -> None:
        self._log.append(("crop", self._who, n))
        self._m.crop(n)


@dataclass
class Story:
    """A greedy BiLD decode told token by token. seq = [bos] + output."""

    seq: list[int] = field(default_factory=list)
    writer: list[str] = field(default_factory=list)  # per output token: "S" or "L"
    dropped: list[tuple[int, int, float]] = field(default_factory=list)  # fallbacks: (position, token, p_S)
    discarded: list[tuple[int, list[int]]] = field(default_factory=list)  # rollbacks: (position m, tokens)
    calls: list[tuple[str, float, float, int]] = field(default_factory=list)  # (who, start s, end s, tokens)


def story(log: list, output: list[int]) -> Story:
    """Replays the log of one greedy decode by decoding.bild (fresh models, one source). A small
    call drafts its last row's argmax: kept when the next call's sequence is longer than this
    one's, else dropped (a fallback). A large call writes its last row's argmax, unless crops
    follow it: a rollback to seq[:n], where it writes the argmax of the row that scored seq[n].
    Positions in the Story are output positions (seq index - 1)."""
    st = Story()
    calls = [i for i, e in enumerate(log) if e[0] == "forward"]
    draft = None  # (seq index, token, p) of the small model's last proposal
    for i in calls:
        _, who, seq, t0, t1, p, y, k = log[i]
        a = len(seq) - k  # the call ran seq[a:]
        st.calls.append((who, t0, t1, k))
        st.seq = st.seq or seq[:1]  # [bos]
        if draft is not None:
            _settle(st, draft, len(seq))
            draft = None
        if who == "S":
            draft = (len(seq), y[-1], p[-1])
            continue
        crops = [e[2] for e in _crops_after(log, i) if e[1] == "L"]
        if crops:  # a rollback: seq[n:] discarded, the large model writes seq[n]
            n = crops[0]
            st.discarded.append((n - 1, st.seq[n:]))
            del st.seq[n:], st.writer[n - 1 :]
            st.seq.append(y[n - 1 - a]), st.writer.append("L")  # row n-1-a scored seq[n]
        elif not (i == calls[-1] and len(st.seq) == len(output) + 1):  # else: the check at the end
            st.seq.append(y[-1]), st.writer.append("L")
    if draft is not None:
        _settle(st, draft, len(output) + 1)
    t_first = st.calls[0][1] if st.calls else 0.0
    st.calls = [(w, t0 - t_first, t1 - t_first, k) for w, t0, t1, k in st.calls]
    return st


def _settle(st: Story, draft: tuple, next_len: int) -> None:
    """The small model's last proposal, at seq index j: kept (as "S") when the next call's
    sequence (or the final one) reaches past j, else dropped by a fallback."""
    j, tok, p = draft
    if next_len > j:
        st.seq.append(tok), st.writer.append("S")
    else:
        st.dropped.append((j - 1, tok, p))


def _crops_after(log: list, i: int) -> list[tuple]:
    """The crop entries right after log entry i (a rollback crops both models)."""
    out = []
    for e in log[i + 1 :]:
        if e[0] != "crop":
            break
        out.append(e)
    return out
