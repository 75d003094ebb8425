"""Contract suite for ``rollout_engine`` components.

Subclass :class:`RolloutEngineContract` in a test module, name the subclass ``Test...`` and set
``component_name``::

    from rlcore_testkit.contracts.rollout import RolloutEngineContract

    class TestMyEngine(RolloutEngineContract):
        component_name = "my_engine"

The suite resolves the engine class through a freshly loaded plugin manager and builds engines with
:meth:`RolloutEngineContract.make_engine` (override it to pass extra constructor arguments) from the
session's tiny model (``tiny_model_dir``) and from an *EOS-prone* variant of it
(:func:`make_eos_prone_model_dir`: the same model with the output head untied and the EOS logit raised so
that a sampled sequence ends after a few tokens), with the ``actor_rollout_ref.rollout`` section of the
default config plus :attr:`RolloutEngineContract.CONFIG_OVERRIDES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
import torch

from rlcore.api import PluginManager, SupportsPartialRollout, SupportsWeightChecksum

PROMPTS = [
    "how many apples did john buy",
    "the total cost of 3 oranges",
    "what is 12 + 30",
    "mary sold 4 apples and gave 2",
    "first think then output the final answer",
    "sum",
]


def make_eos_prone_model_dir(source: str | Path, path: str | Path, eos_prob: float = 0.15, seed: int = 0) -> Path:
    """Copy the tiny model at ``source`` to ``path`` with an untied head whose EOS logit is raised.

    Every input embedding gets a constant offset on hidden dimension 0, which survives to the final
    hidden state; the EOS row of the (untied) output head reads that dimension with a weight calibrated
    on random token sequences so that EOS has about ``eos_prob`` probability at temperature 1.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    embedding = cast(torch.nn.Embedding, model.get_input_embeddings()).weight  # a causal LM's token embedding
    head = embedding.detach().clone()
    model.config.tie_word_embeddings = False
    model.get_output_embeddings().weight = torch.nn.Parameter(head)
    captured: list[torch.Tensor] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _o: captured.append(args[0]))
    generator = torch.Generator().manual_seed(seed)
    probe = torch.randint(0, len(tokenizer), (8, 24), generator=generator)
    with torch.no_grad():
        embedding[:, 0] += 5 * embedding.std()
        model(input_ids=probe)
        hook.remove()
        dim0 = captured[0][..., 0].mean()
        target_logit = math.log(eos_prob / (1 - eos_prob) * (head.shape[0] - 1))
        head[tokenizer.eos_token_id] = 0
        head[tokenizer.eos_token_id, 0] = target_logit / dim0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def teacher_forced_log_probs(model: Any, ids: list[int]) -> torch.Tensor:
    """The float32 log-probs ``[len(ids) - 1]`` of ``ids[1:]`` under a Hugging Face causal LM (temperature 1)."""
    tokens = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[0, 1:, None]).squeeze(-1)


def perturbed_model(model_dir: str | Path, seed: int = 0, scale: float = 0.05) -> Any:
    """The float32 Hugging Face model at ``model_dir`` with every parameter moved by ``scale`` times Gaussian noise
    (a stand-in for the trainer's weights after an update)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return model


def check_partial_log_probs(out: Any, models: dict[int, Any], temperature: float, atol: float) -> None:
    """Every response token's ``rollout_log_probs`` equals the teacher-forced log-prob (at ``temperature``) of
    the model of its ``rollout_versions`` entry (``models``: version -> Hugging Face model)."""
    for row in range(len(out)):
        valid = out["response_mask"][row].bool()
        prompt = out["prompts"][row][out["attention_mask"][row, : out["prompts"].shape[1]].bool()].tolist()
        tokens = out["responses"][row][valid].tolist()
        ids = torch.tensor([prompt + tokens], dtype=torch.long)
        for version in sorted(set(out["rollout_versions"][row][valid].tolist())):
            with torch.no_grad():
                logits = models[version](input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
            expected = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
            mine = out["rollout_versions"][row][valid] == version
            torch.testing.assert_close(out["rollout_log_probs"][row][valid][mine], expected[mine], atol=atol, rtol=0)


def make_prompt_batch(tokenizer: Any, prompts: list[str] = PROMPTS, meta: dict[str, Any] | None = None) -> Any:
    """A Batch of left-padded prompts: ``input_ids``, ``attention_mask``, ``position_ids`` and ``uid``."""
    from rlcore.api import Batch

    encoded = tokenizer(prompts, padding=True, return_tensors="pt")
    assert bool((encoded["attention_mask"][:, -1] == 1).all()), "the tokenizer must pad prompts on the left"
    mask = encoded["attention_mask"]
    return Batch.from_dict(
        {
            "input_ids": encoded["input_ids"],
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "uid": [f"p{i}" for i in range(len(prompts))],
        },
        meta=meta,
    )


class RolloutEngineContract:
    """Tests every rollout engine must pass; subclasses set ``component_name`` (and may override hooks)."""

    #: the registered rollout engine name under test
    component_name: ClassVar[str] = ""
    #: overrides of ``actor_rollout_ref.rollout`` applied to the default config in every test
    CONFIG_OVERRIDES: ClassVar[dict[str, Any]] = {"response_length": 12, "calculate_log_probs": True}
    #: relative tolerance of the weight checksum (raise it for engines that serve weights in low precision)
    CHECKSUM_RTOL: ClassVar[float] = 1e-9
    #: absolute tolerance of ``prompt_log_probs`` against the float32 Hugging Face model
    LOGPROB_ATOL: ClassVar[float] = 1e-4

    def rollout_config(self, plugin_manager: PluginManager, **overrides: Any) -> Any:
        """The engine's typed ``actor_rollout_ref.rollout`` section (its ``config_class``): defaults, then
        :attr:`CONFIG_OVERRIDES`, then ``overrides``."""
        from rlcore.api import load_config

        engine_cls = plugin_manager.registry.load("rollout_engine", self.component_name)
        values = {**self.CONFIG_OVERRIDES, **overrides}
        dotted = [f"actor_rollout_ref.rollout.{key}={_override_value(value)}" for key, value in values.items()]
        return engine_cls.config_class.from_tree(load_config(overrides=dotted, manager=plugin_manager))

    def make_engine(self, engine_cls: type, model_dir: Path, tokenizer: Any, config: Any) -> Any:
        """Construct the engine; override to pass engine-specific arguments."""
        return engine_cls(str(model_dir), tokenizer, config)

    @pytest.fixture
    def engine_factory(
        self, plugin_manager: PluginManager, tiny_model_dir: Path, tiny_tokenizer: Any
    ) -> Callable[..., Any]:
        """``engine_factory(model_dir=None, **config_overrides)`` builds an engine (default: the tiny model)."""
        engine_cls = plugin_manager.registry.load("rollout_engine", self.component_name)

        def factory(model_dir: Path | None = None, **overrides: Any) -> Any:
            config = self.rollout_config(plugin_manager, **overrides)
            return self.make_engine(engine_cls, model_dir or tiny_model_dir, tiny_tokenizer, config)

        return factory

    def test_is_built_from_its_typed_section(self, plugin_manager: PluginManager) -> None:
        """The engine names the typed section the worker builds it with (``config_class``): rlcore's
        ``RolloutConfig`` or a subclass adding the plugin's own keys, readable from the default config and
        buildable from the defaults alone (an LLM judge's engine)."""
        from rlcore.api import RolloutConfig, default_section, load_config

        engine_cls = plugin_manager.registry.load("rollout_engine", self.component_name)
        assert issubclass(engine_cls.config_class, RolloutConfig)
        section = engine_cls.config_class.from_tree(load_config(manager=plugin_manager))
        assert section.name == RolloutConfig.name and isinstance(section, engine_cls.config_class)
        assert default_section(engine_cls.config_class, response_length=3).response_length == 3

    @pytest.fixture(scope="class")
    @classmethod
    def eos_model_dir(cls, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """The tiny model with a raised EOS logit (see :func:`make_eos_prone_model_dir`)."""
        return make_eos_prone_model_dir(tiny_model_dir, tmp_path_factory.mktemp("eos-prone-model"))

    def test_is_registered(self, plugin_manager: PluginManager) -> None:
        """The name resolves to a component of kind ``rollout_engine``."""
        assert self.component_name, f"{type(self).__name__} must set component_name"
        assert plugin_manager.registry.has("rollout_engine", self.component_name)

    def test_output_keys_and_shapes(
        self, engine_factory: Callable[..., Any], plugin_manager: PluginManager, tiny_tokenizer: Any
    ) -> None:
        """Every output key is present with the documented shape; non-tensors are carried over."""
        engine = engine_factory()
        batch = make_prompt_batch(tiny_tokenizer)
        out = engine.generate(batch)
        rows, prompt_len = batch["input_ids"].shape
        length = self.rollout_config(plugin_manager).response_length
        assert len(out) == rows
        expected = {
            "prompts": (rows, prompt_len),
            "responses": (rows, length),
            "response_mask": (rows, length),
            "input_ids": (rows, prompt_len + length),
            "attention_mask": (rows, prompt_len + length),
            "position_ids": (rows, prompt_len + length),
            "rollout_log_probs": (rows, length),
        }
        for key, shape in expected.items():
            assert key in out, f"generate() output lacks {key!r}"
            assert tuple(out[key].shape) == shape, f"{key} has shape {tuple(out[key].shape)}, expected {shape}"
        assert list(out["uid"]) == list(batch["uid"])

    def test_prompts_unchanged(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """``prompts`` equals the input ids; the sequence tensors are the concatenations of the parts."""
        engine = engine_factory()
        batch = make_prompt_batch(tiny_tokenizer)
        before = {key: value.clone() for key, value in batch.tensors.items()}
        out = engine.generate(batch)
        for key, value in before.items():
            assert torch.equal(batch[key], value), f"generate() modified the input {key!r}"
        assert torch.equal(out["prompts"], before["input_ids"])
        assert torch.equal(out["input_ids"], torch.cat([out["prompts"], out["responses"]], dim=-1))
        response_mask = out["response_mask"].to(out["attention_mask"].dtype)
        assert torch.equal(out["attention_mask"], torch.cat([before["attention_mask"], response_mask], dim=-1))
        expected_positions = (out["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        assert torch.equal(out["position_ids"].long(), expected_positions)

    def test_eos_padding_and_mask(
        self, engine_factory: Callable[..., Any], eos_model_dir: Path, tiny_tokenizer: Any
    ) -> None:
        """Each response is valid up to and including its first EOS, then pad with ``response_mask`` 0."""
        engine = engine_factory(model_dir=eos_model_dir, response_length=24)
        out = engine.generate(make_prompt_batch(tiny_tokenizer))
        eos, pad = tiny_tokenizer.eos_token_id, tiny_tokenizer.pad_token_id
        stopped = 0
        for row, mask in zip(out["responses"].tolist(), out["response_mask"].tolist()):
            valid = int(sum(mask))
            assert mask == [1] * valid + [0] * (len(mask) - valid), f"response_mask {mask} is not a prefix of ones"
            assert eos not in row[: valid - 1], f"tokens follow an EOS inside the valid part: {row}"
            if valid < len(mask):
                stopped += 1
                assert row[valid - 1] == eos, f"a response ends before its length without an EOS: {row}"
                assert row[valid:] == [pad] * (len(row) - valid), f"a response is not padded after EOS: {row}"
        assert stopped > 0, "no response stopped at EOS with an EOS-prone model"
        logprobs = out["rollout_log_probs"]
        assert bool((logprobs[out["response_mask"] == 0] == 0).all()), "rollout_log_probs must be 0 on padding"

    def test_greedy_validation_is_deterministic(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """With ``val_kwargs`` greedy (the default), two validation calls return the same responses."""
        engine = engine_factory()
        batch = make_prompt_batch(tiny_tokenizer)
        first = engine.generate(batch, validate=True)
        second = engine.generate(make_prompt_batch(tiny_tokenizer, meta={"validate": True}))
        assert torch.equal(first["responses"], second["responses"])

    def test_prompt_log_probs_match_the_model(
        self, engine_factory: Callable[..., Any], tiny_model_dir: Path, tiny_tokenizer: Any
    ) -> None:
        """``prompt_log_probs(ids)`` are the model's teacher-forced log-probs of ``ids[1:]`` (the sync probe)."""
        from transformers import AutoModelForCausalLM

        engine = engine_factory()
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        ids = tiny_tokenizer(PROMPTS[0])["input_ids"]
        engine_log_probs = engine.prompt_log_probs(ids)
        assert tuple(engine_log_probs.shape) == (len(ids) - 1,)
        torch.testing.assert_close(
            engine_log_probs.float(), teacher_forced_log_probs(model, ids), atol=self.LOGPROB_ATOL, rtol=0
        )

    def test_update_weights(
        self, engine_factory: Callable[..., Any], tiny_model_dir: Path, tiny_tokenizer: Any
    ) -> None:
        """Perturbed weights are served after ``update_weights``: the probe log-probs follow the new model,
        the greedy responses change, the version is bumped and (when the engine has one) the checksum
        equals the new state's."""
        from transformers import AutoModelForCausalLM

        from rlcore.api import state_checksum

        engine = engine_factory()
        assert engine.weight_version == 0
        trainer = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        has_checksum = isinstance(engine, SupportsWeightChecksum)  # as the actor worker decides
        initial = state_checksum(trainer.state_dict().items())
        if has_checksum:
            assert math.isclose(engine.weight_checksum(), initial, rel_tol=self.CHECKSUM_RTOL)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in trainer.parameters():
                param.add_(torch.randn(param.shape, generator=generator) * 0.05)
        greedy_before = engine.generate(make_prompt_batch(tiny_tokenizer), validate=True)["responses"]
        engine.update_weights(trainer.state_dict().items())
        assert engine.weight_version == 1
        ids = tiny_tokenizer(PROMPTS[1])["input_ids"]
        torch.testing.assert_close(
            engine.prompt_log_probs(ids).float(), teacher_forced_log_probs(trainer, ids), atol=self.LOGPROB_ATOL, rtol=0
        )
        if has_checksum:
            expected = state_checksum(trainer.state_dict().items())
            assert not math.isclose(expected, initial, rel_tol=1e-6)
            assert math.isclose(engine.weight_checksum(), expected, rel_tol=self.CHECKSUM_RTOL)
        greedy_after = engine.generate(make_prompt_batch(tiny_tokenizer), validate=True)["responses"]
        assert not torch.equal(greedy_before, greedy_after), "new weights did not change the greedy responses"

    def test_log_probs_finite_and_non_positive(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """``rollout_log_probs`` are finite and ≤ 0 (sampling and greedy)."""
        engine = engine_factory()
        for validate in (False, True):
            out = engine.generate(make_prompt_batch(tiny_tokenizer), validate=validate)
            logprobs = out["rollout_log_probs"]
            assert bool(torch.isfinite(logprobs).all())
            assert bool((logprobs <= 0).all())

    def test_sleep_and_wake(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """``sleep()`` then ``wake()`` keeps the weights: greedy output and probe log-probs are unchanged."""
        engine = engine_factory()
        batch = make_prompt_batch(tiny_tokenizer)
        before = engine.generate(batch, validate=True)["responses"]
        ids = tiny_tokenizer(PROMPTS[2])["input_ids"]
        log_probs = engine.prompt_log_probs(ids)
        engine.sleep()
        engine.wake()
        assert torch.equal(engine.prompt_log_probs(ids), log_probs)
        assert torch.equal(engine.generate(batch, validate=True)["responses"], before)

    def partial_engine(self, engine_factory: Callable[..., Any], **overrides: Any) -> Any:
        """An engine for the partial-rollout tests; skips them when it lacks the ability."""
        engine = engine_factory(**overrides)
        if not isinstance(engine, SupportsPartialRollout):
            pytest.skip(f"rollout engine {self.component_name!r} has no partial rollout (SupportsPartialRollout)")
        return engine

    def test_partial_rollout_spans_a_weight_update(
        self, engine_factory: Callable[..., Any], tiny_model_dir: Path, tiny_tokenizer: Any
    ) -> None:
        """A weight update between two ``generate_partial`` calls: the rows keep their first tokens, the new
        ones are tagged with the new version, and each token's log-prob is that of the version that sampled
        it (teacher-forced, at the sampling temperature)."""
        from transformers import AutoModelForCausalLM

        engine = self.partial_engine(engine_factory, temperature=0.8, ignore_eos=True)
        first = engine.generate_partial(make_prompt_batch(tiny_tokenizer), 5)
        assert first["rollout_versions"].dtype == torch.int64 and not bool(first["finished"].any())
        assert first["response_mask"].sum(dim=1).tolist() == [5] * len(first)
        trainer = perturbed_model(tiny_model_dir)
        engine.update_weights(trainer.state_dict().items())
        second = engine.generate_partial(first, 100)
        length = second["responses"].shape[1]
        assert bool(second["finished"].all()) and second["response_mask"].sum(dim=1).tolist() == [length] * len(first)
        assert torch.equal(second["responses"][:, :5], first["responses"][:, :5])
        assert torch.equal(second["rollout_log_probs"][:, :5], first["rollout_log_probs"][:, :5])
        expected_versions = torch.tensor([0] * 5 + [1] * (length - 5)).expand(len(first), -1)
        assert torch.equal(second["rollout_versions"], expected_versions), "a trajectory must span versions 0 and 1"
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        check_partial_log_probs(second, {0: base, 1: trainer}, 0.8, self.LOGPROB_ATOL)

    def test_partial_rollout_stops_rows_and_keeps_finished_ones(
        self, engine_factory: Callable[..., Any], eos_model_dir: Path, tiny_tokenizer: Any
    ) -> None:
        """Chunks of 4 tokens: an unfinished row gains exactly 4 tokens (or what is left of the response
        length), a row ends at its EOS, finished rows are untouched and no row exceeds the response length."""
        engine = self.partial_engine(engine_factory, model_dir=eos_model_dir, response_length=24)
        out = engine.generate_partial(make_prompt_batch(tiny_tokenizer), 4)
        eos = set(engine.eos_token_ids)
        calls = 1
        while not bool(out["finished"].all()):
            assert calls < 10, "generate_partial made no progress"
            before = out
            out = engine.generate_partial(before, 4)
            calls += 1
            done = before["finished"]
            for key in ("responses", "response_mask", "rollout_log_probs", "rollout_versions", "row_seeds"):
                assert torch.equal(out[key][done], before[key][done]), f"a finished row's {key} changed"
            grown = out["response_mask"].sum(dim=1) - before["response_mask"].sum(dim=1)
            left = 24 - before["response_mask"].sum(dim=1)
            still = ~out["finished"] & ~done
            assert bool((grown[still] == 4).all()), "an unfinished row did not get its whole budget"
            assert bool((grown[~done] <= torch.clamp(left[~done], max=4)).all())
        lengths = out["response_mask"].sum(dim=1).tolist()
        stopped = 0
        for row, valid in enumerate(lengths):
            mask = out["response_mask"][row].tolist()
            assert mask == [1] * valid + [0] * (24 - valid)
            tokens = out["responses"][row].tolist()
            assert not eos & set(tokens[: valid - 1]), f"tokens follow an EOS: {tokens}"
            if valid < 24:
                stopped += 1
                assert tokens[valid - 1] in eos and tokens[valid:] == [tiny_tokenizer.pad_token_id] * (24 - valid)
        assert stopped > 0, "no response stopped at EOS with an EOS-prone model"

    def test_partial_rollout_is_deterministic(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """The same chunked calls on two engines of one seed sample the same tokens."""
        samples = []
        for _ in range(2):
            engine = self.partial_engine(engine_factory, seed=11)
            out = engine.generate_partial(make_prompt_batch(tiny_tokenizer), 3)
            while not bool(out["finished"].all()):
                out = engine.generate_partial(out, 3)
            samples.append(out["responses"])
        assert torch.equal(samples[0], samples[1])

    def test_seed_reproducibility(self, engine_factory: Callable[..., Any], tiny_tokenizer: Any) -> None:
        """Two engines with the same seed sample the same responses; another seed samples others. (Last: its
        engines of other seeds would push the default engine out of a test run's pool of started engines.)"""
        batch = make_prompt_batch(tiny_tokenizer)
        first = engine_factory(seed=7).generate(batch)
        again = engine_factory(seed=7).generate(batch)
        other = engine_factory(seed=8).generate(batch)
        assert torch.equal(first["responses"], again["responses"])
        assert not torch.equal(first["responses"], other["responses"]), "different seeds gave identical samples"


def _override_value(value: Any) -> str:
    """``value`` written as the right-hand side of a ``key=value`` override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)
