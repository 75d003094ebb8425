"""Running megatron-core on a CPU: the places where it hard-codes CUDA, worked around on CPU only.

megatron-core 0.16.1 assumes a CUDA device in these places that a forward and backward pass reach:

1. ``torch.cuda.current_device()`` is called to place tensors: by RoPE
   (``RotaryEmbedding.__init__``/``get_emb`` move ``inv_freq`` there) and by the global memory buffer of
   the attention (``GlobalMemoryBuffer.get_tensor``). :func:`cpu_compat` makes it return the CPU device
   while megatron-core code runs; the original function is restored on exit.
2. The CUDA RNG tracker (``tensor_parallel.random``): ``model_parallel_cuda_manual_seed`` needs CUDA
   generators and ``get_cuda_rng_tracker().fork()`` (entered by the transformer block and the embedding)
   fails when no CUDA state was added. :func:`install_rng_tracker` installs megatron-core's own
   "inference" tracker, whose ``fork()`` does nothing. That is exact because the engine builds every model
   with ``hidden_dropout = attention_dropout = 0``: nothing inside a fork draws random numbers.
3. With context parallelism, RoPE selects this rank's positions with ``get_pos_emb_on_this_cp_rank``, which
   builds its index in pinned memory and moves it with ``.cuda()``. :func:`cpu_compat` replaces it (in
   ``rotary_pos_embedding``, where RoPE calls it) by
   :func:`rlcore_plugin_megatron.context_parallel.pos_emb_on_this_cp_rank`, which selects the same rows.

4. Activation recomputation (``recompute_granularity``: ``tensor_parallel.checkpoint`` and
   ``CheckpointWithoutOutput``) saves the CPU RNG state, the CUDA RNG state and the tracker's states before the
   forward pass and restores them before the recomputation in the backward pass; the CUDA state is read with
   ``torch.cuda.random.get_rng_state`` and written with ``torch.cuda._lazy_call``. :func:`cpu_compat` makes
   megatron-core's ``_get_cuda_rng_state`` return an empty state and ``_set_cuda_rng_state`` do nothing: there is
   no CUDA generator to save. The CPU generator, which is what a CPU run draws from, is still saved and restored
   by megatron-core, so the recomputed forward pass is the forward pass (``tests/test_recompute.py``).

5. Without Transformer Engine (any device), the MoE router's ``RouterGatingLinearFunction`` tests
   ``te_general_gemm is not None``, a name ``megatron.core.transformer.moe.moe_utils`` defines only when its
   Transformer Engine import succeeds (a ``NameError`` otherwise). :func:`define_missing_te_gemm` defines it as
   None, which selects the plain ``torch.matmul`` path megatron-core has for that case.

The first four are applied only when the engine's device is the CPU; on CUDA they do nothing (tests check it), and the
engine seeds megatron-core's CUDA RNG tracker as megatron-core expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _cpu_device() -> torch.device:
    """What ``torch.cuda.current_device()`` returns inside :func:`cpu_compat`."""
    return torch.device("cpu")


def _no_cuda_rng_state(device: object = "cuda", clone: bool = False, graph_safe: bool = False) -> torch.Tensor:
    """What megatron-core's ``_get_cuda_rng_state`` returns inside :func:`cpu_compat`: an empty state (there is no
    CUDA generator on a CPU run)."""
    return torch.empty(0, dtype=torch.uint8)


def _keep_no_cuda_rng_state(new_state: torch.Tensor, device: object = -1, graph_safe: bool = False) -> None:
    """What megatron-core's ``_set_cuda_rng_state`` does inside :func:`cpu_compat`: nothing (the state of
    :func:`_no_cuda_rng_state` is empty)."""


@contextmanager
def cpu_compat(device: torch.device) -> Iterator[None]:
    """While the block runs on a CPU ``device``, ``torch.cuda.current_device()`` returns the CPU device, RoPE
    selects context-parallel positions on the CPU and activation recomputation saves and restores no CUDA RNG
    state (workarounds 1, 3 and 4 of the module docstring). A no-op for any other device."""
    if device.type != "cpu":
        yield
        return
    from megatron.core.models.common.embeddings import rotary_pos_embedding
    from megatron.core.tensor_parallel import random

    from rlcore_plugin_megatron.context_parallel import pos_emb_on_this_cp_rank

    original = torch.cuda.current_device
    original_pos_emb = rotary_pos_embedding.get_pos_emb_on_this_cp_rank
    original_rng = random._get_cuda_rng_state, random._set_cuda_rng_state
    # deliberately a device where torch says an index: megatron passes the result on as its tensors' device
    torch.cuda.current_device = _cpu_device  # type: ignore[assignment]
    rotary_pos_embedding.get_pos_emb_on_this_cp_rank = pos_emb_on_this_cp_rank
    random._get_cuda_rng_state = _no_cuda_rng_state
    random._set_cuda_rng_state = _keep_no_cuda_rng_state
    try:
        yield
    finally:
        torch.cuda.current_device = original
        rotary_pos_embedding.get_pos_emb_on_this_cp_rank = original_pos_emb
        random._get_cuda_rng_state, random._set_cuda_rng_state = original_rng


def install_rng_tracker(device: torch.device) -> bool:
    """On a CPU ``device``, install megatron-core's no-op RNG tracker (workaround 2 of the module
    docstring) and return True; on any other device do nothing and return False."""
    if device.type != "cpu":
        return False
    from megatron.core.tensor_parallel.random import initialize_rng_tracker

    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    return True


def define_missing_te_gemm() -> None:
    """Define ``moe_utils.te_general_gemm = None`` when megatron-core's Transformer Engine import failed
    (workaround 5 of the module docstring); nothing when Transformer Engine is installed."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
