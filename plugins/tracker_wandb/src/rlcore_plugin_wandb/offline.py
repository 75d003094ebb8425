"""Reading a wandb offline run file back (``offline-run-*/run-*.wandb``), which wandb has no public reader
for: its records, its history rows, and waiting until wandb's service has finished writing it. Used by the
tests, and handy to check an offline run before ``wandb sync``."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any


def read_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file (LevelDB log format: 32 KiB blocks of checksum/length/type chunks)."""
    # wandb re-exports Record from the module of the installed protobuf major version (v5/v6/v7) by a star
    # import chosen at run time, which mypy cannot follow
    from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]

    data = path.read_bytes()
    position, block, records, pending = 7, 32768, [], b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # block trailer
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if position + 7 + length > len(data):  # a record still being written
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST
            records.append(Record.FromString(pending))
            pending = b""
    return records


def history(records: list[Any]) -> list[dict[str, Any]]:
    """The history rows (one per logged step) of a wandb run's records."""
    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for record in records
        if record.WhichOneof("record_type") == "history"
    ]


def offline_records(path: Path, timeout: float = 30.0) -> list[Any]:
    """The records of an offline run file, once wandb's service has written its ``exit`` record: the
    service writes the file asynchronously and ``run.finish()`` can return before it is on disk."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)
