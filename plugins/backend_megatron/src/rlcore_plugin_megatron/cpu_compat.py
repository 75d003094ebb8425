"""Running megatron-core on a CPU: the two places where it hard-codes CUDA, worked around on CPU only.

megatron-core 0.16.1 assumes a CUDA device in three places that a forward and backward pass reach:

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

4. Without Transformer Engine (any device), the MoE router's ``RouterGatingLinearFunction`` tests
   ``te_general_gemm is not None``, a name ``megatron.core.transformer.moe.moe_utils`` defines only when its
   Transformer Engine import succeeds (a ``NameError`` otherwise). :func:`define_missing_te_gemm` defines it as
   None, which selects the plain ``torch.matmul`` path megatron-core has for that case.

The first three are applied only when the engine's device is the CPU; on CUDA they do nothing (tests check it), and the
engine seeds megatron-core's CUDA RNG tracker as megatron-core expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _cpu_device() -> torch.device:
    """What ``torch.cuda.current_device()`` returns inside :func:`cpu_compat`."""
    return torch.device("cpu")


@contextmanager
def cpu_compat(device: torch.device) -> Iterator[None]:
    """While the block runs on a CPU ``device``, ``torch.cuda.current_device()`` returns the CPU device and
    RoPE selects context-parallel positions on the CPU (workarounds 1 and 3 of the module docstring). A no-op
    for any other device."""
    if device.type != "cpu":
        yield
        return
    from megatron.core.models.common.embeddings import rotary_pos_embedding

    from rlcore_plugin_megatron.context_parallel import pos_emb_on_this_cp_rank

    original = torch.cuda.current_device
    original_pos_emb = rotary_pos_embedding.get_pos_emb_on_this_cp_rank
    # deliberately a device where torch says an index: megatron passes the result on as its tensors' device
    torch.cuda.current_device = _cpu_device  # type: ignore[assignment]
    rotary_pos_embedding.get_pos_emb_on_this_cp_rank = pos_emb_on_this_cp_rank
    try:
        yield
    finally:
        torch.cuda.current_device = original
        rotary_pos_embedding.get_pos_emb_on_this_cp_rank = original_pos_emb


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
    (workaround 4 of the module docstring); nothing when Transformer Engine is installed."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
