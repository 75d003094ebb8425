"""``actor_rollout_ref.actor.use_prefix_grouper``: the shared-prompt forward (:mod:`rlcore.modelkit.prefix_grouper`)
gives the plain forward's log-probs, entropies, Σπ² and gradients on a tiny model; micro-batches and the
balanced batch keep a prompt's samples together; what it cannot run with is refused by name; and a real GRPO
run trains with it through the FSDP engine."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_run
from rlcore_testkit.tiny import build_model, build_tokenizer

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit.hf_models import enable_activation_checkpointing, response_outputs
from rlcore.modelkit.prefix_grouper import prompt_groups
from rlcore.workers.balance import group_balance_order
from rlcore.workers.micro_batches import plan_micro_batches

KEY = "actor_rollout_ref.actor.use_prefix_grouper"
TEMPERATURE = 0.7
PROMPT, RESPONSE = 7, 6


def grouped_batch(sizes: tuple[int, ...] = (3, 1, 4), seed: int = 0) -> Batch:
    """Prompts left-padded by different amounts, each repeated ``sizes[g]`` times, with right-padded responses
    of different lengths (one of a single token), position ids ``cumsum(mask) − 1`` as rollouts make them."""
    generator = torch.Generator().manual_seed(seed)
    rows = sum(sizes)
    prompts = torch.randint(3, 400, (len(sizes), PROMPT), generator=generator)
    prompt_mask = torch.ones(len(sizes), PROMPT, dtype=torch.long)
    for g in range(len(sizes)):
        prompt_mask[g, : g % 3] = 0
    repeat = torch.tensor(sizes)
    responses = torch.randint(3, 400, (rows, RESPONSE), generator=generator)
    response_mask = torch.ones(rows, RESPONSE, dtype=torch.long)
    for row, length in enumerate(torch.randint(1, RESPONSE + 1, (rows,), generator=generator).tolist()):
        response_mask[row, length:] = 0
    response_mask[1, 1:] = 0
    mask = torch.cat([prompt_mask.repeat_interleave(repeat, 0), response_mask], 1)
    input_ids = torch.cat([prompts.repeat_interleave(repeat, 0), responses], 1) * mask
    return Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp_min(0),
            "responses": responses * response_mask,
            "response_mask": response_mask,
        }
    )


def _model(attention: str, checkpointing: bool) -> torch.nn.Module:
    model = build_model(build_tokenizer(), num_layers=2)
    model.config._attn_implementation = attention
    if checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    return model


def _outputs_and_grads(
    model: torch.nn.Module, batch: Batch, grouper: str | None
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Masked per-token outputs and the gradients of a loss that uses all of them."""
    model.zero_grad()
    out = response_outputs(
        model, batch, TEMPERATURE, with_entropy=True, with_sum_pi_squared=True, prefix_grouper=grouper
    )
    mask = batch["response_mask"].float()
    weights = torch.linspace(-1.0, 1.0, mask.numel()).view_as(mask)
    loss = (out.log_probs * weights * mask).sum() + 0.1 * (out.entropy * mask).sum()
    loss.backward()
    values = {name: getattr(out, name).detach() * mask for name in ("log_probs", "entropy", "sum_pi_squared")}
    grads = {name: param.grad.clone() for name, param in model.named_parameters()}
    return values, grads


@pytest.mark.parametrize(("attention", "checkpointing"), [("sdpa", False), ("eager", False), ("sdpa", True)])
def test_grouped_forward_equals_the_plain_forward(attention: str, checkpointing: bool) -> None:
    """Groups of 3, 1 and 4 samples (prompts padded differently, ragged responses): log-probs, entropies, Σπ²
    and every parameter's gradient match the plain forward to 1e-5, with sdpa, eager and activation
    checkpointing (which drops a key/value cache, but not the one-row layout)."""
    batch = grouped_batch()
    model = _model(attention, checkpointing)
    plain, plain_grads = _outputs_and_grads(model, batch, None)
    grouped, grouped_grads = _outputs_and_grads(model, batch, KEY)
    for name, value in plain.items():
        torch.testing.assert_close(grouped[name], value, atol=1e-5, rtol=1e-5, msg=name)
    assert plain_grads.keys() == grouped_grads.keys()
    for name, grad in plain_grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grouped_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_prompt_groups_are_runs_of_adjacent_rows_sharing_the_prompt() -> None:
    """Rows of one prompt that are not adjacent form separate groups; different prompts never share one."""
    batch = grouped_batch((2, 3))
    assert prompt_groups(batch) == [(0, 2), (2, 3)]
    split = batch.index(torch.tensor([0, 2, 1, 3, 4]))
    assert prompt_groups(split) == [(0, 1), (1, 1), (2, 1), (3, 2)]
    torch.testing.assert_close(
        response_outputs(_model("sdpa", False), split, 1.0, with_entropy=False, prefix_grouper=KEY).log_probs
        * split["response_mask"],
        response_outputs(_model("sdpa", False), split, 1.0, with_entropy=False).log_probs * split["response_mask"],
        atol=1e-5,
        rtol=1e-5,
    )


def test_token_budget_micro_batches_keep_groups_whole() -> None:
    """With ``grouped`` every micro-batch holds whole groups, weighed by the grouped forward's tokens (the
    prompt once), and the results come back in the batch's order."""
    batch = grouped_batch((3, 1, 4, 2))
    groups = prompt_groups(batch)
    budget = 30
    plan = plan_micro_batches(batch, budget=budget, budget_key="k", device=torch.device("cpu"), grouped=True)
    assert plan.order is not None
    assert sorted(plan.order.tolist()) == list(range(len(batch)))
    seen = 0
    for part in plan.parts:
        part_groups = prompt_groups(part)
        sizes = sorted(size for _, size in part_groups)
        assert all(size in [s for _, s in groups] for size in sizes)
        seen += len(part_groups)
    assert seen == len(groups)
    restored = plan.restore([part["input_ids"] for part in plan.parts])
    torch.testing.assert_close(restored, batch["input_ids"])


def test_group_balance_keeps_a_prompts_samples_on_one_rank() -> None:
    """Balanced over 2 ranks, each rank's chunk holds whole groups and both hold the same number of them;
    groups of unequal sizes are only brought together."""
    lengths = [50, 50, 40, 40, 10, 10, 20, 20]
    uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    order, metrics = group_balance_order(lengths, uids, 2)
    chunks = [order[:4], order[4:]]
    for chunk in chunks:
        assert {uids[row] for row in chunk} == {uids[row] for row in chunk[::2]}
        assert [uids[row] for row in chunk[::2]] == [uids[row] for row in chunk[1::2]]
    assert metrics["global_seqlen/balanced_max"] < metrics["global_seqlen/max"]
    ragged, _ = group_balance_order([1, 2, 3, 4, 5], ["x", "y", "x", "y", "y"], 2)
    assert ragged == [0, 2, 1, 3, 4]


def test_the_forward_refuses_what_it_cannot_share() -> None:
    """Packing, fused kernels and flash attention are errors naming the setting."""
    batch = grouped_batch()
    model = _model("sdpa", False)
    with pytest.raises(RLCoreError, match=rf"{KEY}=true cannot run with model.use_remove_padding"):
        response_outputs(model, batch, 1.0, with_entropy=False, remove_padding=True, prefix_grouper=KEY)
    with pytest.raises(RLCoreError, match="use_fused_kernels"):
        response_outputs(model, batch, 1.0, with_entropy=False, fused="torch", prefix_grouper=KEY)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(RLCoreError, match="'flash_attention_2' attention"):
        response_outputs(model, batch, 1.0, with_entropy=False, prefix_grouper=KEY)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("actor_rollout_ref.model.use_remove_padding=true", "model.use_remove_padding=true"),
        ("actor_rollout_ref.actor.shuffle=true", "actor.shuffle=true"),
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "ulysses_sequence_parallel_size=2"),
        ("actor_rollout_ref.model.use_fused_kernels=true", "model.use_fused_kernels=true"),
    ],
)
def test_the_dry_run_names_what_the_setting_cannot_run_with(
    tmp_path: Path, tiny_model_dir: Path, override: str, named: str
) -> None:
    """Each contradicting setting is a configuration error naming both keys, before any worker starts."""
    from rlcore_testkit.runs import tiny_overrides

    task = make_tiny_task(tmp_path / "task")
    result = dry_run(
        *tiny_overrides(tmp_path, tiny_model_dir, task), f"{KEY}=true", override, "trainer.n_gpus_per_node=2"
    )
    assert result.exit_code != 0, result.output
    assert f"{KEY}=true cannot run with" in result.output and named in result.output
    assert "Traceback" not in result.output


def test_two_grpo_steps_with_the_prefix_grouper(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real GRPO steps (4 prompts × 4 responses) through the FSDP engine with the shared-prompt forward,
    token-budget micro-batches, the balanced batch and activation checkpointing, as verl's script sets them."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        f"{KEY}=true",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=96",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "trainer.balance_batch=true",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and math.isfinite(last["actor/entropy"])
    assert last["actor/grad_norm"] > 0


def test_the_engine_takes_the_grouped_path(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The FSDP engine really routes the actor through the shared-prompt forward: a model with sliding-window
    layers (which the one-row layout cannot keep) is refused there, naming the setting."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    sliding = {**config, "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}
    (model_dir / "config.json").write_text(json.dumps(sliding))
    task = make_tiny_task(tmp_path / "task")
    with pytest.raises(RLCoreError, match=rf"{KEY}=true: the model has sliding-window attention layers"):
        tiny_run(tmp_path, model_dir, task, f"{KEY}=true")


def _engine_case(strategy: str, model_dir: Path, grouped: bool, **extra: object) -> dict[str, torch.Tensor | float]:
    """Old log-probs and entropies, the update's gradient norm and the log-probs after one update of an actor
    worker of ``strategy`` on 2 prompts × 3 samples, with or without the shared-prompt forward."""
    from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
    from transformers import AutoTokenizer

    class Settings(TrainingBackendContract):
        component_name = strategy

    prompts = ("john has 5 apples and mary has more apples than john",) * 3 + ("how many are left",) * 3
    batch = make_batch(AutoTokenizer.from_pretrained(model_dir), prompts=prompts, response_length=7, seed=3)
    batch["advantages"] = torch.linspace(-1.0, 1.0, batch["responses"].numel()).view_as(batch["responses"])
    overrides = {
        "data.train_batch_size": 2,
        "actor_rollout_ref.rollout.n": 3,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3,
        "actor_rollout_ref.actor.entropy_coeff": 0.01,
        KEY: grouped,
        **extra,
    }
    worker = Settings.make_actor(model_dir, "actor", **overrides)
    try:
        before = worker.compute_log_prob(batch)
        batch["old_log_probs"] = before["old_log_probs"]
        grad_norm = worker.update_actor(batch).meta["metrics"]["actor/grad_norm"]
        after = worker.compute_log_prob(batch)["old_log_probs"]
    finally:
        worker.shutdown()
    mask = batch["response_mask"].bool()
    return {
        "log_probs": before["old_log_probs"][mask],
        "entropy": before["entropys"][mask],
        "grad_norm": grad_norm,
        "new_log_probs": after[mask],
    }


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_engines_with_the_prefix_grouper_match_their_plain_forward(strategy: str, tiny_model_dir: Path) -> None:
    """The FSDP and DeepSpeed actor engines give the same old log-probs, entropies, gradient norm and
    log-probs after one update with the shared-prompt forward as without it; that they really take it shows in
    the refusal there of a model whose config sets use_sliding_window."""
    if strategy == "deepspeed":
        pytest.importorskip("rlcore_plugin_deepspeed")
    plain = _engine_case(strategy, tiny_model_dir, grouped=False)
    grouped = _engine_case(strategy, tiny_model_dir, grouped=True)
    for name in ("log_probs", "entropy"):
        torch.testing.assert_close(grouped[name], plain[name], atol=1e-5, rtol=0, msg=name)
    assert grouped["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    torch.testing.assert_close(grouped["new_log_probs"], plain["new_log_probs"], atol=1e-4, rtol=0)
    sliding = {"actor_rollout_ref.model.override_config": {"use_sliding_window": True, "sliding_window": 4}}
    with pytest.raises(RLCoreError, match="sliding-window attention layers"):
        _engine_case(strategy, tiny_model_dir, grouped=True, **sliding)


def test_the_dry_run_notes_micro_batches_that_cut_a_prompts_samples(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Fixed micro-batches of 2 responses with rollout.n=4 are accepted with a note naming both keys; 4 are not."""
    from rlcore_testkit.runs import tiny_overrides

    task = make_tiny_task(tmp_path / "task")
    base = (*tiny_overrides(tmp_path, tiny_model_dir, task), f"{KEY}=true")
    cut = dry_run(*base, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2")
    assert cut.exit_code == 0, cut.output
    assert "ppo_micro_batch_size_per_gpu=2 is not a multiple of rollout.n=4" in cut.output
    whole = dry_run(*base, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")
    assert whole.exit_code == 0, whole.output
    assert "is not a multiple of rollout.n" not in whole.output
