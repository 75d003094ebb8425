"""``actor_rollout_ref.model.use_fused_kernels``: log-probs, entropy and Σπ² from the hidden states in chunks
(:mod:`rlcore.modelkit.fused_logprobs`) equal the logits path, forward and backward, padded and packed, and
never keep a ``[tokens, vocab]`` tensor; the config switches fail clearly where they cannot run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit import sequence_parallel as sp_checks
from rlcore_testkit.contracts.backend import make_batch
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_run

from rlcore.algos import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from rlcore.errors import RLCoreError
from rlcore.modelkit.fused_logprobs import fused_head, fused_linear_logprobs
from rlcore.modelkit.hf_models import response_outputs

TEMPERATURE = 0.7


def _reference(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[..., 3]`` from the full logits, as the unfused path computes them."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / TEMPERATURE
    return torch.stack(
        (logprobs_from_logits(logits, labels), entropy_from_logits(logits), sum_pi_squared_from_logits(logits)), -1
    )


def test_chunks_equal_the_full_logits_forward_and_backward() -> None:
    """Chunks of 8 over 74 tokens (the last one partial), a bias and a temperature: results and the
    gradients of hidden states, weight and bias match the logits path to 1e-5 for any incoming gradient."""
    torch.manual_seed(0)
    # logits of a trained model's scale (std ≈ 2 after the temperature)
    hidden = (torch.randn(2, 37, 16) * 0.6).requires_grad_()
    weight = (torch.randn(96, 16) * 0.6).requires_grad_()
    bias = torch.randn(96, requires_grad=True)
    labels = torch.randint(0, 96, (2, 37))
    upstream = torch.randn(2, 37, 3)
    fused = fused_linear_logprobs(hidden, weight, bias, labels, TEMPERATURE, chunk=8)
    reference = _reference(hidden, weight, bias, labels)
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=1e-5)
    got = torch.autograd.grad((fused * upstream).sum(), (hidden, weight, bias))
    want = torch.autograd.grad((reference * upstream).sum(), (hidden, weight, bias))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_no_tokens_by_vocab_tensor_is_kept_for_backward() -> None:
    """The fused forward saves only the hidden states, the weight and the labels; the logits path saves
    ``[tokens, vocab]`` tensors (which shows the probe can see them)."""
    tokens, vocab = 64, 512
    hidden = torch.randn(tokens, 8, requires_grad=True)
    weight = torch.randn(vocab, 8, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))

    def largest_saved(compute: Any) -> int:
        sizes: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            compute()
        return max(sizes)

    fused = largest_saved(lambda: fused_linear_logprobs(hidden, weight, None, labels, 1.0, chunk=16))
    unfused = largest_saved(lambda: _reference(hidden, weight, torch.zeros(vocab), labels))
    assert fused == vocab * 8 and unfused >= tokens * vocab


def _ppo_loss(out: Any, batch: Any, old: torch.Tensor) -> torch.Tensor:
    """A clipped PPO surrogate with an entropy bonus, token-mean over the response mask."""
    mask = batch["response_mask"].float()
    advantages = torch.linspace(-1.0, 1.0, mask.numel()).reshape(mask.shape)
    ratio = torch.exp(out.log_probs - old)
    surrogate = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2))
    per_token = surrogate - 0.01 * out.entropy
    return (per_token * mask).sum() / mask.sum()


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_tiny_model_fused_equals_unfused(tiny_model_dir: Path, tiny_tokenizer: Any, packed: bool) -> None:
    """On the tiny Qwen2 (tied embeddings) the fused head gives the same log-probs, entropy and Σπ², and
    the same gradient of every parameter for a PPO loss with an entropy bonus."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    batch = make_batch(tiny_tokenizer)
    mask = batch["response_mask"].bool()
    old = torch.randn(mask.shape) * 0.1 - 3.0
    results = {}
    for fused in (None, "torch"):
        model.zero_grad()
        out = response_outputs(
            model, batch, TEMPERATURE, with_entropy=True, with_sum_pi_squared=True, remove_padding=packed, fused=fused
        )
        _ppo_loss(out, batch, old).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results[fused] = (out, grads)
    (plain, plain_grads), (chunked, chunked_grads) = results[None], results["torch"]
    for name in ("log_probs", "entropy", "sum_pi_squared"):
        torch.testing.assert_close(getattr(chunked, name)[mask], getattr(plain, name)[mask], atol=1e-5, rtol=1e-5)
    assert plain_grads.keys() == chunked_grads.keys() and "model.embed_tokens.weight" in plain_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
    assert model.get_output_embeddings().forward.__func__ is torch.nn.Linear.forward  # the head is restored


def test_a_head_that_rescales_logits_is_refused(tiny_model_dir: Path) -> None:
    """A model that soft-caps its logits after the LM head cannot take the fused path: a clear error."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(RLCoreError, match="final_logit_softcapping=30.0.*use_fused_kernels=false"):
        with fused_head(model, torch.zeros(1, 1, dtype=torch.long), 1.0, "torch"):
            pass


def _dry_run(*extra: str) -> Any:
    return dry_run(
        "data.train_files=x.parquet",
        "actor_rollout_ref.model.path=m",
        "trainer.device=cpu",
        "actor_rollout_ref.model.use_fused_kernels=true",
        *extra,
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ("actor_rollout_ref.model.fused_kernel_options.impl_backend=triton",),
            "actor_rollout_ref.model.fused_kernel_options.impl_backend=triton needs a CUDA device",
        ),
        (
            ("actor_rollout_ref.model.fused_kernel_options.impl_backend=cuda",),
            "actor_rollout_ref.model.fused_kernel_options.impl_backend='cuda' is not one of torch, triton",
        ),
        (
            (
                "actor_rollout_ref.actor.strategy=deepspeed",
                "actor_rollout_ref.model.fused_kernel_options.impl_backend=triton",
            ),
            "impl_backend=triton needs a CUDA device",
        ),
    ],
    ids=["triton-on-cpu", "unknown-backend", "deepspeed-triton"],
)
def test_switches_that_cannot_run_stop_the_dry_run(extra: tuple[str, ...], message: str) -> None:
    result = _dry_run(*extra)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_megatron_accepts_the_switch_with_a_note() -> None:
    """The Megatron engine's output layer gives the same log-probs: the switch is accepted and noted."""
    pytest.importorskip("rlcore_plugin_megatron")
    result = _dry_run("actor_rollout_ref.actor.strategy=megatron")
    assert result.exit_code == 0, result.output
    assert "use_fused_kernels=True changes nothing on the Megatron backend" in result.output


def test_torch_backend_passes_the_dry_run() -> None:
    result = _dry_run()
    assert result.exit_code == 0, result.output


def test_two_steps_with_fused_kernels(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real PPO steps of the tiny task through the FSDP engine with the fused head (packed, with an
    entropy bonus so that the entropy's backward runs)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "actor_rollout_ref.model.use_fused_kernels=true",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and math.isfinite(last["actor/entropy"])


def test_the_engine_takes_the_fused_path(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The FSDP engine really routes the actor through the fused head: a model whose config soft-caps the
    logits (which Qwen2 itself ignores) is refused there, naming the attribute."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "final_logit_softcapping": 30.0}))
    task = make_tiny_task(tmp_path / "task")
    with pytest.raises(RLCoreError, match="final_logit_softcapping=30.0"):
        tiny_run(tmp_path, model_dir, task, "actor_rollout_ref.model.use_fused_kernels=true")


FUSED = {"actor_rollout_ref.model.use_fused_kernels": True}


def test_fsdp_ulysses_ranks_with_fused_kernels_match_one_unfused_rank(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two gloo processes with Ulysses SP=2 and the fused head (each rank projects its slice of the
    sequence) give the log-probs, entropies, gradient norm and updated log-probs of one process on the
    logits path, padded and packed."""
    one = {packed: sp_checks.run_case("fsdp", tiny_model_dir, packed=packed) for packed in (False, True)}
    ranks = sp_checks.spawn_ranks("fsdp", tiny_model_dir, tmp_path, world_size=2, sp=2, overrides=FUSED)
    sp_checks.assert_matches(ranks, one, sp=2)


def test_deepspeed_engine_with_fused_kernels_matches_its_logits_path(tiny_model_dir: Path) -> None:
    """The DeepSpeed engine routes the actor through the fused head too: same log-probs, entropies,
    gradient norm and updated log-probs as without it (packed, one process)."""
    plain = {True: sp_checks.run_case("deepspeed", tiny_model_dir, packed=True)}
    fused = {True: sp_checks.run_case("deepspeed", tiny_model_dir, packed=True, overrides=FUSED)}
    sp_checks.assert_matches([fused], plain, sp=1)
    # the fused head really runs there: it refuses a config that soft-caps the logits (Qwen2 ignores it)
    softcapped = {**FUSED, "actor_rollout_ref.model.override_config": {"final_logit_softcapping": 30.0}}
    with pytest.raises(RLCoreError, match="final_logit_softcapping=30.0"):
        sp_checks.run_case("deepspeed", tiny_model_dir, packed=True, overrides=softcapped)
