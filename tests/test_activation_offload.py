"""``enable_activation_offload``: the update's saved activations go to host memory, the gradients do not change.

On this CPU-only machine the offload is still switched on in the engines (``save_on_cpu`` packs every saved
tensor), so the test sees that it is applied and that the gradients are bit-identical; the dry run notes
that it changes nothing on ``trainer.device=cpu``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides

from rlcore.algos.functional import masked_mean


class Counting(torch.autograd.graph.save_on_cpu):
    """``save_on_cpu`` that counts the tensors it packs."""

    packed = 0

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__(pin_memory, device_type)
        pack = self.pack_hook

        def counting_pack(tensor: torch.Tensor) -> Any:
            Counting.packed += 1
            return pack(tensor)

        self.pack_hook = counting_pack


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Counting]]:
    Counting.packed = 0
    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", Counting)
    yield Counting


class FSDP(TrainingBackendContract):
    component_name = "fsdp"


class DeepSpeed(TrainingBackendContract):
    component_name = "deepspeed"


def _gradients(engine: Any, batch: Any) -> dict[str, torch.Tensor]:
    def loss(_: int, micro: Any, out: Any) -> torch.Tensor:
        return -masked_mean(out.log_probs, micro["response_mask"].float())

    with engine.resident():
        engine.forward_backward(batch.split(2), loss, temperature=1.0, with_entropy=False)
    grads = {}
    for name, param in engine.module.named_parameters():
        grad = param.grad
        grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
    return grads


def test_gradients_are_identical_with_activation_offload(
    tiny_model_dir: Path, tiny_tokenizer: Any, counting: type[Counting]
) -> None:
    batch = make_batch(tiny_tokenizer)
    plain = FSDP.make_actor(tiny_model_dir, role="actor")
    offloaded = FSDP.make_actor(
        tiny_model_dir, role="actor", **{"actor_rollout_ref.model.enable_activation_offload": True}
    )
    try:
        expected = _gradients(plain.actor, batch)
        assert counting.packed == 0
        got = _gradients(offloaded.actor, batch)
        assert counting.packed > 0, "the update's activations were not offloaded"
        assert expected.keys() == got.keys() and expected
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], atol=0, rtol=0, msg=name)
        packed = counting.packed
        offloaded.actor.forward([batch], temperature=1.0, with_entropy=False)  # no-grad passes save nothing
        assert counting.packed == packed
    finally:
        FSDP.close(plain)
        FSDP.close(offloaded)


def test_deepspeed_steps_identically_with_activation_offload(
    tiny_model_dir: Path, tiny_tokenizer: Any, counting: type[Counting]
) -> None:
    """DeepSpeed keeps ZeRO's gradients in its optimizer: the same step with offloading gives the same model."""

    def loss(_: int, micro: Any, out: Any) -> torch.Tensor:
        return -masked_mean(out.log_probs, micro["response_mask"].float())

    batch, probe = make_batch(tiny_tokenizer), make_batch(tiny_tokenizer, seed=1)
    key = "actor_rollout_ref.model.enable_activation_offload"
    workers = [DeepSpeed.make_actor(tiny_model_dir, role="actor", **{key: on}) for on in (False, True)]
    try:
        after = []
        for worker in workers:
            engine = worker.actor
            with engine.resident():
                engine.forward_backward(batch.split(2), loss, temperature=1.0, with_entropy=False)
                engine.optimizer_step(None)
            after.append(engine.forward([probe], temperature=1.0, with_entropy=False)[0].log_probs)
        assert counting.packed > 0
        torch.testing.assert_close(after[1], after[0], atol=0, rtol=0)
    finally:
        for worker in workers:
            DeepSpeed.close(worker)


def test_the_dry_run_notes_that_cpu_offload_changes_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task")
    result = dry_run(
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        "actor_rollout_ref.model.enable_activation_offload=True",
        "critic.model.enable_activation_offload=True",
    )
    assert result.exit_code == 0, result.output
    for section in ("actor_rollout_ref.model", "critic.model"):
        assert f"{section}.enable_activation_offload=True changes nothing in rlcore on trainer.device=cpu" in (
            result.output
        )
