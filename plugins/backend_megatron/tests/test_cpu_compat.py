"""The CPU workarounds act on the CPU only and are undone afterwards."""

from __future__ import annotations

import torch
from rlcore_plugin_megatron.cpu_compat import cpu_compat, install_rng_tracker


def test_current_device_patched_on_cpu_and_restored() -> None:
    """Inside ``cpu_compat(cpu)`` megatron-core's ``torch.cuda.current_device()`` gives the CPU and RoPE's
    context-parallel selection is the CPU one; afterwards the originals are back, also after an error."""
    from megatron.core.models.common.embeddings import rotary_pos_embedding
    from megatron.core.tensor_parallel import random as mpu_random
    from rlcore_plugin_megatron.context_parallel import pos_emb_on_this_cp_rank

    original = torch.cuda.current_device
    original_pos_emb = rotary_pos_embedding.get_pos_emb_on_this_cp_rank
    original_rng = mpu_random._get_cuda_rng_state, mpu_random._set_cuda_rng_state
    with cpu_compat(torch.device("cpu")):
        assert torch.cuda.current_device() == torch.device("cpu")
        assert rotary_pos_embedding.get_pos_emb_on_this_cp_rank is pos_emb_on_this_cp_rank
        assert mpu_random._get_cuda_rng_state().numel() == 0
    assert torch.cuda.current_device is original
    assert rotary_pos_embedding.get_pos_emb_on_this_cp_rank is original_pos_emb
    assert (mpu_random._get_cuda_rng_state, mpu_random._set_cuda_rng_state) == original_rng
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
    original_rng = mpu_random._get_cuda_rng_state
    tracker = mpu_random._CUDA_RNG_STATE_TRACKER
    with cpu_compat(torch.device("cuda", 0)):
        assert torch.cuda.current_device is original
        assert mpu_random._get_cuda_rng_state is original_rng
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


def test_megatron_checkpoint_recomputes_with_the_forward_cpu_random_numbers() -> None:
    """megatron-core's ``tensor_parallel.checkpoint`` runs on the CPU inside ``cpu_compat``: the function runs
    again in the backward pass with the CPU generator as it was in the forward pass (a dropout draws the same
    mask), so the gradient equals the one without recomputation."""
    from megatron.core.tensor_parallel.random import checkpoint

    install_rng_tracker(torch.device("cpu"))
    weight = torch.randn(8, 8)
    runs = []

    def block(hidden: torch.Tensor) -> torch.Tensor:
        runs.append(1)
        return torch.nn.functional.dropout(hidden @ weight, p=0.5, training=True).tanh()

    grads = []
    for recompute in (False, True):
        hidden = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)).requires_grad_()
        torch.manual_seed(1)
        with cpu_compat(torch.device("cpu")):
            out = checkpoint(block, False, hidden) if recompute else block(hidden)
            torch.randn(100)  # the generator moves on between the forward and the backward pass
            out.sum().backward()
        grads.append(hidden.grad)
    assert len(runs) == 3  # once without, twice with recomputation
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
