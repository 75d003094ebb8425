"""Which run wrote a checkpoint: the run's identity, and the ``run.json`` record each checkpoint carries.

Every run has a :class:`RunIdentity` (a random run id, the host, the process id, the start time, the run
directory and the fingerprint of what defines the run: see :mod:`rlcore.checkpoint.fingerprint`) and a *lineage*: the run id of the run that started the line of checkpoints it continues. A fresh
run starts its own lineage; a run that resumes a checkpoint adopts that checkpoint's lineage
(:meth:`RunIdentity.adopt`). Each checkpoint records the run that wrote it and its lineage in ``run.json``,
so that a run never replaces a checkpoint of another lineage (see
:func:`rlcore.checkpoint.manager.claim_checkpoints`).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

#: the record of the run that wrote a checkpoint, inside the checkpoint folder
RUN_FILE = "run.json"


@dataclass
class RunIdentity:
    """Who a run is, as named in lock files, checkpoint records and messages.

    Attributes:
        run_id: a random id of this run.
        run_dir: the run directory.
        host: the host name.
        pid: the controller's process id.
        started: the start time (ISO 8601, local time with its offset).
        lineage: the run id of the run whose checkpoints this run continues (its own when it starts fresh).
        fingerprint: what defines the run (:func:`rlcore.checkpoint.fingerprint.run_fingerprint`), recorded in
            each checkpoint; None until the run has worked it out.
        unrecorded_home: the folder of the checkpoint this run resumed when that checkpoint records no run
            (written before rlcore recorded runs): the checkpoints without ``run.json`` in that folder, and only
            there, count as its own lineage.
    """

    run_id: str
    run_dir: str
    host: str
    pid: int
    started: str
    lineage: str
    fingerprint: dict[str, Any] | None = None
    unrecorded_home: str | None = None

    @classmethod
    def new(cls, run_dir: str | Path) -> RunIdentity:
        """The identity of a run starting now in this process."""
        run_id = uuid.uuid4().hex[:16]
        return cls(
            run_id=run_id,
            run_dir=str(run_dir),
            host=socket.gethostname(),
            pid=os.getpid(),
            started=datetime.now().astimezone().isoformat(timespec="seconds"),
            lineage=run_id,
        )

    def record(self) -> dict[str, Any]:
        """What ``run.json`` and the lock file hold (the fingerprint once the run has one)."""
        record: dict[str, Any] = {
            "run_id": self.run_id,
            "lineage": self.lineage,
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "run_dir": self.run_dir,
        }
        if self.fingerprint is not None:
            record["fingerprint"] = self.fingerprint
        return record

    def adopt(self, checkpoint: Path) -> None:
        """Continue the lineage of the checkpoint this run resumes from."""
        record = read_run_record(checkpoint)
        if record is None:
            self.unrecorded_home = str(Path(checkpoint).resolve().parent)
        elif record.get("lineage"):
            self.lineage = str(record["lineage"])

    def owns(self, checkpoint: Path) -> bool:
        """Whether the checkpoint folder ``checkpoint`` belongs to this run's lineage: its ``run.json`` names the
        lineage, or it has none and lies in the folder of the unrecorded checkpoint this run resumed."""
        record = read_run_record(checkpoint)
        if record is None:
            return self.unrecorded_home is not None and str(Path(checkpoint).resolve().parent) == self.unrecorded_home
        return record.get("lineage") == self.lineage


def describe_run(record: Mapping[str, Any] | None) -> str:
    """``run 3f2a... (PID 1234 on host h, started ..., run directory ...)`` for messages."""
    if not record:
        return "a run whose details are unknown"
    details = [
        f"PID {record.get('pid', '?')} on host {record.get('host', '?')}",
        f"started {record.get('started', '?')}",
        f"run directory {record.get('run_dir', '?')}",
    ]
    return f"run {record.get('run_id', '?')} ({', '.join(details)})"


def describe_writer(record: Mapping[str, Any] | None) -> str:
    """The run that wrote a checkpoint with this ``run.json`` record (None: none), for messages."""
    return describe_run(record) if record else "a run before rlcore recorded which run wrote a checkpoint"


def read_run_record(folder: Path) -> dict[str, Any] | None:
    """The ``run.json`` of a checkpoint folder; None when it has none (written before rlcore recorded runs)
    or it cannot be read (its checksum check names a damaged file)."""
    try:
        record = json.loads((Path(folder) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_run_record(folder: Path, identity: RunIdentity) -> None:
    """Write ``folder/run.json`` for ``identity`` (part of the checkpoint, covered by its checksums)."""
    (Path(folder) / RUN_FILE).write_text(json.dumps(identity.record(), indent=2))
