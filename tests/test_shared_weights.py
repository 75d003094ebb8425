"""The HF rollout engine serving a one-CPU-rank actor's own parameters (``share_weights``): no second copy
of the model, nothing copied at a sync, the same samples as a copied engine, and never a write into the
trainer's tensors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api.batch import Batch


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings for the ``fsdp`` engine (not collected)."""

    component_name = "fsdp"


@pytest.fixture
def worker(tiny_model_dir: Path) -> Iterator[Any]:
    """An actor + rollout worker on one CPU rank, initialised (its first sync done), with one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    actor = FSDPSettings.make_actor(
        tiny_model_dir, role="actor_rollout", **{"actor_rollout_ref.rollout.response_length": 8}
    )
    yield actor
    FSDPSettings.close(actor)
    torch.set_num_threads(threads)


def storages(module: torch.nn.Module) -> dict[str, int]:
    """``{parameter name: data pointer}``."""
    return {name: param.data_ptr() for name, param in module.named_parameters()}


def train_once(worker: Any, tokenizer: Any) -> None:
    """One PPO update of the actor on random responses."""
    batch: Batch = make_batch(tokenizer)
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    worker.update_actor(batch)


def test_the_engine_serves_the_actors_parameters(worker: Any, tiny_tokenizer: Any) -> None:
    """After init and after an update + sync, every engine parameter is the actor's tensor (same storage),
    the sync check passes and the engine samples exactly what an engine holding a copy samples."""
    engine: HFRolloutEngine = worker.rollout_engine
    live = worker.actor.live_weights()
    assert storages(engine.module) == {name: live[name].data_ptr() for name in storages(engine.module)}
    assert engine.weight_version == 1

    train_once(worker, tiny_tokenizer)
    metrics = worker.sync_weights()
    assert metrics["rollout/weight_checksum_diff"] == 0.0 and metrics["rollout/weight_version"] == 2.0
    assert storages(engine.module) == {name: live[name].data_ptr() for name in storages(engine.module)}

    assert engine.config == worker.rollout_config  # the worker built the engine with its typed section
    copied = HFRolloutEngine(None, tiny_tokenizer, worker.rollout_config, module=_copy_of(engine.module))
    copied.update_weights(worker.full_state_dict().items())
    copied.load_state_dict(engine.state_dict())
    assert storages(copied.module).keys() == storages(engine.module).keys()
    assert set(storages(copied.module).values()).isdisjoint(storages(engine.module).values())
    prompts = make_prompt_batch(tiny_tokenizer)
    assert torch.equal(engine.generate(prompts)["responses"], copied.generate(prompts)["responses"])


def test_a_copying_update_never_writes_into_the_actor(worker: Any) -> None:
    """``update_weights`` on a sharing engine first takes private copies: the actor keeps its weights."""
    engine: HFRolloutEngine = worker.rollout_engine
    before = {name: tensor.clone() for name, tensor in worker.full_state_dict().items()}
    engine.update_weights((name, tensor + 1.0) for name, tensor in before.items())
    for name, tensor in worker.full_state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert torch.equal(engine.module.state_dict()["lm_head.weight"], before["lm_head.weight"] + 1.0)
    # the next sync shares again
    assert worker.sync_weights()["rollout/weight_checksum_diff"] == 0.0
    live = worker.actor.live_weights()
    assert storages(engine.module) == {name: live[name].data_ptr() for name in storages(engine.module)}


def test_mismatched_tensors_are_not_shared(worker: Any) -> None:
    """Another dtype, a missing parameter or an unknown name: ``share_weights`` returns False and the
    engine keeps what it served."""
    engine: HFRolloutEngine = worker.rollout_engine
    live = worker.actor.live_weights()
    version, served = engine.weight_version, storages(engine.module)
    assert not engine.share_weights((name, tensor.to(torch.bfloat16)) for name, tensor in live.items())
    assert not engine.share_weights(list(live.items())[1:])
    assert not engine.share_weights([*live.items(), ("not.a.weight", torch.zeros(1))])
    assert engine.weight_version == version and storages(engine.module) == served


def _copy_of(module: torch.nn.Module) -> torch.nn.Module:
    """A new module of the same config with its own (random) parameters."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(module.config)
