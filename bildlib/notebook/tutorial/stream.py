"""The graded kernel's stdout and stderr: ipykernel's OutStream, with what a cell prints held in
the kernel's memory bounded.

A cell printing without end in a tight loop (docs/teaching.md, *Limits*) grew the kernel by
what it printed, in two places, so on a fast CPU it died at the sandbox's 3 GiB and on a slower
one ran to its timeout:
- IPython (9.x) keeps every string a cell writes in its output history (InteractiveShell._tee
  sets the stream's `write` to a wrapper for the cell's run), as long as the kernel lives;
- ipykernel gathers what is written and sends it every 0.2 s from its IO thread, so between two
  sends it holds whatever the cell wrote meanwhile.

BoundedOutStream's `write` cannot be replaced on an instance (a property whose setter does
nothing), so IPython's wrapper never goes in and its output history holds no stream text; and a
write that leaves more than limits.STREAM_BYTES gathered flushes first, waiting for the IO thread,
so the writer goes no faster than the sends. What was sent and not yet read waits in ZeroMQ's
queue, at most its 1,000 messages (a PUB socket drops the rest; the grader keeps only the first
limits.OUTPUT_BYTES anyway). A flood then ends the same way on every machine: at its cell's
timeout. The sandbox starts the kernel with --IPKernelApp.outstream_class=sandbox.OUTSTREAM.
"""

from __future__ import annotations

from ipykernel.iostream import OutStream

from bildlib.notebook.tutorial import limits


class BoundedOutStream(OutStream):
    """OutStream holding at most STREAM_BYTES unsent; its `write` stays this class's."""

    def _write(self, string: str) -> int | None:
        n = OutStream.write(self, string)
        with self._buffer_lock:
            held = sum(b.tell() for b in self._buffers.values())
        if held > limits.STREAM_BYTES:
            self.flush()  # from the cell's thread: schedules the send and waits for it (flush_timeout)
        return n

    # print() and sys.stdout.write() find _write; `stream.write = f` (IPython's tee) does nothing
    write = property(lambda self: self._write, lambda self, value: None)
