"""The fused sampling kernel (:mod:`rlcore_plugin_hf.sampling_kernel`, one read of the logits per step on CUDA)
picks the tokens the torch sampler picks from the same counter-based noise, with log-probs equal to float32
rounding. Here it runs in triton's interpreter on CPU tensors; on CUDA (skipped without it) compiled."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from rlcore_plugin_hf.row_noise import RowNoise
from rlcore_plugin_hf.sampler import sample_next_tokens

from rlcore.rollout.sampling import SamplingParams

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton package")
ROOT = Path(__file__).resolve().parents[1]

SETTINGS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=20),
    SamplingParams(temperature=1.3, top_p=0.8),
    SamplingParams(temperature=0.9, top_k=50, top_p=0.6),
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.7, do_sample=False),
]


def compare(module: ModuleType, device: str, dtype: torch.dtype, params: SamplingParams) -> None:
    """Three steps of 4 rows over a 2500-token vocabulary (more than one of the kernel's blocks, not a
    multiple of it): the same tokens as the torch sampler, the log-probs to float32 rounding."""
    torch.manual_seed(0)
    rows, vocab = 4, 2500
    noise = RowNoise(rows, vocab, 3, torch.device(device))
    noise.seed(list(range(7, 7 + rows)))
    for step in range(3):
        logits = (3 * torch.randn(rows, vocab)).to(device=device, dtype=dtype)
        index = torch.tensor([step], device=device)
        gumbel = None if params.greedy else noise.gumbel(index)
        expected, expected_logprobs = sample_next_tokens(logits, params, None, with_logprobs=True, gumbel=gumbel)
        keys = None if params.greedy else noise.step_keys(index)
        tokens, logprobs = module.fused_sample(logits, params, keys, noise.codes)
        assert torch.equal(tokens, expected), (params, step)
        assert expected_logprobs is not None
        torch.testing.assert_close(logprobs, expected_logprobs, atol=1e-5, rtol=0)


def test_the_kernel_samples_what_the_torch_sampler_samples() -> None:
    """In triton's interpreter (a fresh process: the interpreter must be chosen before triton is first
    imported), every sampling setting, float32 and bfloat16 logits."""
    script = (
        "import torch, rlcore_plugin_hf.sampling_kernel as kernel\n"
        "from tests.test_sampling_kernel import SETTINGS, compare\n"
        "for params in SETTINGS:\n"
        "    for dtype in (torch.float32, torch.bfloat16):\n"
        "        compare(kernel, 'cpu', dtype, params)\n"
        "print('compared', len(SETTINGS))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"compared {len(SETTINGS)}" in done.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernel needs CUDA")
@pytest.mark.parametrize("params", SETTINGS)
def test_the_compiled_kernel_samples_what_the_torch_sampler_samples_on_cuda(params: SamplingParams) -> None:
    """Compiled on CUDA, against the torch sampler on CUDA (float32 logits)."""
    from rlcore_plugin_hf import sampling_kernel

    compare(sampling_kernel, "cuda", torch.float32, params)
