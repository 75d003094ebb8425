"""The CPU workarounds act on the CPU only and are undone afterwards."""

from __future__ import annotations

import torch
from rlcore_plugin_megatron.cpu_compat import cpu_compat, install_rng_tracker


def test_current_device_patched_on_cpu_and_restored() -> None:
    """Inside ``cpu_compat(cpu)`` megatron-core's ``torch.cuda.current_device()`` gives the CPU and RoPE's
    context-parallel selection is the CPU one; afterwards the originals are back, also after an error."""
    from megatron.core.models.common.embeddings import rotary_pos_embedding
    from rlcore_plugin_megatron.context_parallel import pos_emb_on_this_cp_rank

    original = torch.cuda.current_device
    original_pos_emb = rotary_pos_embedding.get_pos_emb_on_this_cp_rank
    with cpu_compat(torch.device("cpu")):
        assert torch.cuda.current_device() == torch.device("cpu")
        assert rotary_pos_embedding.get_pos_emb_on_this_cp_rank is pos_emb_on_this_cp_rank
    assert torch.cuda.current_device is original
    assert rotary_pos_embedding.get_pos_emb_on_this_cp_rank is original_pos_emb
    try:
        with cpu_compat(torch.device("cpu")):
            raise KeyError("boom")
    except KeyError:
        pass
    assert torch.cuda.current_device is original


def test_no_op_on_cuda() -> None:
    """For a CUDA device nothing is patched and no RNG tracker is installed."""
    from megatron.core.tensor_parallel import random as mpu_random

    original = torch.cuda.current_device
    tracker = mpu_random._CUDA_RNG_STATE_TRACKER
    with cpu_compat(torch.device("cuda", 0)):
        assert torch.cuda.current_device is original
    assert install_rng_tracker(torch.device("cuda", 0)) is False
    assert mpu_random._CUDA_RNG_STATE_TRACKER is tracker


def test_rng_tracker_fork_is_a_no_op_on_cpu() -> None:
    """On the CPU the installed tracker's ``fork()`` runs without CUDA and leaves the CPU RNG alone."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    assert install_rng_tracker(torch.device("cpu")) is True
    state = torch.get_rng_state()
    with get_cuda_rng_tracker().fork():
        pass
    assert torch.equal(torch.get_rng_state(), state)
