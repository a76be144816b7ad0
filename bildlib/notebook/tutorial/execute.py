"""nbgrader's Python API as `make grade` runs it: the sandbox's kernel over Unix sockets (it has no
network), a timeout per cell, and a notebook's output kept up to limits.OUTPUT_BYTES.

nbclient keeps every output message a kernel sends in the notebook it holds in memory, so a cell
printing forever would grow the grader without end. BoundedExecute (nbgrader's Execute) counts the
bytes of each output it is handed and, past the limit, keeps none of them but one line saying so.
It also gives the course's own leading cells (the release's code cells before the first exercise,
unchanged, with no other cell before them: imports, models, the first decodes) at least
limits.SETUP_SECONDS, whatever the timeout a grader sets for a student's cells: no student code has
run by then, and loading torch and the models from a cold disk on a busy machine can take longer
than a student's cell is given.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer, List, Unicode

from bildlib.notebook.tutorial import limits, sandbox
from bildlib.notebook.tutorial.course import ASSIGNMENT

CUT = "[make grade kept the first {mib:g} MiB of this notebook's output and dropped the rest]"


def _size(msg: dict) -> int:
    c = msg.get("content", {})
    if msg.get("msg_type") == "stream":
        return len(c.get("text", ""))
    return len(json.dumps(c.get("data", c), default=str))


class BoundedExecute(Execute):
    """nbgrader's Execute, keeping at most output_bytes of a notebook's outputs."""

    output_bytes = Integer(limits.OUTPUT_BYTES, help="bytes of output kept per notebook").tag(config=True)
    setup_sources = List(Unicode(), help="the release's leading code cells, in order").tag(config=True)

    def reset_execution_trackers(self) -> None:
        super().reset_execution_trackers()
        self.spent, self.cut = 0, False
        self.timeout_func = self.timeout_of  # nbclient asks it for each cell's timeout

    def timeout_of(self, cell: NotebookNode) -> int | None:
        """The course's setup cell (setup_sources' run, unchanged, from the notebook's first code
        cell on): at least limits.SETUP_SECONDS; any other cell: timeout."""
        code = [c for c in self.nb.cells if c.cell_type == "code"]
        for c, source in zip(code, self.setup_sources, strict=False):
            if c.source != source:
                break
            if c is cell:
                return max(self.timeout, limits.SETUP_SECONDS) if self.timeout else None  # 0, None: none
        return self.timeout

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


def setup_sources(release: Path) -> list[str]:
    """The release notebook's code cells before its first exercise: locked, neither a solution nor
    a graded cell (nbgrader's metadata, which the course sets)."""
    out = []
    for c in json.loads(Path(release).read_text())["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c["cell_type"] != "code":
            continue
        if not meta.get("locked") or meta.get("solution") or meta.get("grade"):
            break
        out.append("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
    return out


def api(course: Path, timeout: int, sockets: Path, built: Path):
    """nbgrader's Python API on course: timeout seconds per cell (the setup cells of the release in
    built, the course tutorial.course built, at least limits.SETUP_SECONDS); the sandbox's kernel,
    whose sockets go in the folder sockets; BoundedExecute in place of Execute."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.converters import Autograde
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root, c.CourseDirectory.course_id = str(course), "bild-tutorial"
    c.Execute.timeout = int(timeout)
    c.BoundedExecute.setup_sources = setup_sources(Path(built, "release", ASSIGNMENT, f"{ASSIGNMENT}.ipynb"))
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
