"""Deterministic prompt uids: the same run, interrupted and resumed or not, gives every prompt the same uid."""

from __future__ import annotations

import hashlib
import uuid


def prompt_uids(seed: int, epoch: int, batch_index: int, count: int) -> list[str]:
    """UUID-formatted uids for the ``count`` prompts of batch ``batch_index`` of ``epoch``.

    A uid groups the responses sampled from one prompt (GRPO's groups, batch filters). It is derived from
    the run's seed and the data loader position of the batch, which a checkpoint restores, so a resumed
    run hands out the uids of the uninterrupted one; distinct batches of a run never share a uid.
    """
    uids = []
    for row in range(count):
        digest = hashlib.sha256(f"{seed}:{epoch}:{batch_index}:{row}".encode()).digest()
        uids.append(str(uuid.UUID(bytes=digest[:16], version=4)))
    return uids
