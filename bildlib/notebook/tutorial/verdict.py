"""Grades a submission cannot touch: the course's hidden tests run their checks in the grader's
process, never in the student's kernel (docs/teaching.md, *What the sandbox isolates*).

Any code in a kernel can change anything else in it: a cell can replace importlib.import_module,
patch the checks module or rewrite its file, so a check that runs in the student's kernel can be
made to pass. Here the hidden test cell only serves the student's function: it connects to the
grader (`Server`, a Unix socket in the folder the grader made for that kernel's sockets, its path
in BILD_VERDICT: the kernel has no network), and the grader runs the exercise's check
(grading.check) on a stand-in that calls the function in the kernel over the socket (`Student`).
The grader records the check's result as the exercise's points; what the kernel prints or raises
is only the student's feedback.

The messages are JSON frames (a 4-byte length, then UTF-8), never pickle: what comes from the
kernel is data (numbers, strings, lists, dicts, tensors as raw bytes with dtype and shape) and
is decoded as such. The grader's own objects that a check passes to the function (the models of
exercise 3, the cost function of exercise 4) stay in the grader: the kernel gets a handle
(`Proxy`) that may call start, forward and crop on a model, read its ids, eos and name, set its
width, and call a function; every result comes back by value.

    student's kernel                         grader (course.grade)
    hello {exercise}            ------->     check(n, Student(conn))
                                <-------     call {args, kwargs}
    invoke {ref, name, args}    ------->     model.forward(...)       (the function's own calls)
                                <-------     result {value}
    return {value} / raise      ------->     ... the check goes on
                                <-------     done {passed, message}
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
from pathlib import Path

from bildlib.notebook.tutorial.answers import refusing
from bildlib.notebook.tutorial.wire import KERNEL_FRAME, Gone, decode, encode, error, recv, send

ENV = "BILD_VERDICT"  # the grader's socket name, in the kernel's environment
CALL = {"start", "forward", "crop"}  # what a submission may call on a grader's model
READ = {"ids", "eos", "name", "width"}  # and read (by value)
WRITE = {"width"}  # and set (decoding's pair check sets it)
# What one exercise's check may be asked to spend on the kernel's behalf: a lent model's cache (a
# start's source, the tokens a forward adds to it) and calls on lent objects. The tutorial's pair
# decodes at most 64 new tokens; more is not a BiLD loop, and a 10,000-token call would cost the
# grader gigabytes (docs/teaching.md, *Limits*).
MAX_TOKENS, MAX_SOURCE, MAX_CALLS = 256, 512, 20_000


# --- the grader's side ---------------------------------------------------------------------------


class Refs:
    """The grader's objects lent to the kernel by handle: a model (start, forward, crop) or a
    function."""

    def __init__(self):
        self.objs: list[tuple[object, str]] = []
        self.calls = 0

    def add(self, obj) -> dict:
        kind = "model" if all(hasattr(obj, m) for m in CALL) else "function" if callable(obj) else None
        if kind is None:
            raise TypeError(f"the grader cannot lend a {type(obj).__name__}")
        self.objs.append((obj, kind))
        return {"$ref": len(self.objs) - 1, "kind": kind}

    def serve(self, msg: dict):
        """What the kernel asked of a lent object: the result, by value."""
        ref, name = msg.get("ref"), msg.get("name")
        if not isinstance(ref, int) or not 0 <= ref < len(self.objs):
            raise Gone(f"no lent object {ref!r}")
        obj, kind = self.objs[ref]
        op = msg["op"]
        if op == "invoke" and (kind == "function" and name == "__call__" or kind == "model" and name in CALL):
            self.calls += 1
            if self.calls > MAX_CALLS:
                raise RuntimeError(f"more than {MAX_CALLS} calls on the grader's objects in one exercise")
            f = obj if name == "__call__" else getattr(obj, name)
            args, kwargs = decode(msg.get("args", [])), decode(msg.get("kwargs", {"$dict": []}))
            if kind == "model":
                _within(obj, name, args, kwargs)
            return f(*args, **kwargs)
        if op == "getattr" and kind == "model" and name in READ:
            return getattr(obj, name)
        if op == "setattr" and kind == "model" and name in WRITE:
            return setattr(obj, name, decode(msg.get("value")))
        raise AttributeError(f"{name!r} of the grader's {kind} is not available to a submission")


def _within(model, name: str, args, kwargs) -> None:
    """A lent model's call within MAX_SOURCE and MAX_TOKENS, checked before the model runs."""
    arg = args[0] if args else next(iter(kwargs.values()), None) if isinstance(kwargs, dict) else None
    if name == "crop" or arg is None:
        return
    if not isinstance(arg, list | tuple) and not (hasattr(arg, "shape") and len(arg.shape) == 1):
        raise TypeError(f"{name}() takes a list of token ids, got {type(arg).__name__}")
    if name == "start" and len(arg) > MAX_SOURCE:
        raise ValueError(f"start() with {len(arg)} source tokens: the grader takes at most {MAX_SOURCE}")
    if name == "forward" and len(model.ids) + len(arg) > MAX_TOKENS:
        raise ValueError(f"forward() of {len(arg)} tokens after {len(model.ids)}: the grader's models take "
                         f"at most {MAX_TOKENS} in all (the tutorial decodes at most 64 new)")  # fmt: skip


class Student:
    """The student's function, seen from the grader: each call runs it in the kernel and answers
    its calls on lent objects until it returns or raises there."""

    def __init__(self, sock: socket.socket):
        self.sock, self.refs = sock, Refs()

    def __call__(self, *args, **kwargs):
        args, kwargs = encode(list(args), self.refs), encode(kwargs, self.refs)
        send(self.sock, {"op": "call", "args": args, "kwargs": kwargs})
        while True:
            msg = recv(self.sock)
            if msg["op"] == "return":
                return decode(msg.get("value"))
            if msg["op"] == "raise":
                raise error(msg, own_names=True)
            if msg["op"] not in ("invoke", "getattr", "setattr"):
                raise Gone(f"an unexpected {msg['op']!r}")
            try:
                out = {"op": "result", "value": encode(self.refs.serve(msg))}
            except Gone:
                raise
            except Exception as e:
                out = {"op": "error", "type": type(e).__name__, "message": str(e)}
            send(self.sock, out)


class Server:
    """The grader's end for one submission: `env` goes into the kernel's environment; each hidden
    test that connects gets its exercise checked here, once (`results`: exercise -> Result)."""

    def __init__(self, check, timeout: float, folder: Path):
        """check(n, fn) -> checks.Result; timeout: seconds the grader waits for one answer; folder:
        the kernel's sockets' folder (the only one it shares with the grader)."""
        self.check, self.timeout, self.results = check, timeout, {}
        self.name = str(Path(folder) / "verdict")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.name)
        os.chmod(self.name, 0o666)  # the kernel may run as nobody
        self.sock.listen(8)
        self.env = {ENV: self.name}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:  # closed whatever _one did: the kernel's hidden test then fails, saying so
                try:
                    self._one(conn)
                except Exception as e:  # noqa: BLE001 - a frame no check foresaw: refused, the next one served
                    _refuse(conn, f"the grader could not read the request ({type(e).__name__})")

    def _one(self, conn: socket.socket) -> None:
        from bildlib.notebook.tutorial.checks import EXERCISES, Result

        conn.settimeout(self.timeout)
        try:
            n = recv(conn).get("exercise")
        except Gone as e:
            return _refuse(conn, str(e))
        if type(n) is not int or not 1 <= n <= len(EXERCISES):  # bool is an int
            return _refuse(conn, f"no exercise {str(n)[:40]!r}: the exercises are 1 to {len(EXERCISES)}")
        if n in self.results:
            return _refuse(conn, f"exercise {n} was graded already")
        name = next(k for k in EXERCISES if k.startswith(f"{n} "))
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the checks print PASS/FAIL for notebooks
                r = self.check(n, Student(conn))
        except Gone as e:
            r = Result(name, False, f"the check could not finish: the kernel stopped answering ({e})")
        self.results[n] = r
        with contextlib.suppress(Gone):
            send(conn, {"op": "done", "passed": r.passed, "message": r.message})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
        with contextlib.suppress(OSError):
            os.unlink(self.name)


def _refuse(conn: socket.socket, why: str) -> None:
    """Tell the hidden test why it is not checked (it fails, saying so); a closed socket: nothing."""
    with contextlib.suppress(Gone):
        send(conn, {"op": "refused", "message": why})


# --- the kernel's side ---------------------------------------------------------------------------


class Peer:
    """The kernel's connection to the grader."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def ask(self, msg: dict):
        send(self.sock, msg)
        r = recv(self.sock, KERNEL_FRAME)
        if r["op"] == "result":
            return decode(r.get("value"), lambda ref, kind: Proxy(self, ref, kind))
        if r["op"] == "error":
            raise error(r, own_names=False)
        raise Gone(f"an unexpected {r['op']!r}")


class Proxy:
    """A grader's object lent to the submission (a model, a function)."""

    __slots__ = ("_peer", "_ref", "_kind")
    draft = None  # no native run for a lent model: decoding.draft's loop calls its forward

    def __init__(self, peer: Peer, ref: int, kind: str | None):
        for k, v in (("_peer", peer), ("_ref", ref), ("_kind", kind)):
            object.__setattr__(self, k, v)

    def _invoke(self, name: str, args, kwargs):
        return self._peer.ask({"op": "invoke", "ref": self._ref, "name": name, "args": encode(list(args)),
                               "kwargs": encode(kwargs)})  # fmt: skip

    def __getattr__(self, name: str):
        if name in CALL and self._kind == "model":
            return lambda *a, **k: self._invoke(name, a, k)
        return self._peer.ask({"op": "getattr", "ref": self._ref, "name": name})

    def __setattr__(self, name: str, value) -> None:
        self._peer.ask({"op": "setattr", "ref": self._ref, "name": name, "value": encode(value)})

    def __call__(self, *args, **kwargs):
        return self._invoke("__call__", args, kwargs)

    def __repr__(self) -> str:
        return f"<the grader's {self._kind}>"


def serve(n: int, fn, address: str | None = None) -> None:
    """The hidden test's side: serve fn to the grader for exercise n's check, then print its
    verdict, raising AssertionError (the cell's error) when it failed. address: the grader's
    socket's path (default: BILD_VERDICT). While fn runs, the package's own answers to the
    exercises refuse to run (refusing)."""
    address = address or os.environ.get(ENV)
    if not address:
        raise RuntimeError(f"no grader: {ENV} is not set (course.grade sets it; grading.exercise checks "
                           "a function in this kernel)")  # fmt: skip
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    peer = Peer(sock)
    lend = lambda ref, kind: Proxy(peer, ref, kind)  # noqa: E731
    with sock:
        send(sock, {"op": "hello", "exercise": n})
        while True:
            msg = recv(sock, KERNEL_FRAME)
            if msg["op"] == "done":
                print(f"{'PASS' if msg.get('passed') else 'FAIL'}  (graded) {msg.get('message')}")
                assert msg.get("passed"), msg.get("message")
                return
            if msg["op"] == "refused":
                raise AssertionError(f"the grader refused this hidden test: {msg.get('message')}")
            if msg["op"] != "call":
                raise Gone(f"an unexpected {msg['op']!r}")
            try:
                with refusing(n):
                    got = fn(*decode(msg["args"], lend), **decode(msg["kwargs"], lend))
                out = {"op": "return", "value": encode(got)}
            except Exception as e:  # the student's error: the check reports it
                out = {"op": "raise", "type": type(e).__name__, "message": str(e)}
            send(sock, out)
