"""What scorer processes print: relayed to the run's own output, capped per batch, never inherited by their
children.

Scorer processes (and whatever they start) write to pipes instead of the run's stdout and stderr, so a
scorer's leftover child cannot hold a pipeline that reads the run's output open (``rlcore run ... | tee``),
and a scorer that prints without end cannot flood it. :class:`OutputRelay` reads those pipes in a thread
and writes at most ``limit`` bytes per batch to the controller's stdout/stderr, counting the rest.
"""

from __future__ import annotations

import codecs
import os
import selectors
import sys
import threading
from typing import TextIO

#: after :meth:`OutputRelay.close`, at most this many more reads relay what the processes left in the pipes
_DRAIN_READS = 64


class OutputRelay:
    """Two pipes (stdout, stderr) shared by a pool's scorer processes and a thread that relays them.

    Args:
        limit: the most bytes relayed per batch (stdout and stderr together); None: no limit.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._out = os.pipe()
        self._err = os.pipe()
        self._stop = os.pipe()
        self._lock = threading.Lock()
        self._shown = 0
        self._cut = 0
        self._thread = threading.Thread(target=self._relay, name="rlcore-scorer-output", daemon=True)
        self._thread.start()

    @property
    def child_fds(self) -> tuple[int, int]:
        """The write ends a scorer process makes its fd 1 and 2."""
        return self._out[1], self._err[1]

    @property
    def parent_fds(self) -> tuple[int, ...]:
        """The controller's own ends, which a forked scorer process closes."""
        return self._out[0], self._err[0], *self._stop

    def new_batch(self) -> None:
        """Start a batch's budget (output that arrives late counts against the batch before, until then)."""
        with self._lock:
            self._shown = 0

    def take_cut(self) -> int:
        """The bytes cut since the previous call."""
        with self._lock:
            cut, self._cut = self._cut, 0
        return cut

    def _emit(self, data: bytes, stream: TextIO, decoder: codecs.IncrementalDecoder) -> None:
        with self._lock:
            room = len(data) if self.limit is None else max(self.limit - self._shown, 0)
            shown = data[:room]
            self._shown += len(shown)
            self._cut += len(data) - len(shown)
        if shown:
            try:
                stream.write(decoder.decode(shown))
                stream.flush()
            except (OSError, ValueError):  # the run's own stream is closed: nothing to show it on
                pass

    def _relay(self) -> None:
        """The thread: relay both pipes until :meth:`close` (then relay what is left and end)."""
        selector = selectors.DefaultSelector()
        targets = {self._out[0]: "stdout", self._err[0]: "stderr"}
        decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in targets}
        for fd in (*targets, self._stop[0]):
            selector.register(fd, selectors.EVENT_READ)
        stopping = False
        drains = 0  # after close(): what is left is relayed in a bounded number of reads
        while targets and drains < _DRAIN_READS:
            events = selector.select(0 if stopping else None)
            if not events and stopping:
                break
            drains += stopping
            for key, _ in events:
                if key.fd == self._stop[0]:
                    os.read(key.fd, 64)
                    selector.unregister(key.fd)
                    stopping = True
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fd)
                    del targets[key.fd]
                    continue
                self._emit(data, getattr(sys, targets[key.fd]), decoders[key.fd])
        selector.close()
        for fd in (self._out[0], self._err[0], self._stop[0]):
            os.close(fd)

    def close(self) -> None:
        """Stop relaying (call it after the scorer processes were killed): what they wrote is relayed, then the
        pipes are closed, so that a process still writing gets EPIPE instead of blocking."""
        os.write(self._stop[1], b"x")  # the thread reads until EOF, which needs the child ends closed too
        os.close(self._stop[1])
        for fd in self.child_fds:
            os.close(fd)
        self._thread.join(2.0)
