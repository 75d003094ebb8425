"""``rlcore plan`` against what is really allocated on CPU: the FSDP engine's parameters, gradients and AdamW
state and the HF engine's KV cache and weight copies exactly, and the activations an update saves (measured
with ``torch.autograd.graph.saved_tensors_hooks``, tensors counted once per storage) within 25 %."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_plugin_plan.memory import training_activations
from rlcore_plugin_plan.planner import plan_for_config
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api import RolloutConfig
from rlcore.workers.actor import ActorRolloutRefWorker

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

RESPONSE_LENGTH = 24


class FSDPSettings(TrainingBackendContract):
    """The contract's small CPU settings on the ``fsdp`` backend (not collected)."""

    component_name = "fsdp"


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A larger untied model than the session's tiny one: 4 layers, hidden 128, 4 heads over 2 KV heads."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    return make_tiny_model_dir(
        tmp_path_factory.mktemp("small-model"),
        hidden_size=128,
        intermediate_size=384,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        tie_word_embeddings=False,
    )


def model_dir(request: pytest.FixtureRequest, name: str) -> Path:
    """The tiny (session) or the small (module) model's folder."""
    return request.getfixturevalue("tiny_model_dir" if name == "tiny" else "small_model_dir")


def tensor_bytes(tensors: Any) -> int:
    """Bytes of the tensors' values."""
    return sum(t.numel() * t.element_size() for t in tensors)


class SavedTensors:
    """Bytes autograd saves for backward, each storage once (parameters left out)."""

    def __init__(self, parameters: Any) -> None:
        self.skip = {p.untyped_storage().data_ptr() for p in parameters}
        self.storages: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self.skip:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def backward_once(engine: Any, batch: Any) -> None:
    """One forward and backward of ``engine`` on ``batch`` with the sum of the response log-probs as the loss
    (the gradients and saved activations the plan predicts)."""

    def loss_fn(index: int, micro: Any, output: Any) -> torch.Tensor:
        return -(output.log_probs * micro["response_mask"]).sum()

    engine.forward_backward([batch], loss_fn, temperature=1.0, with_entropy=False)


@pytest.mark.parametrize(
    ("name", "packed", "checkpointing"),
    [("tiny", False, False), ("small", False, False), ("small", True, False), ("small", False, True)],
)
def test_fsdp_state_exact_and_activations_within_a_quarter(
    request: pytest.FixtureRequest, tiny_tokenizer: Any, name: str, packed: bool, checkpointing: bool
) -> None:
    """On one CPU rank the plan's actor parameters, gradients and optimizer state equal the bytes the FSDP
    engine allocates, and its saved activations are within 25 % of those autograd keeps."""
    batch = make_batch(tiny_tokenizer, response_length=RESPONSE_LENGTH)
    rows, seq = batch["input_ids"].shape
    config = FSDPSettings.make_config(
        model_dir(request, name),
        **{
            "data.max_prompt_length": seq - RESPONSE_LENGTH,
            "data.max_response_length": RESPONSE_LENGTH,
            "actor_rollout_ref.model.use_remove_padding": packed,
            "actor_rollout_ref.model.enable_gradient_checkpointing": checkpointing,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": rows,
            "algorithm.adv_estimator": "grpo",
        },
    )
    plan = plan_for_config(config, "cpu")
    update = next(phase for phase in plan.phases if phase.name == "actor_update")
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        engine = worker.actor
        saved = SavedTensors(engine.module.parameters())
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            backward_once(engine, batch)
        params = list(engine.module.parameters())
        grads = tensor_bytes(p.grad for p in params if p.grad is not None)
        engine.optimizer_step(1.0)
        optimizer = tensor_bytes(
            value for state in engine.optimizer.state.values() for value in state.values() if torch.is_tensor(value)
        )
        allocated = {"actor_params": tensor_bytes(params), "actor_grads": grads, "actor_optimizer": optimizer}
    finally:
        worker.shutdown()
    assert {key: update.terms[key] for key in allocated} == allocated
    mask = batch["response_mask"]
    tokens = int(batch["attention_mask"].sum()) if packed else rows * seq
    predicted = training_activations(
        plan.model.shape,
        rows=rows,
        seq=seq,
        tokens=tokens,
        logit_tokens=int(mask.sum()) if packed else rows * RESPONSE_LENGTH,
        dtype_bytes=4,
        checkpointing=checkpointing,
        packed=packed,
        offload=False,
        ulysses=1,
    )
    kept = predicted["activations"] + predicted["logits"] + (0 if checkpointing else predicted["attention_masks"])
    print(f"{name} packed={packed} checkpointing={checkpointing}: predicted {kept} B, measured {saved.total} B")
    assert abs(kept - saved.total) <= 0.25 * saved.total


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors of a value made of dicts, lists and tuples."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


def reachable_tensors(obj: Any, depth: int = 0, seen: set[int] | None = None) -> list[torch.Tensor]:
    """The tensors DeepSpeed's optimizer object holds, through its attributes, lists and dicts (a few levels)."""
    seen = set() if seen is None else seen
    if depth > 5 or id(obj) in seen:
        return []
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return [obj]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif type(obj).__module__.startswith("deepspeed") and hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return []
    return [t for item in items for t in reachable_tensors(item, depth + 1, seen)]


def storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages under ``tensors`` (views of one flat buffer count once)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def test_fsdp_two_ranks_shard_exact(small_model_dir: Path, tmp_path: Path) -> None:
    """Over two gloo ranks, each rank's FSDP2 shards of the parameters, gradients and AdamW moments (rows
    split and padded per tensor) equal the plan's per-rank figures."""
    import json
    import sys

    from rlcore_testkit.ranks import spawn

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parent))
        import test_plan_rank_jobs as jobs

        args = (2, str(tmp_path / "store"), str(small_model_dir), str(tmp_path))
        spawn(jobs.run_rank, args=args, nprocs=2)
        sys.modules.pop("test_plan_rank_jobs", None)
    config = FSDPSettings.make_config(
        small_model_dir, **{"algorithm.adv_estimator": "grpo", "trainer.n_gpus_per_node": 2}
    )
    update = next(phase for phase in plan_for_config(config, "cpu").phases if phase.name == "actor_update")
    for rank in range(2):
        allocated = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert {key: update.terms[key] for key in allocated} == allocated, rank


@pytest.mark.parametrize(("name", "stage"), [("tiny", 1), ("small", 2)])
def test_deepspeed_state_exact(request: pytest.FixtureRequest, tiny_tokenizer: Any, name: str, stage: int) -> None:
    """On one CPU rank the plan's DeepSpeed parameters, gradients and optimizer state (the fp32 master
    partition, AdamW's moments and its one step counter) equal what the ZeRO optimizer allocates."""
    pytest.importorskip("rlcore_plugin_deepspeed")
    config = FSDPSettings.make_config(
        model_dir(request, name),
        **{
            "actor_rollout_ref.actor.strategy": "deepspeed",
            "actor_rollout_ref.actor.deepspeed_config.zero_stage": stage,
            "algorithm.adv_estimator": "grpo",
        },
    )
    update = next(phase for phase in plan_for_config(config, "cpu").phases if phase.name == "actor_update")
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        engine = worker.actor
        backward_once(engine, make_batch(tiny_tokenizer, response_length=6))
        zero = engine.engine.optimizer
        params = list(engine.module.parameters())
        grads = [p.grad for p in params if p.grad is not None] + tensors_in(getattr(zero, "all_grad_tensors", None))
        allocated = {
            "actor_params": storage_bytes(params),
            "actor_grads": storage_bytes(grads),
            "actor_reduce_bucket": max(
                (t.untyped_storage().nbytes() for t in reachable_tensors(zero) if t.numel() > 10 * len(params)),
                default=0,
            )
            if stage == 1
            else 0,
        }
        engine.optimizer_step(1.0)
        moments = [v for state in zero.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
        allocated["actor_optimizer"] = storage_bytes([*zero.single_partition_of_fp32_groups, *moments])
    finally:
        worker.shutdown()
    assert {key: update.terms.get(key, 0) for key in allocated} == allocated


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_megatron_state_exact(request: pytest.FixtureRequest, tiny_tokenizer: Any, name: str) -> None:
    """On one CPU rank the plan's Megatron parameters, gradients and AdamW state (one step counter per fused
    tensor) equal what the engine allocates."""
    pytest.importorskip("rlcore_plugin_megatron")
    config = FSDPSettings.make_config(
        model_dir(request, name), **{"actor_rollout_ref.actor.strategy": "megatron", "algorithm.adv_estimator": "grpo"}
    )
    update = next(phase for phase in plan_for_config(config, "cpu").phases if phase.name == "actor_update")
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        engine = worker.actor
        backward_once(engine, make_batch(tiny_tokenizer, response_length=6))
        params = list(engine.module.parameters())
        allocated = {
            "actor_params": tensor_bytes(params),
            "actor_grads": tensor_bytes(p.grad for p in params if p.grad is not None),
        }
        engine.optimizer_step(1.0)
        allocated["actor_optimizer"] = tensor_bytes(
            v for state in engine.optimizer.state.values() for v in state.values() if torch.is_tensor(v)
        )
    finally:
        worker.shutdown()
    assert {key: update.terms[key] for key in allocated} == allocated


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_hf_kv_cache_and_weight_copies_exact(request: pytest.FixtureRequest, tiny_tokenizer: Any, name: str) -> None:
    """The plan's KV cache and static-decoder weight copies equal what the HF engine allocates on CPU, with
    the rows per chunk that ``max_num_batched_tokens`` gives."""
    folder = model_dir(request, name)
    prompts = make_prompt_batch(tiny_tokenizer, ["what is two plus two"] * 6)
    width = prompts["input_ids"].shape[1]
    budget = 2 * (width + RESPONSE_LENGTH) + 1
    config = FSDPSettings.make_config(
        folder,
        **{
            "data.max_prompt_length": width,
            "data.max_response_length": RESPONSE_LENGTH,
            "data.train_batch_size": 6,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 6,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 6,
            "actor_rollout_ref.rollout.max_num_batched_tokens": budget,
        },
    )
    rollout = plan_for_config(config, "cpu").phases[0]
    engine = HFRolloutEngine(str(folder), tiny_tokenizer, RolloutConfig.from_tree(config))
    static = engine._static
    assert static is not None
    held: list[tuple[int, int]] = []
    release = static.release

    def observed_release() -> None:
        """Record the cache and the weight copies the engine held, then free them as it does."""
        copies = (t for layer in static._fused for t in (layer.qkv, layer.qkv_bias, layer.qk_norm, layer.gate_up))
        held.append((static.cache_bytes(), tensor_bytes(t for t in copies if t is not None)))
        release()

    static.release = observed_release  # type: ignore[method-assign]
    engine.generate(prompts)
    engine.sleep()
    assert rollout.rows == 2
    assert held and held[0] == (rollout.terms["kv_cache"], rollout.terms["rollout_fused_weights"])


#: Qwen3-1.7B's shape (its config.json); the plan builds it on the meta device only
QWEN3_1_7B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
}


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only Qwen3-1.7B's config.json."""
    import json

    folder = tmp_path_factory.mktemp("qwen3-1.7b")
    (folder / "config.json").write_text(json.dumps(QWEN3_1_7B))
    return folder


def seed_like(model: Path, *extra: str) -> list[str]:
    """The seed command's memory-relevant keys (GRPO, 1,024 x 3 responses of 512 + 1,024 tokens, one GPU)."""
    return [
        f"actor_rollout_ref.model.path={model}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=1024",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        "actor_rollout_ref.rollout.n=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=80",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=20",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=20",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "trainer.n_gpus_per_node=1",
        *extra,
    ]


def plan_of(overrides: list[str], gpu: str) -> Any:
    """The plan of the config ``overrides`` give on ``gpu``."""
    from rlcore.config import load_config

    return plan_for_config(load_config(overrides=overrides), gpu)


def test_the_verdict_names_a_fix_that_makes_the_phase_fit(qwen3_dir: Path) -> None:
    """On an L40S (48 GiB) the seed does not fit: the verdict names the update's micro-batch and the vLLM
    engine's memory share, and the plan with the named settings applied fits."""
    plan = plan_of(seed_like(qwen3_dir), "l40s")
    assert not plan.fits
    fixes = {finding.phase: finding.settings for finding in plan.findings}
    assert fixes["actor_update"] == ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=10",), fixes
    assert fixes["rollout"][0].startswith("actor_rollout_ref.rollout.gpu_memory_utilization=0."), fixes
    applied = [setting for settings in fixes.values() for setting in settings]
    assert plan_of(seed_like(qwen3_dir, *applied), "l40s").fits


def test_the_same_run_fits_a_larger_device_and_scales(qwen3_dir: Path) -> None:
    """The seed on an H100 fits; its training state is 16 bytes per parameter (fp32 weights, gradients and two
    AdamW moments) on one rank and a quarter of it sharded over four; step time shrinks with faster FLOPs."""
    plan = plan_of(seed_like(qwen3_dir), "h100")
    assert plan.fits, plan.findings
    update = next(phase for phase in plan.phases if phase.name == "actor_update")
    params = plan.model.params
    assert update.terms["actor_params"] + update.terms["actor_grads"] + update.terms["actor_optimizer"] == 16 * params
    four = plan_of(seed_like(qwen3_dir, "trainer.n_gpus_per_node=4"), "h100")
    sharded = next(phase for phase in four.phases if phase.name == "actor_update")
    assert sharded.terms["actor_optimizer"] == pytest.approx(8 * params / 4, rel=1e-3)
    assert plan_of(seed_like(qwen3_dir), "a100").time.update > plan.time.update


def test_cli_plan_json_and_bad_device(qwen3_dir: Path) -> None:
    """``rlcore plan ... --json`` prints the plan as JSON; an unknown ``--gpu`` is one line naming the known
    devices, exit status 2."""
    import json

    from click.testing import CliRunner

    from rlcore import load_plugins
    from rlcore.cli import cli

    load_plugins().add_commands(cli)  # rlcore-plugin-plan adds `rlcore plan`, as the rlcore script does
    runner = CliRunner()
    result = runner.invoke(cli, ["plan", *seed_like(qwen3_dir), "--gpu", "h200", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["device"]["name"] == "h200" and doc["fits"] is True
    assert [phase["name"] for phase in doc["phases"]] == ["rollout", "old_log_prob", "actor_update"]
    assert doc["time"]["step_s"] > 0
    bad = runner.invoke(cli, ["plan", *seed_like(qwen3_dir), "--gpu", "tpu9"])
    assert bad.exit_code == 2 and "--gpu tpu9: unknown device; known: h100, h200, a100, l40s, cpu" in bad.output
