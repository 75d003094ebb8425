"""Mixture-of-experts models in the shared training forward (:mod:`rlcore.modelkit.moe`): the load-balancing
loss and load metrics over valid tokens only, routing record and replay in the padded and packed layouts,
and the ``router_replay`` keys' checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.runs import dry_run
from rlcore_testkit.tiny import MOE_FAMILIES, make_tiny_moe_model_dir

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit import moe
from rlcore.modelkit.hf_models import response_outputs

MODEL_KEY = "actor_rollout_ref.model"


@pytest.fixture(scope="module", params=MOE_FAMILIES)
def moe_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny mixture-of-experts model of each family (2 layers, 8 experts, top-2)."""
    return make_tiny_moe_model_dir(tmp_path_factory.mktemp(request.param), family=request.param)


def load(path: Path) -> tuple[Any, moe.MoeRouting]:
    """The model at ``path`` in float32 with its routers hooked."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    routing = moe.attach(model, MODEL_KEY)
    assert routing is not None
    return model, routing


def make_batch(prompt: int = 5, response: int = 6, seed: int = 0) -> Batch:
    """Three rows with left-padded prompts and right-padded responses of unequal lengths."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 300, (3, prompt + response), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    mask[1, -3:] = 0
    mask[2, :1] = 0
    mask[2, -1:] = 0
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return Batch.from_dict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "responses": ids[:, prompt:]}
    )


def outputs(model: Any, routing: moe.MoeRouting, batch: Batch, **kwargs: Any) -> Any:
    """``response_outputs`` without gradients."""
    with torch.no_grad():
        return response_outputs(model, batch, 1.0, with_entropy=False, moe=routing, **kwargs)


def response_mask(batch: Batch) -> torch.Tensor:
    """Which response positions are attended."""
    return batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()


def test_aux_loss_is_the_models_own_over_valid_tokens(moe_dir: Path) -> None:
    """``moe_aux_loss`` equals transformers' ``aux_loss`` under the attention mask; more padding columns
    change neither it nor the load metric; the packed layout gives the same statistics."""
    model, routing = load(moe_dir)
    batch = make_batch()
    out = outputs(model, routing, batch)
    with torch.no_grad():
        reference = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            output_router_logits=True,
        ).aux_loss
    assert out.stats["moe_aux_loss"] == pytest.approx(float(reference), rel=1e-6)
    assert 1.0 <= out.stats["moe_load_max_over_mean"] <= routing.num_experts / routing.top_k
    assert "moe_dropped_fraction" not in out.stats, "Qwen MoE routers drop no tokens"
    pad = 4
    wider = Batch.from_dict(
        {
            "input_ids": torch.nn.functional.pad(batch["input_ids"], (pad, 0), value=7),
            "attention_mask": torch.nn.functional.pad(batch["attention_mask"], (pad, 0)),
            "position_ids": torch.nn.functional.pad(batch["position_ids"], (pad, 0)),
            "responses": batch["responses"],
        }
    )
    padded = outputs(model, routing, wider)
    assert padded.stats["moe_aux_loss"] == pytest.approx(out.stats["moe_aux_loss"], rel=1e-5)
    assert padded.stats["moe_load_max_over_mean"] == pytest.approx(out.stats["moe_load_max_over_mean"])
    packed = outputs(model, routing, batch, remove_padding=True)
    assert packed.stats["moe_aux_loss"] == pytest.approx(out.stats["moe_aux_loss"], rel=1e-5)
    assert packed.stats["moe_load_max_over_mean"] == pytest.approx(out.stats["moe_load_max_over_mean"])


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_replaying_the_recorded_routing_of_an_unchanged_model(moe_dir: Path, packed: bool) -> None:
    """The recorded routing is ``[B, T, L, k]`` with -1 outside the mask; replayed on the same weights it
    agrees everywhere and gives the same log-probs; entries of -1 are recomputed (no agreement to report)."""
    model, routing = load(moe_dir)
    batch = make_batch()
    recorded = outputs(model, routing, batch, record_routing=True, remove_padding=packed)
    routed = recorded.routed_experts
    assert routed.shape == (*batch["input_ids"].shape, routing.num_layers, routing.top_k)
    assert (routed[batch["attention_mask"] == 0] == -1).all()
    assert ((routed[batch["attention_mask"] == 1] >= 0) & (routed[batch["attention_mask"] == 1] < 8)).all()
    batch["routed_experts"] = routed
    replayed = outputs(model, routing, batch, replay_routing=True, remove_padding=packed)
    assert replayed.stats["router_replay_agreement"] == 1.0
    assert torch.equal(replayed.log_probs, recorded.log_probs)
    batch["routed_experts"] = torch.full_like(routed, -1)
    recomputed = outputs(model, routing, batch, replay_routing=True, remove_padding=packed)
    assert "router_replay_agreement" not in recomputed.stats
    assert torch.equal(recomputed.log_probs, recorded.log_probs)


def test_packed_and_padded_record_the_same_routing(moe_dir: Path) -> None:
    model, routing = load(moe_dir)
    batch = make_batch()
    padded = outputs(model, routing, batch, record_routing=True)
    packed = outputs(model, routing, batch, record_routing=True, remove_padding=True)
    assert torch.equal(padded.routed_experts, packed.routed_experts)


def test_padded_packed_row_routes_and_replays_as_the_unpadded_one(moe_dir: Path) -> None:
    """``pad_to_length``: the packed row's end padding goes through the routers but counts in no statistic and is
    laid out nowhere; the log-probs, statistics and recorded routing equal the unpadded packed row's, and
    replaying that routing with the padding agrees everywhere."""
    model, routing = load(moe_dir)
    batch = make_batch()
    plain = outputs(model, routing, batch, record_routing=True, remove_padding=True)
    padded = outputs(model, routing, batch, record_routing=True, remove_padding=True, pad_multiple=16)
    mask = response_mask(batch)
    torch.testing.assert_close(padded.log_probs[mask], plain.log_probs[mask], atol=1e-5, rtol=1e-5)
    assert torch.equal(padded.routed_experts, plain.routed_experts)
    assert padded.stats["moe_aux_loss"] == pytest.approx(plain.stats["moe_aux_loss"], rel=1e-5)
    assert padded.stats["moe_load_max_over_mean"] == pytest.approx(plain.stats["moe_load_max_over_mean"])
    batch["routed_experts"] = plain.routed_experts
    replayed = outputs(model, routing, batch, replay_routing=True, remove_padding=True, pad_multiple=16)
    assert replayed.stats["router_replay_agreement"] == 1.0


def unused_experts(routed: torch.Tensor, mask: torch.Tensor, num_experts: int) -> list[int]:
    """For each layer, an expert no valid token of the recording used."""
    chosen = []
    for layer in range(routed.shape[2]):
        used = set(routed[mask.bool()][:, layer].flatten().tolist())
        free = [e for e in range(num_experts) if e not in used]
        assert free, "every expert was used in a layer: choose a smaller batch"
        chosen.append(free[0])
    return chosen


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_replay_forces_the_recorded_experts_on_a_perturbed_router(moe_dir: Path, packed: bool) -> None:
    """Each layer's router is pushed towards an expert that no token chose: recomputed, the routing changes
    (agreement < 1, other log-probs); replayed, the tokens keep their old experts, whose renormalised weights do
    not depend on the pushed expert's logit, so the log-probs are the unperturbed ones."""
    model, routing = load(moe_dir)
    batch = make_batch(prompt=3, response=3).index([2])  # four valid tokens: some experts stay unused
    before = outputs(model, routing, batch, record_routing=True, remove_padding=packed)
    free = unused_experts(before.routed_experts, batch["attention_mask"], routing.num_experts)
    routers = moe.sparse_routers(model)
    with torch.no_grad():
        for router, expert in zip(routers, free):
            router.weight[expert] = torch.randn(router.weight.shape[1]) * 5.0
    batch["routed_experts"] = before.routed_experts
    recomputed = outputs(model, routing, batch, remove_padding=packed)
    replayed = outputs(model, routing, batch, replay_routing=True, remove_padding=packed)
    valid = response_mask(batch)
    assert replayed.stats["router_replay_agreement"] < 1.0
    assert not torch.allclose(recomputed.log_probs[valid], before.log_probs[valid], atol=1e-4)
    torch.testing.assert_close(replayed.log_probs[valid], before.log_probs[valid], rtol=0, atol=1e-5)


def test_replay_keeps_the_gradient_of_the_router(moe_dir: Path) -> None:
    """Replayed routing weights are the router's softmax probabilities: the router still learns, from both
    the language-model loss and the load-balancing loss."""
    model, routing = load(moe_dir)
    batch = make_batch()
    batch["routed_experts"] = outputs(model, routing, batch, record_routing=True).routed_experts
    out = response_outputs(model, batch, 1.0, with_entropy=False, moe=routing, replay_routing=True)
    loss = routing.add_aux_loss(-(out.log_probs * response_mask(batch)).sum(), micro_batches=2)
    loss.backward()
    for router in moe.sparse_routers(model):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_aux_loss_weight_and_its_switch(moe_dir: Path) -> None:
    """``add_aux_loss`` adds ``coef × aux / micro_batches``; a coefficient of 0 (``override_config``) adds
    nothing."""
    model, routing = load(moe_dir)
    batch = make_batch()
    response_outputs(model, batch, 1.0, with_entropy=False, moe=routing)
    aux = routing.current.aux_loss() if routing.current is not None else None
    assert aux is not None and aux.requires_grad
    zero = torch.zeros(())
    expected = routing.aux_loss_coef * float(aux.detach()) / 4
    assert float(routing.add_aux_loss(zero, 4).detach()) == pytest.approx(expected)
    routing.aux_loss_coef = 0.0
    assert routing.add_aux_loss(zero, 4) is zero


def test_bad_routing_inputs_are_errors(moe_dir: Path) -> None:
    model, routing = load(moe_dir)
    batch = make_batch()
    batch["routed_experts"] = torch.zeros((3, 11, routing.num_layers + 1, routing.top_k), dtype=torch.long)
    with pytest.raises(RLCoreError, match="routed_experts has .*recorded with another model"):
        outputs(model, routing, batch, replay_routing=True)
    batch["routed_experts"] = torch.full((3, 11, routing.num_layers, routing.top_k), 99)
    with pytest.raises(RLCoreError, match="names expert 99, but this model has 8 experts"):
        outputs(model, routing, batch, replay_routing=True)
    batch["routed_experts"] = torch.zeros((3, 10, routing.num_layers, routing.top_k), dtype=torch.long)
    with pytest.raises(RLCoreError, match=r"laid out as input_ids \(3, 11\)"):
        outputs(model, routing, batch, replay_routing=True)


def test_a_dense_model_has_no_routing(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    assert moe.attach(AutoModelForCausalLM.from_pretrained(tiny_model_dir), MODEL_KEY) is None


def test_an_unknown_moe_family_is_an_error_naming_it() -> None:
    """Mixtral's router takes the softmax over the top-k logits, not rlcore's known routers: refused by name."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    with pytest.raises(RLCoreError, match=r"model_type 'mixtral' is a mixture of experts .*MixtralTopKRouter"):
        moe.attach(MixtralForCausalLM(config), MODEL_KEY)


# ------------------------------------------------------------------ the router_replay keys
def replay_dry_run(tmp_path: Path, model_dir: Path, *extra: str) -> Any:
    """``rlcore run --dry-run`` of a tiny task on ``model_dir`` with ``extra``."""
    from rlcore_testkit.runs import make_tiny_task, tiny_overrides

    task = make_tiny_task(tmp_path / "task")
    return dry_run(*tiny_overrides(tmp_path, model_dir, task), *extra)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["actor_rollout_ref.actor.router_replay.mode=r3"], "router_replay.mode='r3' is not a mode: choose disabled, R2, R3"),
        (["actor_rollout_ref.actor.router_replay.mode=R3"], "mode=R3 replays the rollout's routing: set actor_rollout_ref.rollout.enable_rollout_routing_replay=true"),
        (["actor_rollout_ref.ref.router_replay.mode=R2"], "ref.router_replay.mode=R2 is not supported: the reference model's pass never replays"),
        (["actor_rollout_ref.actor.router_replay.record_file=/tmp/routes.pt"], "router_replay.record_file is not supported"),
    ],
    ids=["typo", "r3-without-rollout", "ref", "record-file"],
)  # fmt: skip
def test_bad_router_replay_settings_fail_the_dry_run(
    tmp_path: Path, moe_dir: Path, extra: list[str], message: str
) -> None:
    result = replay_dry_run(tmp_path, moe_dir, *extra)
    assert result.exit_code != 0
    assert message in result.output


def test_replay_on_a_dense_model_fails_the_dry_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    result = replay_dry_run(tmp_path, tiny_model_dir, "actor_rollout_ref.actor.router_replay.mode=R2")
    assert result.exit_code != 0
    assert (
        f"actor_rollout_ref.actor.router_replay.mode=R2 needs a mixture-of-experts model, but "
        f"actor_rollout_ref.model.path={tiny_model_dir} is a dense 'qwen2' model"
    ) in result.output


def test_r2_on_a_moe_model_passes_the_dry_run(tmp_path: Path, moe_dir: Path) -> None:
    result = replay_dry_run(tmp_path, moe_dir, "actor_rollout_ref.actor.router_replay.mode=R2")
    assert result.exit_code == 0, result.output


def test_r2_with_ulysses_passes_the_dry_run(tmp_path: Path) -> None:
    """verl's router-replay VeOmni script sets R2 with ``ulysses_sequence_parallel_size=2``."""
    model_dir = make_tiny_moe_model_dir(tmp_path / "model", family="qwen2_moe")
    extra = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "trainer.n_gpus_per_node=2"]
    result = replay_dry_run(tmp_path, model_dir, "actor_rollout_ref.actor.router_replay.mode=R2", *extra)
    assert result.exit_code == 0, result.output


def test_r2_through_the_actor_worker_under_ulysses_is_one_rank(tmp_path: Path) -> None:
    """The FSDP actor worker with ``router_replay.mode=R2`` and ``ulysses_sequence_parallel_size=2`` (two gloo
    ranks) computes the log-probs, records the routes, replays them in the update and reaches the log-probs
    after it as one rank does."""
    from rlcore_testkit import sequence_parallel as sp_checks

    model_dir = make_tiny_moe_model_dir(tmp_path / "model", family="qwen2_moe", router_aux_loss_coef=0.0)
    overrides = {"actor_rollout_ref.actor.router_replay.mode": "R2"}
    one = {
        packed: sp_checks.run_case("fsdp", model_dir, packed=packed, overrides=overrides) for packed in (False, True)
    }
    ranks = sp_checks.spawn_ranks("fsdp", model_dir, tmp_path, world_size=2, sp=2, overrides=overrides)
    sp_checks.assert_matches(ranks, one, sp=2)


def test_routing_record_and_replay_under_ulysses_equal_one_rank(tmp_path: Path) -> None:
    """Two gloo processes splitting each sequence (``ulysses_sequence_parallel_size=2``) record the same routes
    as one process, padded and packed (each rank gathers the group's slices), and replaying them after the
    routers changed gives one process's replayed log-probs (each rank replays its slice of the routes), which
    differ from routing afresh."""
    from tests.routing_ranks import routing_case, spawn_routing_ranks

    model_dir = make_tiny_moe_model_dir(tmp_path / "model", family="qwen2_moe", router_aux_loss_coef=0.0)
    one = {packed: routing_case(model_dir, packed=packed) for packed in (False, True)}
    ranks = spawn_routing_ranks(model_dir, tmp_path, world_size=2)
    for rank, result in enumerate(ranks):
        for packed, reference in one.items():
            got, mask = result[packed], reference["mask"]
            assert torch.equal(got["recorded"], reference["recorded"]), (rank, packed)
            assert torch.equal(got["replayed_routes"], reference["recorded"]), (rank, packed)
            torch.testing.assert_close(got["replayed"][mask], reference["replayed"][mask], atol=1e-5, rtol=0)
            torch.testing.assert_close(got["fresh"][mask], reference["fresh"][mask], atol=1e-5, rtol=0)
            assert not torch.allclose(got["replayed"][mask], got["fresh"][mask], atol=1e-3), (rank, packed)


def test_ulysses_splits_a_moe_model_like_one_rank(tmp_path: Path) -> None:
    """Two gloo processes with ``ulysses_sequence_parallel_size=2`` compute a Qwen2-MoE's log-probs, update
    and values as one process does (padded and packed). The load-balancing loss is left out
    (``router_aux_loss_coef=0``): under Ulysses each rank balances its own slice of the sequence. (Qwen3-MoE's
    forward does not take the mask mapping that rlcore's Ulysses attention passes.)"""
    from rlcore_testkit import sequence_parallel as sp_checks

    model_dir = make_tiny_moe_model_dir(tmp_path / "model", family="qwen2_moe", router_aux_loss_coef=0.0)
    one = {packed: sp_checks.run_case("fsdp", model_dir, packed=packed) for packed in (False, True)}
    ranks = sp_checks.spawn_ranks("fsdp", model_dir, tmp_path, world_size=2, sp=2)
    sp_checks.assert_matches(ranks, one, sp=2)


def test_ulysses_with_a_qwen3_moe_model_is_refused_by_the_engine(tmp_path: Path) -> None:
    from rlcore.config import load_config

    model_dir = make_tiny_moe_model_dir(tmp_path / "model")
    model, _ = load(model_dir)
    config = load_config(overrides=["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"])
    with pytest.raises(RLCoreError, match="ulysses_sequence_parallel_size=2 is not supported for the mixture-of"):
        moe.engine_routing(model, config, "actor", "actor_rollout_ref.actor", MODEL_KEY)


def test_activation_checkpointing_recomputes_the_replayed_routing(moe_dir: Path) -> None:
    """With gradient checkpointing the backward recomputes each layer under the same (replayed) routing: the
    gradients, the load-balancing loss's included, equal those without checkpointing."""
    from rlcore.modelkit.hf_models import enable_activation_checkpointing

    grads = []
    for checkpointing in (False, True):
        model, routing = load(moe_dir)
        model.train()
        if checkpointing:
            enable_activation_checkpointing(model)
        batch = make_batch()
        recorded = outputs(model, routing, batch, record_routing=True)
        with torch.no_grad():  # recomputed, the routing would differ: replay must hold in the backward
            for router in moe.sparse_routers(model):
                router.weight.mul_(-1.0)
        batch["routed_experts"] = recorded.routed_experts
        out = response_outputs(model, batch, 1.0, with_entropy=False, moe=routing, replay_routing=True)
        routing.add_aux_loss(-(out.log_probs * response_mask(batch)).sum(), micro_batches=1).backward()
        routing.end()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-7, msg=name)
