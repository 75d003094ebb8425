"""megatron-core's distributed checkpoints (the ``torch_dist`` format verl's ``dist_checkpointing_path`` names): the
engine's model chunks loaded from one, and one written from them.

Loading is megatron-core's own ``dist_checkpointing.load`` into each chunk's ``sharded_state_dict()`` (what verl's
``load_mcore_dist_weights`` does, unexpected keys allowed; a critic's chunks leave out the output layer, which its
value head replaces). Writing is megatron-core's format written synchronously through torch.distributed.checkpoint:
megatron-core's ``dist_checkpointing.save`` hands the tensors to an asynchronous writer that calls
``torch.cuda.synchronize()``, so it needs CUDA; this module translates the chunks' sharded tensors with megatron-core's
own functions and planner, saves them with ``torch.distributed.checkpoint.save``, the rest of the state in
``common.pt``, and the ``metadata.json`` that marks the folder (megatron-core's ``save_config``). megatron-core's
``load`` reads the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.core import CheckpointingConfig, save_config
from megatron.core.dist_checkpointing.dict_utils import extract_matching_values
from megatron.core.dist_checkpointing.mapping import ShardedBase, apply_factories
from megatron.core.dist_checkpointing.serialization import StrictHandling
from megatron.core.dist_checkpointing.strategies.torch import (
    MCoreSavePlanner,
    _replace_state_dict_keys_with_sharded_keys,
    mcore_to_pyt_state_dict,
)
from megatron.core.transformer.module import MegatronModule
from torch.distributed.checkpoint.api import CheckpointException

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.settings import DIST_BACKEND

#: the part of a GPT model's state its value head replaces (a critic loads everything else)
OUTPUT_LAYER = "output_layer"
#: the file of the non-tensor state (megatron-core's common backend)
COMMON_FILE = "common.pt"


def _sharded(chunk: MegatronModule, value_head: bool) -> dict[str, Any]:
    """The chunk's sharded state dict (without the output layer for a value model)."""
    state = chunk.sharded_state_dict()
    if value_head:
        state = {name: value for name, value in state.items() if OUTPUT_LAYER not in name}
    return state


def load_dist_checkpoint(chunks: Sequence[MegatronModule], directory: Path, key: str, *, value_head: bool) -> None:
    """Load every model chunk from the megatron-core distributed checkpoint in ``directory`` (in place); an error
    naming ``key`` and the folder when megatron-core cannot read it into these chunks (another model, other
    shapes)."""
    for chunk in chunks:
        try:
            dist_checkpointing.load(
                _sharded(chunk, value_head), str(directory), strict=StrictHandling.ASSUME_OK_UNEXPECTED
            )
        except (Exception, CheckpointException) as exc:  # torch's CheckpointException is a BaseException
            raise RLCoreError(
                f"{key}={directory}: megatron-core cannot load this distributed checkpoint into the model of "
                f"model.path: {type(exc).__name__}: {exc}"
            ) from exc


def save_dist_checkpoint(chunks: Sequence[MegatronModule], directory: Path) -> None:
    """Write the model chunks as a megatron-core distributed checkpoint (``torch_dist``) into ``directory``, on any
    device; every rank of the default process group calls it."""
    directory.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {}
    for chunk in chunks:
        state.update(chunk.sharded_state_dict())
    apply_factories(state)
    sharded, common = extract_matching_values(state, lambda value: isinstance(value, ShardedBase))
    renamed, _, _ = _replace_state_dict_keys_with_sharded_keys(sharded, True)
    dcp.save(
        mcore_to_pyt_state_dict(renamed, False),
        storage_writer=dcp.FileSystemWriter(str(directory)),
        planner=MCoreSavePlanner(flatten_state_dict=False, can_run_decentralized_global_plan=False),
    )
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        torch.save(common, directory / COMMON_FILE)
        save_config(CheckpointingConfig(DIST_BACKEND, 1), str(directory))
