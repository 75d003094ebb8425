"""LoRA on the Megatron engine (verl 0.10's ``actor_rollout_ref.model.lora.*``).

On one rank: the keys are checked by name; at step 0 the LoRA actor computes the base model's log-probs exactly;
only the adapters train; the full weights are the merged ``W + alpha/r · B·A`` under Hugging Face names (a plain
engine loaded with them computes the LoRA actor's log-probs); one update equals rlcore's FSDP engine with peft's
LoRA on the same layers (``linear_proj``/``linear_fc2`` ↔ ``o_proj``/``down_proj``, the same ``A``). Over gloo:
tensor parallelism (TP=2, the adapters split like their layers) and expert parallelism (EP=2, each expert's
adapters on its rank) equal one rank through two updates, a checkpoint, a resume and the Hugging Face export
(both run one after the other in one spawned gloo group of two processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_megatron.lora_settings import resolve_lora
from rlcore_testkit import runs
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.tiny import make_tiny_model_dir

from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.model.lora"
LORA = {f"{KEY}.rank": 4, f"{KEY}.alpha": 8}


class Settings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not collected)."""

    component_name = "megatron"


def worker(model_dir: Path, **overrides: Any) -> Any:
    """An initialised rank-0 actor worker with dotted-key ``overrides`` (lr 1e-3)."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = Settings.make_config(model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3, **overrides})
    actor = ActorRolloutRefWorker(config, "actor", 0, 1)
    actor.init_model()
    return actor


def update(actor: Any, batch: Any) -> dict[str, float]:
    """One PPO update on ``batch`` with mixed-sign advantages (old log-probs recomputed); its metrics."""
    batch["old_log_probs"] = actor.compute_log_prob(batch)["old_log_probs"]
    batch["advantages"] = torch.linspace(-1, 1, batch["responses"].numel()).view_as(batch["responses"])
    return dict(actor.update_actor(batch).meta["metrics"])


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"nope": 1}, rf"unknown key {KEY}\.nope"),
        ({"rank": -1}, rf"{KEY}\.rank must be a non-negative integer"),
        ({"rank": 4, "alpha": 0}, rf"{KEY}\.alpha must be a positive number"),
        ({"rank": 4, "type": "dora"}, rf"{KEY}\.type='dora' is not supported"),
        ({"rank": 4, "target_modules": ["q_proj"]}, r"'q_proj' is not a layer LoRA can adapt"),
        ({"rank": 4, "target_modules": []}, rf"{KEY}\.target_modules is empty"),
        ({"rank": 4, "lora_A_init_method": "normal"}, rf"{KEY}\.lora_A_init_method='normal'"),
        ({"rank": 4, "lora_B_init_method": "xavier"}, "B starts at zero"),
        ({"rank": 4, "a2a_experimental": True}, rf"{KEY}\.a2a_experimental=True"),
        ({"rank": 4, "adapter_path": "/x"}, rf"{KEY}\.adapter_path='/x'"),
        ({"rank": 4, "freeze_language_model": False}, "the base model stays frozen"),
        ({"rank": 4, "freeze_vision_model": False}, "no vision part"),
        ({"rank": 4, "dtype": "bf16"}, rf"{KEY}\.dtype='bf16'"),
        ({"rank": 4, "dropout": 1.0}, rf"{KEY}\.dropout must be a number in \[0, 1\)"),
        ({"rank": 4, "dropout_position": "mid"}, rf"{KEY}\.dropout_position='mid'"),
    ],
)
def test_lora_keys_are_checked_by_name(section: dict[str, Any], message: str) -> None:
    """Every rejected value is an error naming its key."""
    with pytest.raises(RLCoreError, match=message):
        resolve_lora(section, KEY)


def test_lora_settings_and_targets() -> None:
    """Rank 0 is off; names and whole-name patterns select layers, exclusions win, only the four linear layers of
    a layer (experts' included) can be adapted."""
    assert resolve_lora({"rank": 0, "alpha": 64}, KEY) is None
    settings = resolve_lora({"rank": 8, "alpha": 16, "exclude_modules": ["decoder.layers.1.*"]}, KEY)
    assert settings is not None and settings.scaling == 2.0
    assert settings.adapts("decoder.layers.0.self_attention.linear_qkv")
    assert settings.adapts("decoder.layers.0.mlp.experts.local_experts.7.linear_fc2")
    assert not settings.adapts("decoder.layers.1.self_attention.linear_qkv")
    assert not settings.adapts("output_layer")
    only_first = resolve_lora({"rank": 8, "target_modules": ["decoder.layers.0.*.linear_qkv"]}, KEY)
    assert only_first is not None and only_first.adapts("decoder.layers.0.self_attention.linear_qkv")
    assert not only_first.adapts("decoder.layers.0.self_attention.linear_proj")


def test_targets_that_match_no_layer_are_an_error(tiny_model_dir: Path) -> None:
    """Targets that adapt nothing on this model name the keys."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    overrides = {**LORA, f"{KEY}.target_modules": ["decoder.layers.9.*.linear_qkv"]}
    actor = ActorRolloutRefWorker(Settings.make_config(tiny_model_dir, **overrides), "actor", 0, 1)
    try:
        with pytest.raises(RLCoreError, match=r"adapts no layer of the model"):
            actor.init_model()
    finally:
        actor.shutdown()


def test_megatron_lora_on_another_backend_fails_the_dry_run() -> None:
    """``model.lora.rank`` with the FSDP actor names both keys; on Megatron the dry run notes that the rollout
    gets merged weights whatever ``merge`` says."""
    base = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m", f"{KEY}.rank=4")
    result = runs.dry_run(*base)
    assert result.exit_code == 2, result.output
    assert f"{KEY}.rank=4 configures LoRA on the megatron backend" in result.output
    result = runs.dry_run(*base, "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron")
    assert result.exit_code == 0, result.output
    assert f"note: {KEY}.merge=False changes nothing in rlcore" in result.output


def test_lora_actor_starts_at_the_base_model_and_trains_only_adapters(
    tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """Step 0: the same log-probs as the plain actor (exactly: B is zero). The optimizer holds the adapters only;
    an update moves B and leaves every base weight as it was. The full weights are ``W + alpha/r · B·A`` under
    Hugging Face names (checked on ``o_proj``), and a plain actor loaded with them computes the LoRA actor's
    log-probs (checking the fused ``linear_qkv`` and ``linear_fc1`` too). ``use_dist_checkpointing`` from the
    LoRA actor's shards restores its adapters; from the plain one's, the adapters start fresh."""
    batch = make_batch(tiny_tokenizer)
    plain = worker(tiny_model_dir)
    lora = worker(tiny_model_dir, **LORA)
    try:
        before = plain.compute_log_prob(batch)["old_log_probs"]
        torch.testing.assert_close(lora.compute_log_prob(batch)["old_log_probs"], before, atol=0, rtol=0)
        engine = lora.actor
        params = dict(engine.module.named_parameters())
        trainable = {name for name, param in params.items() if param.requires_grad}
        assert trainable and all(name.endswith((".lora.A", ".lora.B")) for name in trainable)
        layers = {name.rsplit(".lora.", 1)[0].rsplit(".", 1)[1] for name in trainable}
        assert layers == {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"}
        optimized = [p for group in engine.optimizer.param_groups for p in group["params"]]
        assert {id(p) for p in optimized} == {id(params[name]) for name in trainable}
        base = {name: p.detach().clone() for name, p in params.items() if name not in trainable}
        metrics = update(lora, make_batch(tiny_tokenizer))
        assert metrics["actor/grad_norm"] > 0
        for name, tensor in base.items():
            assert torch.equal(params[name], tensor), name
        proj = "decoder.layers.0.self_attention.linear_proj.lora"
        assert params[f"{proj}.B"].abs().max() > 0
        merged = lora.full_state_dict()
        expected = base["decoder.layers.0.self_attention.linear_proj.weight"] + 2.0 * (
            params[f"{proj}.B"].detach() @ params[f"{proj}.A"].detach()
        )
        torch.testing.assert_close(merged["model.layers.0.self_attn.o_proj.weight"], expected, atol=1e-7, rtol=0)
        assert merged.keys() == plain.full_state_dict().keys()
        plain.actor.load_full_weights(merged)
        after = lora.compute_log_prob(batch)["old_log_probs"]
        assert (after - before)[batch["response_mask"].bool()].abs().max() > 1e-4, "the update changed nothing"
        torch.testing.assert_close(plain.compute_log_prob(batch)["old_log_probs"], after, atol=1e-5, rtol=0)
        lora.actor.save(tmp_path / "lora", {"model"})
        plain.actor.save(tmp_path / "merged", {"model"})
    finally:
        plain.shutdown()
        lora.shutdown()
    for saved in ("lora", "merged"):  # the adapters come back; a checkpoint without them starts fresh ones
        restored = worker(
            tiny_model_dir,
            **LORA,
            **{
                "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
                "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path / saved),
            },
        )
        try:
            assert (restored.actor.module.get_parameter(f"{proj}.B").abs().max() > 0) == (saved == "lora")
            torch.testing.assert_close(restored.compute_log_prob(batch)["old_log_probs"], after, atol=1e-5, rtol=0)
        finally:
            restored.shutdown()


def test_one_lora_update_equals_fsdp_with_peft(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """LoRA on ``linear_proj`` and ``linear_fc2`` with the A matrices of peft's adapters on ``o_proj`` and
    ``down_proj``: the same gradient norm (1e-4 relative) and log-probs after one update (1e-5)."""
    fsdp = worker(
        tiny_model_dir,
        **{
            "actor_rollout_ref.actor.strategy": "fsdp",
            "critic.strategy": "fsdp",
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
            "actor_rollout_ref.model.target_modules": ["o_proj", "down_proj"],
        },
    )
    megatron = worker(tiny_model_dir, **LORA, **{f"{KEY}.target_modules": ["linear_proj", "linear_fc2"]})
    try:
        peft_state = {
            name: getattr(param, "full_tensor", lambda p=param: p)().detach()
            for name, param in fsdp.actor.module.named_parameters()
            if ".lora_A." in name
        }
        params = dict(megatron.actor.module.named_parameters())
        copied = 0
        with torch.no_grad():
            for name, param in params.items():
                if not name.endswith(".lora.A"):
                    continue
                layer = int(name.split(".")[2])
                hf = "self_attn.o_proj" if "linear_proj" in name else "mlp.down_proj"
                param.copy_(peft_state[f"base_model.model.model.layers.{layer}.{hf}.lora_A.default.weight"])
                copied += 1
        assert copied == len(peft_state) > 0
        probe = make_batch(tiny_tokenizer, seed=1)
        mask = probe["response_mask"].bool()
        results = {}
        for name, actor in (("fsdp", fsdp), ("megatron", megatron)):
            metrics = update(actor, make_batch(tiny_tokenizer))
            results[name] = (metrics["actor/grad_norm"], actor.compute_log_prob(probe)["old_log_probs"][mask])
        assert results["megatron"][0] == pytest.approx(results["fsdp"][0], rel=1e-4)
        torch.testing.assert_close(results["megatron"][1], results["fsdp"][1], atol=1e-5, rtol=0)
    finally:
        fsdp.shutdown()
        megatron.shutdown()


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model with 4 query heads in 2 groups (so that 2 tensor-parallel ranks split it)."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("gqa"), hidden_size=128, num_heads=4, num_kv_heads=2)


#: one-rank layout -> the two-rank layout that must equal it
OVER_RANKS = {"lora_tp1": "lora_tp2", "lora_moe_ep1": "lora_moe_ep2"}


@pytest.fixture(scope="module")
def ranks_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the two-rank runs: each layout's export and checkpoint in ``<folder>/<layout>``."""
    return tmp_path_factory.mktemp("lora_ranks")


@pytest.fixture(scope="module")
def two_ranks(jobs: Any, gqa_model_dir: Path, moe_model_dir: Path, ranks_folder: Path) -> Any:
    """TP=2 on the GQA model and EP=2 on the MoE model, in one spawned group of two processes: ``{layout:
    [rank 0's result, rank 1's]}``."""
    scenarios = {
        "lora_tp2": ("layout", "lora_tp2", gqa_model_dir),
        "lora_moe_ep2": ("layout", "lora_moe_ep2", moe_model_dir),
    }
    return jobs.spawn_world(2, scenarios, ranks_folder)


@pytest.mark.parametrize(("single", "spawned"), list(OVER_RANKS.items()))
def test_lora_over_ranks_equals_one_rank(
    jobs: Any,
    single: str,
    spawned: str,
    two_ranks: Any,
    ranks_folder: Path,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """TP=2 on a tiny GQA model and EP=2 on a tiny Qwen3-MoE (adapters on every expert): each rank's log-probs
    before (1e-5), after the first update and after the second (1e-4), the gradient norm and the merged weights
    (1e-4) equal one rank's; resumed workers repeat the second update exactly; the Hugging Face export computes
    the log-probs after the first update."""
    model_dir = request.getfixturevalue("moe_model_dir" if "moe" in single else "gqa_model_dir")
    reference = jobs.run_layout(single, model_dir, 0, tmp_path / "one")
    results = two_ranks[spawned]
    adapted = {name.removesuffix(".lora.A") for name in reference["trainable"] if name.endswith(".lora.A")}
    assert {name.rsplit(".", 1)[1] for name in adapted} == {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"}
    experts = {name for name in adapted if ".local_experts." in name}
    assert len(experts) == (2 * 8 * 2 if "moe" in single else 0)  # 2 layers × 8 experts × fc1/fc2
    for run in (reference, *results):
        torch.testing.assert_close(run["resumed"], run["second"], atol=0, rtol=0)
        assert not torch.equal(run["second"], run["after"])
    for rank, result in enumerate(results):
        rows = slice(None) if result["dp_size"] == 1 else slice(2 * rank, 2 * rank + 2)
        for part, atol in (("before", 1e-5), ("after", 1e-4), ("second", 1e-4)):
            torch.testing.assert_close(result[part], reference[part][rows], atol=atol, rtol=0, msg=f"{rank} {part}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)
        assert result["state"].keys() == reference["state"].keys()
        for name, tensor in reference["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-4, rtol=0, msg=f"rank {rank}: {name}")
    batch = jobs.global_batch(model_dir)
    mask = batch["response_mask"].bool()
    exported = jobs.exported_log_probs(ranks_folder / spawned / "hf", batch)
    torch.testing.assert_close(exported[mask], reference["after"][mask], atol=1e-4, rtol=0)


def test_two_grpo_steps_with_lora(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``rlcore run``: 2 GRPO steps with a LoRA actor and the base model as reference (KL loss); the rollout is
    synced with the merged weights (the same checksum as the trainer's), the policy leaves the reference, and
    the checkpoint holds the adapters."""
    import math

    from rlcore_testkit.runs import make_tiny_task, tiny_run

    from rlcore.tracking.sinks import read_metrics

    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path / "run",
        tiny_model_dir,
        task,
        "actor_rollout_ref.actor.strategy=megatron",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "trainer.save_freq=2",
        *(f"{key}={value}" for key, value in LORA.items()),
    )
    steps = [row["training/global_step"] for row in read_metrics(run_dir) if "training/global_step" in row]
    assert steps == [1, 2]
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert math.isfinite(last[key]), key
    assert last["actor/kl_loss"] > 0
    assert last["rollout/weight_checksum_diff"] <= 1e-6
    shard = torch.load(tmp_path / "run" / "ckpt" / "global_step_2" / "actor" / "model" / "tp00_pp00.pt")
    assert any(name.endswith(".lora.B") for name in shard["state"])


@pytest.mark.parametrize("position", ["pre", "post"])
def test_adapter_dropout_acts_while_training_only(tiny_model_dir: Path, position: str) -> None:
    """``dropout=0.5`` on the adapter's input (``pre``) or output (``post``): in eval mode an adapter gives
    ``alpha/r · B·A·x`` every time; in training mode its output changes from call to call."""
    actor = worker(tiny_model_dir, **LORA, **{f"{KEY}.dropout": 0.5, f"{KEY}.dropout_position": position})
    try:
        adapter = actor.actor.module.get_submodule("decoder.layers.0.self_attention.linear_proj.lora")
        with torch.no_grad():
            adapter.B.normal_()
            x = torch.randn(5, 1, adapter.A.shape[1])
            adapter.eval()
            exact = 2.0 * x @ adapter.A.T @ adapter.B.T
            torch.testing.assert_close(adapter(x), exact, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(adapter(x), exact, atol=1e-5, rtol=1e-5)
            adapter.train()
            assert not torch.allclose(adapter(x), adapter(x))
    finally:
        actor.shutdown()
