"""Rollout of mixture-of-experts models on the HF engine: sampling, weight sync, and recording the routing (R3).

The recording is tested against the truth: a teacher-forced forward of the final sequences on the same
weights, with a hook on every router, must choose exactly the recorded experts at every recorded position.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf import static_decoder
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit import runs
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import make_prompt_batch
from rlcore_testkit.tiny import MOE_FAMILIES, make_tiny_moe_model_dir

from rlcore.api import RolloutConfig, default_section
from rlcore.api.training import ROUTED_EXPERTS
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.modelkit.moe import sparse_routers
from rlcore.plugins import load_plugins

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

KEY = "actor_rollout_ref.rollout.enable_rollout_routing_replay"


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings, for the ``fsdp`` backend (not collected)."""

    component_name = "fsdp"


@pytest.fixture(scope="module")
def moe_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny model of every MoE family (2 sparse layers, 8 experts, top-2), written once."""
    return {family: make_tiny_moe_model_dir(tmp_path_factory.mktemp(family), family=family) for family in MOE_FAMILIES}


def rollout_config(**overrides: Any) -> Any:
    """The default ``actor_rollout_ref.rollout`` section with 10 response tokens and ``overrides``."""
    return default_section(RolloutConfig, **{"response_length": 10, **overrides})


def engine_for(model_dir: Path, dtype: torch.dtype = torch.float32, **overrides: Any) -> HFRolloutEngine:
    """An HF engine on ``model_dir`` in ``dtype``, its tokenizer loaded from there."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return HFRolloutEngine(str(model_dir), tokenizer, rollout_config(**overrides), dtype=dtype)


def teacher_forced_routing(module: torch.nn.Module, out: Any) -> torch.Tensor:
    """The experts every router of ``module`` chooses for ``out``'s full sequences in one forward:
    ``[B, P + R, L, k]``, hooked on the routers as the recording is (the truth it must match)."""
    chosen: list[torch.Tensor] = []
    handles = [router.register_forward_hook(lambda _m, _a, o: chosen.append(o[2])) for router in sparse_routers(module)]
    try:
        with torch.no_grad():
            module(input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"])
    finally:
        for handle in handles:
            handle.remove()
    rows, width = out["input_ids"].shape
    return torch.stack([indices.view(rows, width, -1) for indices in chosen], dim=2)


def recorded_positions(out: Any) -> torch.Tensor:
    """``[B, P + R]``: where the layout says a routing is recorded (real tokens but each row's last one)."""
    expected = out["attention_mask"].bool().clone()
    prompt_width = out["prompts"].shape[1]
    lengths = out["response_mask"].sum(dim=1)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    expected[rows, prompt_width + lengths[rows] - 1] = False
    return expected


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_moe_models_sample_with_the_log_probs_of_a_teacher_forced_forward(
    moe_dirs: dict[str, Path], family: str
) -> None:
    """An MoE model takes the module's own forward (the static decoder refuses it); the engine's KV-cache
    decoding gives the log-probs a full forward of the sampled sequences gives."""
    engine = engine_for(moe_dirs[family], calculate_log_probs=True)
    assert not static_decoder.supports(engine.module)
    batch = make_prompt_batch(engine.tokenizer)
    out = engine.generate(batch)
    assert out["responses"].shape == (len(batch), 10) and ROUTED_EXPERTS not in out
    with torch.no_grad():
        logits = engine.module(
            input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
        ).logits.float()
    prompt_width = out["prompts"].shape[1]
    log_probs = torch.log_softmax(logits[:, prompt_width - 1 : -1], dim=-1)
    expected = log_probs.gather(-1, out["responses"][..., None]).squeeze(-1) * out["response_mask"]
    torch.testing.assert_close(out["rollout_log_probs"], expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("family", "autocast"), [(family, False) for family in MOE_FAMILIES] + [(MOE_FAMILIES[0], True)]
)
def test_weight_sync_of_moe_models_passes_the_checks(moe_dirs: dict[str, Path], family: str, autocast: bool) -> None:
    """After an update the copying sync (fused in-memory expert names) serves the trainer's weights: the
    checksum and the log-prob parity probe agree, in float32 and with bfloat16 compute."""
    worker = FSDPSettings.make_actor(
        moe_dirs[family], "actor_rollout", **{"actor_rollout_ref.actor.fsdp_config.cpu_autocast": autocast}
    )
    try:
        engine = worker.rollout_engine
        assert engine.module.dtype == (torch.bfloat16 if autocast else torch.float32)
        worker.actor.live_weights = lambda: None  # the copying sync (update_weights), not shared tensors
        batch = make_batch(engine.tokenizer)
        batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        worker.update_actor(batch)
        trained = worker.full_state_dict()
        assert any(name.endswith("mlp.experts.gate_up_proj") for name in trained)
        metrics = worker.sync_weights()
        assert metrics["rollout/weight_checksum_diff"] <= 1e-6
        served = engine.module.state_dict()
        for name, tensor in trained.items():
            assert torch.equal(served[name], tensor.to(served[name].dtype)), name
        tolerance = 5e-2 if autocast else 1e-3
        assert worker._check_log_prob_parity(worker.actor, engine) <= tolerance
    finally:
        FSDPSettings.close(worker)


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_recorded_routing_is_what_a_teacher_forced_forward_chooses(moe_dirs: dict[str, Path], family: str) -> None:
    """R3 in float32, over several chunks of rows and n=2 copies of each prompt: ``routed_experts`` is laid
    out as ``input_ids``, -1 at padding and at each row's last response token, and every recorded entry is
    exactly the expert a teacher-forced forward of the final sequences chooses."""
    engine = engine_for(moe_dirs[family], enable_rollout_routing_replay=True, max_num_batched_tokens=60)
    batch = make_prompt_batch(engine.tokenizer).repeat(2)
    out = engine.generate(batch)
    assert out.meta["metrics"]["rollout/rows_per_chunk"] < len(batch)  # several chunks
    routed = out[ROUTED_EXPERTS]
    config = engine.module.config
    assert routed.shape == (*out["input_ids"].shape, config.num_hidden_layers, config.num_experts_per_tok)
    assert routed.dtype == torch.int32
    expected = recorded_positions(out)
    assert torch.equal((routed >= 0).all(dim=(2, 3)), expected)
    assert bool((routed[~expected] == -1).all())
    truth = teacher_forced_routing(engine.module, out)
    assert torch.equal(routed[expected].long(), truth[expected])


def test_recorded_routing_in_bfloat16_mostly_agrees(moe_dirs: dict[str, Path]) -> None:
    """In bfloat16 the KV-cache decoding and a full forward round differently, so a near tie may pick another
    expert: the agreement is measured (reported as a figure), not asserted to be 1.0."""
    engine = engine_for(moe_dirs["qwen3_moe"], torch.bfloat16, enable_rollout_routing_replay=True)
    out = engine.generate(make_prompt_batch(engine.tokenizer).repeat(2))
    expected = recorded_positions(out)
    truth = teacher_forced_routing(engine.module, out)
    agreement = float((out[ROUTED_EXPERTS][expected].long() == truth[expected]).all(dim=-1).float().mean())
    print(f"bf16 routing agreement (token-layer pairs whose top-k matches): {agreement:.4f}")
    assert agreement >= 0.9


def test_validation_rollouts_record_nothing(moe_dirs: dict[str, Path]) -> None:
    """Validation (``validate=True`` or ``meta["validate"]``) returns no ``routed_experts``: nothing trains on it."""
    engine = engine_for(moe_dirs["qwen3_moe"], enable_rollout_routing_replay=True)
    batch = make_prompt_batch(engine.tokenizer)
    assert ROUTED_EXPERTS not in engine.generate(batch, validate=True)
    assert ROUTED_EXPERTS not in engine.generate(make_prompt_batch(engine.tokenizer, meta={"validate": True}))
    assert ROUTED_EXPERTS in engine.generate(batch)


def test_recording_on_a_dense_model_is_refused(tiny_model_dir: Path) -> None:
    """The engine refuses to record on a model without sparse layers, naming the key and the model type."""
    with pytest.raises(RLCoreError, match=rf"{KEY}=true .*model_type 'qwen2'"):
        engine_for(tiny_model_dir, enable_rollout_routing_replay=True)


def dry_run(model_dir: Path, *args: str) -> Any:
    """``rlcore run --dry-run`` on ``model_dir`` with R3 on and ``args``."""
    return runs.dry_run("data.train_files=x.parquet", f"actor_rollout_ref.model.path={model_dir}", f"{KEY}=true", *args)


def test_dry_run_describes_recording_on_an_moe_model(moe_dirs: dict[str, Path]) -> None:
    """The plan names what is recorded."""
    result = dry_run(moe_dirs["qwen3_moe"])
    assert result.exit_code == 0, result.output
    assert "rollout routing (R3, hf engine): each token's top-2 of 8 experts" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), r"is a dense model \(model_type 'qwen2'\); set it to false"),
        (("actor_rollout_ref.rollout.name=sglang",), f"{KEY}=true needs .* actor_rollout_ref.rollout.name=sglang"),
        (("actor_rollout_ref.rollout.multi_turn.enable=true",), f"{KEY}=true with agent loops"),
        (("actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",), f"{KEY}=true with agent loops"),
    ],
)
def test_dry_run_refuses_what_cannot_record(
    tiny_model_dir: Path, moe_dirs: dict[str, Path], args: tuple[str, ...], message: str
) -> None:
    """A dense policy, an engine that does not record (sglang) and multi-turn rollouts fail the dry run with the
    keys to change."""
    result = dry_run(moe_dirs["qwen3_moe"] if args else tiny_model_dir, *args)
    assert result.exit_code != 0
    assert re.search(message, result.output), result.output


def test_agent_loops_refuse_to_drop_the_recorded_routing(tiny_tokenizer: Any) -> None:
    """Samples that reach the agent loops with R3 on (past the dry run: they name a loop themselves) fail
    with the key, instead of training without the routing they asked for."""
    from rlcore_plugin_agents.runner import AgentRunner

    config = load_config(overrides=[f"{KEY}=true", "actor_rollout_ref.rollout.multi_turn.enable=true"])
    runner = AgentRunner(config, tiny_tokenizer, load_plugins().registry)
    with pytest.raises(RLCoreError, match=f"{KEY}=true, but these samples go through agent loops"):
        runner.run(make_prompt_batch(tiny_tokenizer), lambda batch: batch)
