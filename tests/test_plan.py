"""``rlcore plan`` against what is really allocated on CPU: the FSDP engine's parameters, gradients and AdamW
state and the HF engine's KV cache and weight copies exactly, and the activations an update saves (measured
with ``torch.autograd.graph.saved_tensors_hooks``, tensors counted once per storage) within 25 %."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rlcore.plan import plan_for_config
from rlcore.plan.memory import training_activations
from rlcore.rollout.hf import HFRolloutEngine
from rlcore.testing.contracts.backend import TrainingBackendContract, make_batch
from rlcore.testing.contracts.rollout import make_prompt_batch
from rlcore.workers.actor import ActorRolloutRefWorker

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

RESPONSE_LENGTH = 24


class FSDPSettings(TrainingBackendContract):
    """The contract's small CPU settings on the ``fsdp`` backend (not collected)."""

    component_name = "fsdp"


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A larger untied model than the session's tiny one: 4 layers, hidden 128, 4 heads over 2 KV heads."""
    from rlcore.testing.tiny import make_tiny_model_dir

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

        def loss_fn(index: int, micro: Any, output: Any) -> torch.Tensor:
            return -(output.log_probs * micro["response_mask"]).sum()

        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            engine.forward_backward([batch], loss_fn, temperature=1.0, with_entropy=False)
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
    engine = HFRolloutEngine(str(folder), tiny_tokenizer, config.actor_rollout_ref.rollout)
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
