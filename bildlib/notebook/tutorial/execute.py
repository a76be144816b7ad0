"""nbgrader's Python API as `make grade` runs it: the sandbox's kernel over Unix sockets (it has no
network), a timeout per cell, and a notebook's output kept up to limits.OUTPUT_BYTES.

nbclient keeps every output message a kernel sends in the notebook it holds in memory, so a cell
printing forever would grow the grader without end. BoundedExecute (nbgrader's Execute) counts the
bytes of each output it is handed and, past the limit, keeps none of them but one line saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from bildlib.notebook.tutorial import limits, sandbox

CUT = "[make grade kept the first {mib:g} MiB of this notebook's output and dropped the rest]"


def _size(msg: dict) -> int:
    c = msg.get("content", {})
    if msg.get("msg_type") == "stream":
        return len(c.get("text", ""))
    return len(json.dumps(c.get("data", c), default=str))


class BoundedExecute(Execute):
    """nbgrader's Execute, keeping at most output_bytes of a notebook's outputs."""

    output_bytes = Integer(limits.OUTPUT_BYTES, help="bytes of output kept per notebook").tag(config=True)

    def reset_execution_trackers(self) -> None:
        super().reset_execution_trackers()
        self.spent, self.cut = 0, False

    def output(self, outs, msg, display_id, cell_index):
        if msg.get("msg_type") in ("stream", "display_data", "execute_result", "update_display_data"):
            self.spent = getattr(self, "spent", 0) + _size(msg)
            if self.spent > self.output_bytes:
                if not getattr(self, "cut", False):
                    self.cut = True
                    text = "\n" + CUT.format(mib=self.output_bytes / (1 << 20)) + "\n"
                    outs.append(NotebookNode(output_type="stream", name="stderr", text=text))
                return None
        return super().output(outs, msg, display_id, cell_index)


def api(course: Path, timeout: int, sockets: Path):
    """nbgrader's Python API on course: timeout seconds per cell; the sandbox's kernel, whose
    sockets go in the folder sockets; BoundedExecute in place of Execute."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.converters import Autograde
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root, c.CourseDirectory.course_id = str(course), "bild-tutorial"
    c.Execute.timeout = int(timeout)
    c.Execute.kernel_name = sandbox.NAME
    c.Execute.raise_on_iopub_timeout = False  # a flood still in flight after its cell: drop it, go on
    c.KernelManager.transport, c.KernelManager.ip = "ipc", str(Path(sockets) / "k")
    c.KernelManager.shutdown_wait_time = 2.0  # a kernel that ignores the shutdown request: killed soon
    pre = Autograde.class_traits()["autograde_preprocessors"].default()
    pre = [BoundedExecute if p is Execute else p for p in pre]
    c.Autograde.autograde_preprocessors = pre
    return NbGraderAPI(config=c)


@contextlib.contextmanager
def environ(env: dict):
    """os.environ with env set (the kernel inherits it), restored after."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
