"""Reading a sandboxed program's pipes: everything is read (so it never blocks on a full pipe), the first
bytes are kept, the rest is counted."""

from __future__ import annotations

import os
import selectors
import time
from dataclasses import dataclass


@dataclass
class Stream:
    """The first ``keep`` bytes of one pipe, and how many more were read and dropped."""

    keep: int
    data: bytes = b""
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        """Keep what fits of ``chunk``, count the rest."""
        room = self.keep - len(self.data)
        self.data += chunk[:room] if room > 0 else b""
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        """The kept bytes as text, with a marker saying how many were cut."""
        text = self.data.decode(errors="replace")
        return text + (f"\n[... {self.dropped} more bytes cut]" if self.dropped else "")

    def lines(self) -> list[str]:
        """The kept bytes as lines (for the report channels)."""
        return self.data.decode(errors="replace").splitlines()


def read_until(pipes: dict[str, int], streams: dict[str, Stream], deadline: float) -> bool:
    """Read the named pipe descriptors into ``streams`` until each is at its end or ``deadline``
    (``time.monotonic``) passes; whether the deadline passed first."""
    selector = selectors.DefaultSelector()
    for name, fd in pipes.items():
        selector.register(fd, selectors.EVENT_READ, name)
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for key, _ in selector.select(timeout=remaining):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.data].add(chunk)
                else:
                    selector.unregister(key.fd)
        return False
    finally:
        selector.close()
