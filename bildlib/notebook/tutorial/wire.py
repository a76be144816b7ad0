"""The wire of the course's grader (verdict): JSON frames, never pickle, and the values they carry.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON, one message, an object
with an "op". Values are JSON data, with tagged objects for what JSON lacks: a tensor (raw bytes
in base64, dtype and shape), a decoding Trace, a tuple, a dict with keys that are not strings, and
a handle to an object the grader lends ("$ref"). What the student's kernel sends is decoded as
data only: nothing in a message runs code.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import numbers
import re
import socket
import struct

import numpy as np
import torch

from bildlib.decoding.trace import Trace

MAX_FRAME = 1 << 22  # bytes the grader takes in one frame (an exercise returns at most a few KB)
KERNEL_FRAME = 1 << 28  # and the kernel (the grader's logits: up to verdict.MAX_TOKENS rows)
DTYPES = {str(d).removeprefix("torch."): d
          for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool)}  # fmt: skip
ERRORS = {e.__name__: e for e in (AttributeError, IndexError, KeyError, NotImplementedError, RuntimeError,
                                  TypeError, ValueError, ZeroDivisionError)}  # fmt: skip


class Gone(BaseException):
    """The other end stopped answering, or sent what is not the protocol. A BaseException, so that
    a check's `except Exception` does not take it for the student's own error."""


def send(sock: socket.socket, msg: dict) -> None:
    data = json.dumps(msg).encode()
    try:
        sock.sendall(struct.pack(">I", len(data)) + data)
    except OSError as e:
        raise Gone(f"the connection closed ({e})") from None


def recv(sock: socket.socket, limit: int = MAX_FRAME) -> dict:
    (n,) = struct.unpack(">I", _exact(sock, 4))
    if n > limit:
        raise Gone(f"a message of {n} bytes")
    try:
        msg = json.loads(_exact(sock, n))
    except ValueError:
        raise Gone("a message that is not JSON") from None
    except RecursionError:  # JSON nested deeper than the parser's stack
        raise Gone("a message nested too deep") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise Gone("a message without an op")
    return msg


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except OSError as e:  # a timeout included
            raise Gone(f"no answer ({e or type(e).__name__})") from None
        if not chunk:
            raise Gone("the connection closed")
        buf += chunk
    return bytes(buf)


def encode(v, refs=None):
    """v as JSON data; an object that is not data becomes a handle from refs.add (the grader's
    side, verdict.Refs), or a TypeError (the kernel's side: a submission returns data)."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, np.generic):
        return encode(v.item())
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if str(t.dtype).removeprefix("torch.") not in DTYPES:
            raise TypeError(f"a tensor of dtype {t.dtype}")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"$tensor": base64.b64encode(raw).decode(), "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape)}  # fmt: skip
    if isinstance(v, Trace):
        return {"$trace": {f.name: encode(getattr(v, f.name)) for f in dataclasses.fields(Trace)}}
    if isinstance(v, tuple):
        return {"$tuple": [encode(x, refs) for x in v]}
    if isinstance(v, list):
        return [encode(x, refs) for x in v]
    if isinstance(v, dict):
        return {"$dict": [[encode(k), encode(x, refs)] for k, x in v.items()]}
    if refs is not None:
        return refs.add(v)
    raise TypeError(f"{type(v).__name__} is not data the grader takes (numbers, strings, lists, dicts, "
                    "tensors)")  # fmt: skip


def decode(v, proxy=None):
    """encode's inverse. A handle becomes proxy(ref, kind) (the kernel's side, verdict.Proxy);
    where proxy is None (the grader's side) a handle is refused: the kernel has no objects to lend."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list):
        return [decode(x, proxy) for x in v]
    if not isinstance(v, dict):
        raise Gone(f"a value of type {type(v).__name__}")
    if "$tensor" in v:
        return _tensor(v)
    if "$trace" in v and isinstance(v["$trace"], dict):
        names = {f.name for f in dataclasses.fields(Trace)}
        return Trace(**{k: decode(x) for k, x in v["$trace"].items() if k in names})
    if "$tuple" in v and isinstance(v["$tuple"], list):
        return tuple(decode(x, proxy) for x in v["$tuple"])
    if "$dict" in v and isinstance(v["$dict"], list):
        try:
            return {decode(k): decode(x, proxy) for k, x in v["$dict"]}
        except (TypeError, ValueError):
            raise Gone("a dict that is not key-value pairs") from None
    if "$ref" in v and proxy is not None:
        return proxy(v["$ref"], v.get("kind"))
    raise Gone(f"a value the grader does not take ({sorted(v)[:3]})")


def _tensor(v: dict) -> torch.Tensor:
    dtype, shape = DTYPES.get(v.get("dtype")), v.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise Gone("a tensor without a known dtype and shape")
    try:
        raw = base64.b64decode(v["$tensor"], validate=True)
    except (ValueError, TypeError):
        raise Gone("a tensor whose bytes are not base64") from None
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise Gone("a tensor whose bytes do not fill its shape")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def error(msg: dict, own_names: bool) -> Exception:
    """The exception a message names: a builtin one by name; else (own_names: the student's
    exception, for the check's message) a class of that name, or RuntimeError."""
    name, text = str(msg.get("type", "RuntimeError")), str(msg.get("message", ""))[:2000]
    if name in ERRORS:
        return ERRORS[name](text)
    if own_names and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,60}", name):
        return type(name, (Exception,), {})(text)
    return RuntimeError(f"{name}: {text}")
