"""The course's grader (tutorial.verdict, tutorial.wire): values cross the socket as data and come
back equal; what is not the protocol is refused; a grader's model lent to a submission answers
start, forward and crop and nothing else; the grader's verdict is the check's, whatever the
kernel's side does after. Both ends run in this process (the grader in its thread), as they do
across the sandbox under make grade (tests/test_course.py)."""

import json
import socket
import struct
import time

import numpy as np
import pytest
import torch

from bildlib.decoding.trace import Trace
from bildlib.notebook.tutorial import verdict, wire
from bildlib.notebook.tutorial.checks import Result, check_fallback
from bildlib.notebook.tutorial.fakes import Scripted


def test_values_cross_as_data_and_come_back_equal():
    values = [None, True, 3, -2.5, float("inf"), "x", [1, [2]], (1, "a"), {1: "one", "k": (2.0,)},
              np.float32(0.5), np.int64(7), np.bool_(True), Trace(source=["S", "L"], fallbacks=1)]
    for v in values:
        got = wire.decode(wire.encode(v))
        assert got == (v.item() if isinstance(v, np.generic) else v), v
    for dtype in wire.DTYPES.values():
        t = (torch.randn(3, 5) * 10).to(dtype)[:, 1:4]  # not contiguous
        back = wire.decode(wire.encode(t))
        assert back.dtype == dtype and torch.equal(back, t)
    assert wire.decode(wire.encode(torch.tensor(2.5))).shape == ()
    with pytest.raises(TypeError, match="not data"):
        wire.encode(object())


@pytest.mark.parametrize("bad", [
    {"$ref": 0, "kind": "model"},  # the kernel has no objects to lend the grader
    {"$tensor": "AAAA", "dtype": "float32", "shape": [2]},  # 3 bytes for 8
    {"$tensor": "AAAA", "dtype": "object", "shape": [1]},
    {"$dict": [[1]]},
    {"__reduce__": "os.system"},
])  # fmt: skip
def test_the_grader_refuses_what_is_not_data(bad):
    with pytest.raises(wire.Gone):
        wire.decode(bad)


def test_a_frame_that_is_not_the_protocol_ends_the_conversation():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", wire.MAX_FRAME + 1))
        with pytest.raises(wire.Gone, match="bytes"):
            wire.recv(b)
        a.sendall(struct.pack(">I", 3) + b"[1]")
        with pytest.raises(wire.Gone, match="without an op"):
            wire.recv(b)
        a.close()
        with pytest.raises(wire.Gone, match="closed"):
            wire.recv(b)


def test_malformed_hellos_are_refused_and_the_next_one_is_served(tmp_path):
    """Frames that parse but are not the protocol (nested past the parser's stack, an exercise
    that is a bool, a string, out of range, a list): each is refused with the reason, unchecked,
    and the server goes on to check the next hidden test."""
    deep = b'{"op": "hello", "exercise": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    frames = [deep] + [json.dumps({"op": "hello", "exercise": e}).encode()
                       for e in (True, "1", 0, 99, [1], None, 1.0)]  # fmt: skip
    srv, whys = verdict.Server(lambda n, fn: check_fallback(fn), timeout=30, folder=tmp_path), []
    try:
        for frame in frames:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(srv.name)
            with s:
                s.sendall(struct.pack(">I", len(frame)) + frame)
                said = wire.recv(s)
                assert said["op"] == "refused" and s.recv(1) == b"", (frame[:40], said)  # no call, closed
                whys.append(said["message"])
        assert srv.results == {} and srv.thread.is_alive()
        assert whys[:2] == ["a message nested too deep", "no exercise 'True': the exercises are 1 to 5"]
        verdict.serve(1, lambda logits, a: bool(logits.softmax(-1).max() < a), srv.name)
    finally:
        srv.close()
    assert srv.results[1].passed, srv.results[1]


def test_the_verdict_is_the_checks_whatever_the_kernel_does(tmp_path):
    """Exercise 1's real check over the socket: a right function passes, a blank is "not done
    yet"; a function returning an object that is not data fails with the reason."""
    srv = verdict.Server(lambda n, fn: check_fallback(fn), timeout=30, folder=tmp_path)
    try:
        verdict.serve(1, lambda logits, a: bool(logits.softmax(-1).max() < a), srv.name)
    finally:
        srv.close()
    assert srv.results[1].passed, srv.results[1]
    for fn, why in [(lambda *a: (_ for _ in ()).throw(NotImplementedError("exercise 1")), "not done yet"),
                    (lambda *a: object(), "your code raised TypeError")]:  # fmt: skip
        srv = verdict.Server(lambda n, f: check_fallback(f), timeout=30, folder=tmp_path)
        try:
            with pytest.raises(AssertionError, match=why):
                verdict.serve(1, fn, srv.name)
        finally:
            srv.close()
        assert not srv.results[1].passed and why in srv.results[1].message


def test_a_lent_model_answers_its_interface_only(tmp_path):
    """The grader lends its model by handle: start, forward and crop run in the grader, ids and
    eos come back by value, and the rest (its log, its class, a private field) is refused."""
    model = Scripted([5, 6, 7], name="lent")
    seen = {}

    def check(n, fn):
        out = fn(model)
        return Result("1 fallback", out == [0, 5, 6] and model.ids == [0, 5], repr(out))

    def student(m):
        bos = m.start([3])  # ids []
        logits = m.forward([bos])  # (1, V), by value: it predicts 5
        m.forward([int(logits[-1].argmax()), 6])  # ids [0, 5, 6]
        m.crop(2)  # ids [0, 5]
        seen["eos"], seen["repr"] = m.eos, repr(m)
        for name in ("script", "_bild", "next_logits", "__dict__"):
            with pytest.raises(AttributeError, match="not available to a submission"):
                getattr(m, name)
        with pytest.raises(AttributeError):
            m.eos = 3
        return [*m.ids, 6]

    srv = verdict.Server(check, timeout=30, folder=tmp_path)
    try:
        verdict.serve(1, student, srv.name)
    finally:
        srv.close()
    assert srv.results[1].passed, srv.results[1]
    assert seen == {"eos": model.eos, "repr": "<the grader's model>"} and model.eos != 3


def test_a_hidden_test_that_stops_answering_scores_nothing(tmp_path):
    """The kernel's end closes mid-check (an interrupted cell, a killed kernel): the grader's
    verdict is a failure that says so, and the next connection for the same exercise is ignored."""
    srv = verdict.Server(lambda n, fn: check_fallback(fn), timeout=30, folder=tmp_path)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(srv.name)
        wire.send(s, {"op": "hello", "exercise": 1})
        assert wire.recv(s)["op"] == "call"
        s.close()
        for _ in range(100):
            if 1 in srv.results:
                break
            time.sleep(0.05)
        assert not srv.results[1].passed and "stopped answering" in srv.results[1].message
        with pytest.raises(AssertionError, match="refused this hidden test: exercise 1 was graded already"):
            verdict.serve(1, lambda logits, a: bool(logits.softmax(-1).max() < a), srv.name)
    finally:
        srv.close()
    assert not srv.results[1].passed


def test_a_lent_model_refuses_calls_past_the_graders_budget(tmp_path):
    """What a kernel asks of the grader's model is bounded before the model runs: a 10,000-token
    forward (gigabytes of attention in the grader) and a source past MAX_SOURCE are refused with
    the bound, and the model's cache is unchanged; a call within the bounds still runs."""
    model = Scripted([5, 6, 7], name="lent")
    said = {}

    def check(n, fn):
        fn(model)
        return Result("3 BiLD loop", True, "ok")

    def student(m):
        m.start([3])
        for name, call in (("forward", lambda: m.forward([5] * 10_000)),
                           ("start", lambda: m.start([3] * (verdict.MAX_SOURCE + 1)))):  # fmt: skip
            with pytest.raises(ValueError, match="the grader") as e:
                call()
            said[name] = str(e.value)
        said["ids"] = m.ids
        m.forward([0] * verdict.MAX_TOKENS)  # the most it takes
        with pytest.raises(ValueError, match=f"at most {verdict.MAX_TOKENS} in all"):
            m.forward([0])

    srv = verdict.Server(check, timeout=30, folder=tmp_path)
    try:
        verdict.serve(3, student, srv.name)
    finally:
        srv.close()
    assert said["ids"] == [] and "10000 tokens" in said["forward"], said
    assert len(model.ids) == verdict.MAX_TOKENS


def test_the_packages_own_answers_refuse_while_a_function_is_graded(tmp_path):
    """A graded function that calls the package's answer (decoding.bild, first_rollback, the
    notebook's stand-ins), even through a name bound before the hidden test, gets an error that
    says so; outside the hidden test the package's functions run as before."""
    from bildlib import decoding
    from bildlib.decoding.bild import first_rollback
    from bildlib.notebook.tutorial import answers, lab

    bild = decoding.bild  # bound before, as `from bildlib.decoding import bild` in a cell
    errors = []

    def check(n, fn):
        return Result("4 predicted speedup", fn() is None, "ok")

    def student():
        for f in (lambda: bild(None, None, [3]), lambda: first_rollback(None, [], None, None),
                  lambda: lab.stand_in_predict(None, 1, 1.0, None),
                  lambda: lab.stand_in_row([], [], [], [])):  # fmt: skip
            with pytest.raises(RuntimeError, match="the package's answer to exercise") as e:
                f()
            errors.append(str(e.value))

    srv = verdict.Server(check, timeout=30, folder=tmp_path)
    try:
        verdict.serve(4, student, srv.name)
    finally:
        srv.close()
    assert len(errors) == 4, errors
    assert "bildlib.decoding.bild.bild is the package's answer to exercise 3" in errors[0]
    small, large = Scripted([5, 6, 1]), Scripted([5, 6, 1])
    assert decoding.bild(small, large, [3], 0.5, 1.0)[0] == [5, 6, 1]  # put back
    from bildlib.decoding.bild import BildSettings
    from bildlib.decoding.policy import Policy
    from bildlib.notebook.tutorial import checks

    def copied(logits, drafted, alpha_rb):  # tests/test_course.py's copying answer to exercise 2
        return first_rollback(logits, drafted, BildSettings(0.5, alpha_rb), Policy(None, logits.device))

    # outside a hidden test, each copied answer passes its exercise's check: refusing is what stops it
    assert checks.check_rollback(copied).passed and checks.check_predict(lab.stand_in_predict).passed
    assert checks.check_sweep_row(lab.stand_in_row).passed
    assert {f.__name__ for f, *_ in answers.functions()} == {"bild", "first_rollback", "stand_in_predict",
                                                             "stand_in_row"}  # fmt: skip
