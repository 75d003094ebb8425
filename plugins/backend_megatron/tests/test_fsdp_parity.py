"""The same tiny model and batch on the megatron and the fsdp backends: equal log-probs, entropies, Σπ², and
equal log-probs after one PPO update (fp32 on the CPU); the same for a tiny Qwen3-MoE (megatron-core's MoE
layers against transformers' ``Qwen3MoeForCausalLM``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch


class Settings(TrainingBackendContract):
    """The contract's small config (not collected: no ``Test`` prefix); the backend is set per run."""

    component_name = "megatron"


def run(backend: str, model_dir: Path, tokenizer: Any) -> dict[str, Any]:
    """The full weights and the log-probs and entropies before, and log-probs after, one update with
    mixed-sign advantages and two micro-batches, on ``backend``."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = Settings.make_config(
        model_dir,
        **{
            "actor_rollout_ref.actor.strategy": backend,
            "critic.strategy": backend,
            "actor_rollout_ref.actor.entropy_coeff": 0.01,
            "actor_rollout_ref.actor.calculate_sum_pi_squared": True,
            "actor_rollout_ref.actor.optim.lr": 1e-3,
        },
    )
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        batch = make_batch(tokenizer)
        weights = {name: tensor.clone() for name, tensor in worker.full_state_dict().items()}
        before = worker.compute_log_prob(batch)
        probe = make_batch(tokenizer, seed=1)
        probe_before = worker.compute_log_prob(probe)["old_log_probs"]
        batch["old_log_probs"] = before["old_log_probs"]
        batch["advantages"] = torch.linspace(-1, 1, batch["responses"].numel()).view_as(batch["responses"])
        metrics = worker.update_actor(batch).meta["metrics"]
        after = worker.compute_log_prob(probe)["old_log_probs"]
        return {
            "log_probs": before["old_log_probs"],
            "entropy": before["entropys"],
            "sum_pi_squared": before["sum_pi_squared"],
            "probe_before": probe_before,
            "after": after,
            "grad_norm": torch.tensor(metrics["actor/grad_norm"]),
            "moe": {name: value for name, value in metrics.items() if name.startswith("actor/moe_")},
            "mask": batch["response_mask"].bool(),
            "probe_mask": probe["response_mask"].bool(),
            "weights": weights,
        }
    finally:
        worker.shutdown()


@pytest.fixture(scope="module", params=["qwen3_moe", "qwen2_moe"])
def moe_results(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer: Any
) -> dict[str, dict[str, torch.Tensor]]:
    """Both backends' results on a tiny Qwen3-MoE or Qwen2-MoE (2 layers, 8 experts, top-2; Qwen2-MoE with its
    sigmoid-gated shared expert) without a load-balancing loss (``router_aux_loss_coef=0``: transformers adds it
    only with ``output_router_logits``), so that the updates compare the policy loss's gradients alone."""
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    model_dir = make_tiny_moe_model_dir(tmp_path_factory.mktemp("moe"), family=request.param, router_aux_loss_coef=0.0)
    return {backend: run(backend, model_dir, tiny_tokenizer) for backend in ("fsdp", "megatron")}


@pytest.fixture(scope="module")
def results(tiny_model_dir: Path, tiny_tokenizer: Any) -> dict[str, dict[str, torch.Tensor]]:
    """Both backends' results on the same model and batch."""
    return {backend: run(backend, tiny_model_dir, tiny_tokenizer) for backend in ("fsdp", "megatron")}


def test_log_probs_and_entropies_equal_fsdp(results: dict[str, dict[str, torch.Tensor]]) -> None:
    """Before any update: log-probs and entropies equal to 1e-5 on the response tokens."""
    fsdp, megatron = results["fsdp"], results["megatron"]
    mask = fsdp["mask"]
    torch.testing.assert_close(megatron["log_probs"][mask], fsdp["log_probs"][mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(megatron["entropy"][mask], fsdp["entropy"][mask], atol=1e-5, rtol=0)


def test_sum_pi_squared_equals_fsdp(results: dict[str, dict[str, torch.Tensor]]) -> None:
    """``calculate_sum_pi_squared``: Σπ² equal to 1e-6 on the response tokens, and between π(y)² and 1."""
    fsdp, megatron = results["fsdp"], results["megatron"]
    mask = fsdp["mask"]
    torch.testing.assert_close(megatron["sum_pi_squared"][mask], fsdp["sum_pi_squared"][mask], atol=1e-6, rtol=0)
    spi = megatron["sum_pi_squared"][mask]
    assert (spi <= 1 + 1e-6).all() and (spi >= megatron["log_probs"][mask].exp() ** 2 - 1e-6).all()


def test_one_update_gives_the_same_policy(results: dict[str, dict[str, torch.Tensor]]) -> None:
    """After one PPO update (lr 1e-3): the same gradient norm and new log-probs equal to 1e-4."""
    fsdp, megatron = results["fsdp"], results["megatron"]
    assert float(megatron["grad_norm"]) == pytest.approx(float(fsdp["grad_norm"]), rel=1e-4)
    mask = fsdp["probe_mask"]
    assert (fsdp["after"] - fsdp["probe_before"])[mask].abs().max() > 1e-3, "the update changed nothing"
    torch.testing.assert_close(megatron["after"][mask], fsdp["after"][mask], atol=1e-4, rtol=0)


def test_moe_log_probs_and_update_equal_fsdp(moe_results: dict[str, dict[str, torch.Tensor]]) -> None:
    """The MoE model within the dense engines' tolerances: the same full weights (names, shapes, values: fused
    experts included), log-probs and entropies to 1e-5 before any update, the gradient norm (1e-4 relative), the
    MoE metrics of the update (the same load-balancing loss and expert load) and the new log-probs (1e-4) after one."""
    fsdp, megatron = moe_results["fsdp"], moe_results["megatron"]
    assert megatron["weights"].keys() == fsdp["weights"].keys()
    for name, tensor in fsdp["weights"].items():
        assert torch.equal(megatron["weights"][name], tensor), name
    mask = fsdp["mask"]
    torch.testing.assert_close(megatron["log_probs"][mask], fsdp["log_probs"][mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(megatron["entropy"][mask], fsdp["entropy"][mask], atol=1e-5, rtol=0)
    assert float(megatron["grad_norm"]) == pytest.approx(float(fsdp["grad_norm"]), rel=1e-4)
    assert set(megatron["moe"]) == set(fsdp["moe"]) == {"actor/moe_aux_loss", "actor/moe_load_max_over_mean"}
    for name, value in fsdp["moe"].items():
        assert megatron["moe"][name] == pytest.approx(value, rel=1e-5), name
    probe = fsdp["probe_mask"]
    assert (fsdp["after"] - fsdp["probe_before"])[probe].abs().max() > 1e-3, "the update changed nothing"
    torch.testing.assert_close(megatron["after"][probe], fsdp["after"][probe], atol=1e-4, rtol=0)
