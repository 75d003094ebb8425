"""Process group, device, seeding and RNG state for one worker rank (gloo on CPU, nccl on CUDA)."""

from __future__ import annotations

import os
import random
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from rlcore.errors import RLCoreError

#: the config key of the device every role runs on (``cpu``, ``cuda``, ``auto``)
DEVICE_KEY = "trainer.device"


def resolve_device(name: str, rank: int = 0) -> torch.device:
    """The torch device for ``trainer.device`` (``auto``, ``cpu`` or ``cuda``) on this rank.

    ``auto`` picks CUDA when available. On CUDA the local device index is ``LOCAL_RANK`` when set (torchrun),
    else ``rank`` modulo the visible device count (one visible device per Ray actor gives index 0).
    """
    name = str(name or "auto").lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RLCoreError(f"{DEVICE_KEY}={name} but CUDA is not available; use {DEVICE_KEY}=cpu or auto")
        index = int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count()))
        return torch.device("cuda", index)
    raise RLCoreError(f"{DEVICE_KEY} must be auto, cpu or cuda, got {name!r}")


def init_process_group(rank: int, world_size: int, device: torch.device, timeout_s: float = 600.0) -> bool:
    """Initialise ``torch.distributed`` unless it already is; returns whether this call created the group.

    The backend is ``nccl`` on CUDA and ``gloo`` on CPU. ``MASTER_ADDR``/``MASTER_PORT`` (torchrun, Ray)
    are used when set; a single rank without them gets a private TCP store on a free local port.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise RLCoreError(f"invalid worker rank {rank} for world size {world_size}")
    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise RLCoreError(
                f"torch.distributed is already initialised as rank {dist.get_rank()} of {dist.get_world_size()}, "
                f"but the worker was created as rank {rank} of {world_size} (check trainer.nnodes and "
                "trainer.n_gpus_per_node)"
            )
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout)
    elif world_size == 1:
        store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
    else:
        raise RLCoreError(
            f"worker rank {rank} of {world_size}: a multi-rank run needs MASTER_ADDR and MASTER_PORT in the "
            "environment (set by torchrun and by rlcore's Ray executor)"
        )
    return True


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The python, numpy, torch CPU (and CUDA) random states, for checkpoints.

    Only plain python values and tensors, so that the result loads with ``torch.load(weights_only=True)``.
    """
    kind, key, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (
            kind,
            torch.from_numpy(np.asarray(key, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(cached_gaussian),
        ),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore states saved by :func:`rng_state`."""
    random.setstate(state["python"])
    kind, key, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
