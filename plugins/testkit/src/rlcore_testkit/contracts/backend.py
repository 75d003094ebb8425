"""Contract suite for ``training_backend`` components (training engines).

Subclass :class:`TrainingBackendContract` in a test module, name the subclass ``Test...`` and set
``component_name``; that is the whole test of a new engine::

    from rlcore_testkit.contracts.backend import TrainingBackendContract

    class TestMyBackend(TrainingBackendContract):
        component_name = "my_backend"
        config_overrides = {"actor_rollout_ref.actor.my_backend_config.some_key": 1}

The backend is resolved through the process-wide registry, so its plugin must be installed. The suite
builds its config with :func:`rlcore.config.load_config` (rlcore's defaults, every plugin's
``config_defaults``, then :attr:`TrainingBackendContract.base_overrides` and ``config_overrides``) with
``actor_rollout_ref.actor.strategy`` and ``critic.strategy`` set to the backend, around the session's
tiny model (the ``tiny_model_dir`` fixture). It runs rlcore's generic workers
(:mod:`rlcore.workers`) in this process as rank 0 of 1 and shuts them down when it is done.

Checks, through the workers: log-probs are ``[B, R]``, finite and ≤ 0, entropies ≥ 0; the reference
model's log-probs equal the actor's before any update; one ``update_actor`` with positive advantages
raises the log-prob of the trained responses and reports the standard ``actor/*`` metrics; after
``sync_weights`` the rollout engine serves the trainer's weights; an on-policy update equals one with
recomputed old log-probs. On the engines themselves: they satisfy
:class:`rlcore.api.training.TrainingEngine`; log-probs do not depend on the micro-batching; gradient
accumulation over micro-batches equals one pass over the whole batch; ``full_weights`` →
``load_full_weights`` round-trips; ``save``/``load`` restore model, optimizer and engine state exactly;
the critic's values are ``[B, R]`` and a critic update moves them toward the returns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from rlcore.api import Batch

#: metrics every ``update_actor`` must report
ACTOR_METRICS: tuple[str, ...] = (
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/pg_clipfrac_lower",
    "actor/grad_norm",
    "actor/lr",
)
PROMPTS: tuple[str, ...] = ("what is 3 + 4", "john has 5 apples", "the total cost", "how many oranges are left")


def make_batch(tokenizer: Any, prompts: tuple[str, ...] = PROMPTS, response_length: int = 6, seed: int = 0) -> Batch:
    """A training batch of random responses: left-padded prompts, right-padded responses of varied length.

    Holds ``prompts``, ``responses``, ``response_mask``, ``input_ids``, ``attention_mask`` and
    ``position_ids`` (with ``position_ids = cumsum(attention_mask) − 1``), as a rollout returns them.
    """
    generator = torch.Generator().manual_seed(seed)
    encoded = tokenizer(list(prompts), return_tensors="pt", padding=True)
    rows = len(prompts)
    vocab = min(len(tokenizer), 256)
    responses = torch.randint(0, vocab, (rows, response_length), generator=generator)
    lengths = torch.tensor([response_length - (i % 3) for i in range(rows)])
    response_mask = (torch.arange(response_length)[None, :] < lengths[:, None]).long()
    responses = torch.where(response_mask.bool(), responses, tokenizer.pad_token_id)
    attention_mask = torch.cat([encoded["attention_mask"], response_mask], dim=-1)
    return Batch.from_dict(
        {
            "prompts": encoded["input_ids"],
            "responses": responses,
            "response_mask": response_mask,
            "input_ids": torch.cat([encoded["input_ids"], responses], dim=-1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        }
    )


def _format(value: Any) -> str:
    """A config override value as ``key=value`` text that the config loader parses back to ``value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


class TrainingBackendContract:
    """Tests every training backend must pass; subclasses set ``component_name``.

    A subclass may extend ``config_overrides`` (dotted keys) and override :meth:`make_config`.
    """

    #: the registered training backend under test
    component_name: ClassVar[str] = ""
    #: extra dotted-key overrides of the subclass
    config_overrides: ClassVar[dict[str, Any]] = {}
    #: small, fast settings the suite always applies (before ``config_overrides``)
    base_overrides: ClassVar[dict[str, Any]] = {
        "trainer.device": "cpu",
        "data.max_prompt_length": 16,
        "data.max_response_length": 6,
        "data.train_batch_size": 4,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
    }

    @classmethod
    def make_config(cls, model_dir: Path, **overrides: Any) -> Any:
        """The run config for the tiny model at ``model_dir`` with the suite's and ``overrides``' keys."""
        from rlcore.api import load_config

        settings = {
            "actor_rollout_ref.model.path": str(model_dir),
            "actor_rollout_ref.actor.strategy": cls.component_name,
            "critic.strategy": cls.component_name,
            **cls.base_overrides,
            **cls.config_overrides,
            **overrides,
        }
        return load_config(overrides=[f"{key}={_format(value)}" for key, value in settings.items()])

    @classmethod
    def backend(cls) -> Any:
        """The backend class resolved through the registry."""
        from rlcore import get_component

        return get_component("training_backend", cls.component_name)

    @classmethod
    def make_actor(cls, model_dir: Path, role: str = "actor_rollout_ref", **overrides: Any) -> Any:
        """A rank-0 actor worker for ``role``, with ``init_model()`` done."""
        from rlcore.api import ActorRolloutRefWorker

        worker = ActorRolloutRefWorker(cls.make_config(model_dir, **overrides), role, 0, 1)
        worker.init_model()
        return worker

    @classmethod
    def make_critic(cls, model_dir: Path, **overrides: Any) -> Any:
        """A rank-0 critic worker with ``init_model()`` done."""
        from rlcore.api import CriticWorker

        worker = CriticWorker(cls.make_config(model_dir, **overrides), "critic", 0, 1)
        worker.init_model()
        return worker

    @staticmethod
    def close(worker: Any) -> None:
        """Release a worker's process group (when the backend offers ``shutdown``)."""
        shutdown = getattr(worker, "shutdown", None)
        if callable(shutdown):
            shutdown()

    @pytest.fixture(scope="class")
    @classmethod
    def hybrid_worker(cls, tiny_model_dir: Path) -> Iterator[Any]:
        """An ``actor_rollout_ref`` worker shared by the read-only tests of the class."""
        worker = cls.make_actor(tiny_model_dir)
        yield worker
        cls.close(worker)

    @pytest.fixture
    def batch(self, tiny_tokenizer: Any) -> Batch:
        """A fresh copy of the contract batch."""
        return make_batch(tiny_tokenizer)

    def test_backend_builds_engines(self, hybrid_worker: Any) -> None:
        """The registered target checks configs and creates engines that satisfy the engine protocol."""
        from rlcore.api import TrainingEngine

        assert self.component_name, f"{type(self).__name__} must set component_name"
        backend = self.backend()
        for method in ("check_config", "create_engine"):
            assert callable(getattr(backend, method, None)), f"training backend has no {method}()"
        for engine in (hybrid_worker.actor, hybrid_worker.ref):
            assert isinstance(engine, TrainingEngine), f"{type(engine).__name__} lacks TrainingEngine methods"
            assert 0 <= engine.layout.dp_rank < engine.layout.dp_size

    def test_log_probs_shape_and_range(self, hybrid_worker: Any, batch: Batch) -> None:
        """``old_log_probs`` and ``entropys`` are ``[B, R]`` floats; log-probs finite and ≤ 0, entropies ≥ 0."""
        out = hybrid_worker.compute_log_prob(batch)
        shape = tuple(batch["responses"].shape)
        log_probs, entropies = out["old_log_probs"], out["entropys"]
        assert tuple(log_probs.shape) == shape and tuple(entropies.shape) == shape
        assert log_probs.is_floating_point() and entropies.is_floating_point()
        assert torch.isfinite(log_probs).all() and torch.isfinite(entropies).all()
        assert (log_probs <= 1e-6).all(), "log-probabilities must not be positive"
        assert (entropies >= -1e-5).all(), "entropies must not be negative"

    def test_ref_equals_actor_before_update(self, hybrid_worker: Any, batch: Batch) -> None:
        """Before any update the reference policy is the actor: equal log-probs."""
        actor = hybrid_worker.compute_log_prob(batch)["old_log_probs"]
        ref = hybrid_worker.compute_ref_log_prob(batch)["ref_log_prob"]
        assert tuple(ref.shape) == tuple(actor.shape)
        torch.testing.assert_close(ref, actor, atol=1e-5, rtol=0)

    def test_generate_sequences(self, hybrid_worker: Any, batch: Batch) -> None:
        """The rollout returns right-padded responses and the full-sequence tensors."""
        width = batch["prompts"].shape[1]
        prompts = Batch.from_dict(
            {
                "input_ids": batch["prompts"],
                "attention_mask": batch["attention_mask"][:, :width],
                "position_ids": batch["position_ids"][:, :width],
            }
        )
        out = hybrid_worker.generate_sequences(prompts)
        for key in ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
            assert key in out, f"generate_sequences() result has no {key!r}"
        assert len(out) == len(batch)
        assert out["input_ids"].shape[1] == width + out["responses"].shape[1]

    def test_sync_makes_checksums_equal(self, hybrid_worker: Any) -> None:
        """After ``sync_weights`` the rollout engine's checksum equals the trainer's."""
        metrics = hybrid_worker.sync_weights()
        assert "actor/weight_sync_s" in metrics
        assert metrics["rollout/weight_checksum_diff"] <= 1e-6

    def test_update_raises_log_prob_of_advantaged_responses(self, tiny_model_dir: Path, batch: Batch) -> None:
        """One ``update_actor`` with positive advantages raises the responses' log-prob; metrics are floats;
        a following sync makes the rollout engine serve the updated weights."""
        worker = self.make_actor(tiny_model_dir, role="actor_rollout")
        try:
            batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            before = (batch["old_log_probs"] * batch["response_mask"]).sum()
            result = worker.update_actor(batch)
            metrics = result.meta["metrics"]
            for key in ACTOR_METRICS:
                assert key in metrics, f"update_actor() metrics lack {key!r}"
                assert isinstance(metrics[key], float), f"{key} is {type(metrics[key]).__name__}, not a float"
            assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0
            after = (worker.compute_log_prob(batch)["old_log_probs"] * batch["response_mask"]).sum()
            assert after > before, f"log-prob did not increase: {before.item():.5f} -> {after.item():.5f}"
            assert worker.sync_weights()["rollout/weight_checksum_diff"] <= 1e-6
        finally:
            self.close(worker)

    def test_on_policy_update_takes_its_own_old_log_probs(self, tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
        """With ``meta["on_policy"]`` (one on-policy optimizer step, decided by the controller) the batch has
        no ``old_log_probs``: the update uses its own detached log-probs, reports ``actor/entropy``, and
        trains exactly as with the recomputed old log-probs."""
        precomputed = self.make_actor(tiny_model_dir, role="actor")
        on_policy = self.make_actor(tiny_model_dir, role="actor")
        try:
            batch = make_batch(tiny_tokenizer)
            batch.union(precomputed.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            precomputed.update_actor(batch)
            own = make_batch(tiny_tokenizer)
            own["advantages"] = torch.ones_like(batch["old_log_probs"])
            own.meta["on_policy"] = True
            metrics = on_policy.update_actor(own).meta["metrics"]
            assert math.isfinite(metrics["actor/entropy"]) and metrics["actor/entropy"] > 0
            assert metrics["actor/pg_clipfrac"] == 0.0, "the ratio of an on-policy step is exactly 1"
            probe = make_batch(tiny_tokenizer, seed=1)
            torch.testing.assert_close(
                on_policy.compute_log_prob(probe)["old_log_probs"],
                precomputed.compute_log_prob(probe)["old_log_probs"],
                atol=1e-5,
                rtol=0,
            )
        finally:
            self.close(on_policy)
            self.close(precomputed)

    # ------------------------------------------------------------ engine level
    def test_log_probs_do_not_depend_on_micro_batching(self, hybrid_worker: Any, batch: Batch) -> None:
        """One micro-batch of four rows and four of one row give the same log-probs and entropies."""
        engine = hybrid_worker.actor
        whole = engine.forward([batch], temperature=0.7, with_entropy=True)[0]
        parts = engine.forward(batch.split(1), temperature=0.7, with_entropy=True)
        mask = batch["response_mask"].bool()
        for name in ("log_probs", "entropy"):
            joined = torch.cat([getattr(part, name).cpu() for part in parts])
            torch.testing.assert_close(joined[mask], getattr(whole, name).cpu()[mask], atol=1e-5, rtol=1e-5)

    def test_gradient_accumulation_equals_one_pass(self, tiny_model_dir: Path, batch: Batch) -> None:
        """Two micro-batches with halved losses step the optimizer exactly as one pass over the batch."""
        from rlcore.api import masked_mean

        def loss(_: int, micro: Batch, out: Any, scale: float) -> torch.Tensor:
            return -masked_mean(out.log_probs, micro["response_mask"].float()) * scale

        workers = [self.make_actor(tiny_model_dir, role="actor") for _ in range(2)]
        try:
            whole, split = (worker.actor for worker in workers)
            with whole.resident():
                whole.forward_backward([batch], lambda i, m, o: loss(i, m, o, 1.0), temperature=1.0, with_entropy=False)
                norm_whole = whole.optimizer_step(None)
            halves = [batch[:2], batch[2:]]
            weights = [float(h["response_mask"].sum()) / float(batch["response_mask"].sum()) for h in halves]
            with split.resident():
                split.forward_backward(
                    halves, lambda i, m, o: loss(i, m, o, weights[i]), temperature=1.0, with_entropy=False
                )
                norm_split = split.optimizer_step(None)
            assert math.isclose(norm_whole, norm_split, rel_tol=1e-4), (norm_whole, norm_split)
            probe = make_batch(workers[0].tokenizer, seed=3)
            torch.testing.assert_close(
                split.forward([probe], temperature=1.0, with_entropy=False)[0].log_probs,
                whole.forward([probe], temperature=1.0, with_entropy=False)[0].log_probs,
                atol=1e-5,
                rtol=0,
            )
        finally:
            for worker in workers:
                self.close(worker)

    def test_full_weights_round_trip(self, tiny_model_dir: Path, batch: Batch) -> None:
        """Weights exported from a trained engine and loaded into a fresh one give the same log-probs."""
        trained = self.make_actor(tiny_model_dir, role="actor")
        fresh = self.make_actor(tiny_model_dir, role="actor")
        try:
            batch.union(trained.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            trained.update_actor(batch)
            state = trained.actor.full_weights()
            before = fresh.compute_log_prob(batch)["old_log_probs"]
            fresh.actor.load_full_weights(state)
            after = fresh.compute_log_prob(batch)["old_log_probs"]
            expected = trained.compute_log_prob(batch)["old_log_probs"]
            assert not torch.allclose(before, expected), "the update did not change the weights"
            torch.testing.assert_close(after, expected, atol=1e-6, rtol=0)
            again = fresh.actor.full_weights()
            assert again.keys() == state.keys()
            for name, tensor in state.items():
                torch.testing.assert_close(again[name].cpu(), tensor.cpu(), atol=0, rtol=0)
        finally:
            self.close(fresh)
            self.close(trained)

    def test_engine_save_and_load_restore_training_exactly(
        self, tiny_model_dir: Path, batch: Batch, tmp_path: Path
    ) -> None:
        """After ``save`` and ``load`` (model, optimizer, engine state) a fresh engine takes the same next
        step as the original one."""
        workers = [self.make_actor(tiny_model_dir, role="actor") for _ in range(2)]
        try:
            original, restored = workers
            batch.union(original.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            original.update_actor(batch)
            engine = original.actor
            with engine.resident():
                assert engine.has_optimizer_state()
                engine.save(tmp_path, {"model", "optimizer"})
            state = engine.state_dict()
            with restored.actor.resident():
                restored.actor.load(tmp_path, {"model", "optimizer"})
            restored.actor.load_state_dict(state)
            first = original.update_actor(batch).meta["metrics"]
            second = restored.update_actor(batch).meta["metrics"]
            assert first["actor/lr"] == second["actor/lr"]
            assert math.isclose(first["actor/grad_norm"], second["actor/grad_norm"], rel_tol=1e-5)
            torch.testing.assert_close(
                restored.compute_log_prob(batch)["old_log_probs"],
                original.compute_log_prob(batch)["old_log_probs"],
                atol=1e-6,
                rtol=0,
            )
        finally:
            for worker in workers:
                self.close(worker)

    def test_critic_values_and_update(self, tiny_model_dir: Path, batch: Batch) -> None:
        """The critic's values are ``[B, R]``, zero outside the response mask, and one update with returns
        of 1 moves them toward 1."""
        worker = self.make_critic(tiny_model_dir, **{"critic.optim.lr": 1e-2})
        try:
            values = worker.compute_values(batch)["values"]
            assert tuple(values.shape) == tuple(batch["responses"].shape)
            assert torch.isfinite(values).all()
            assert (values[batch["response_mask"] == 0] == 0).all()
            batch["values"] = values
            batch["returns"] = torch.ones_like(values)
            metrics = worker.update_critic(batch).meta["metrics"]
            for key in ("critic/vf_loss", "critic/grad_norm", "critic/lr"):
                assert isinstance(metrics[key], float), f"update_critic() metrics lack a float {key!r}"
            mask = batch["response_mask"].bool()
            after = worker.compute_values(batch)["values"]
            assert (1 - after[mask]).abs().mean() < (1 - values[mask]).abs().mean()
        finally:
            self.close(worker)
