"""Contract suites for ``reward_manager`` and ``reward_scorer`` components.

Subclass a contract in a test module, name the subclass ``Test...`` and set ``component_name``::

    from rlcore_testkit.contracts.rewards import RewardManagerContract, RewardScorerContract

    class TestMyManager(RewardManagerContract):
        component_name = "my_manager"

    class TestMyScorer(RewardScorerContract):
        component_name = "my_dataset"                     # the data_source it is registered for
        cases = [("... #### 42", "42", 1.0), ("no answer", "42", 0.0)]

Components are resolved through the process-wide registry, so the plugin under test must be installed.

:class:`RewardManagerContract` builds a batch of known responses with the tiny tokenizer (prompts
left-padded, responses right-padded, one empty response) and a scorer that returns each sample's
``extra_info["value"]``; a manager class with ``batched = True`` gets a batched scorer
(``data_sources=, solution_strs=, ground_truths=, extra_infos=`` → list) instead. It checks the ``[B, R]``
shape, each score on the last valid token and zeros elsewhere, the decoded ``solution_str``, dict extras,
and (unless ``checks_safe_scoring = False``) that a failing sample scores 0 and is counted in
``reward/scorer_errors`` while the others keep their scores.

:class:`RewardScorerContract` checks every ``(solution_str, ground_truth, expected_score)`` of ``cases``
and that garbage input yields a finite number rather than an exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from rlcore.api import RewardModelConfig
from rlcore_testkit.config import contract_section

#: responses of the manager contract batch (the last one is empty)
RESPONSES: tuple[str, ...] = ("the answer is 12", "so 3 + 4 = 7. #### 7", "first", "")
#: padded response length of the manager contract batch
RESPONSE_LENGTH = 24
PROMPT_LENGTH = 6


def reward_config(overrides: dict[str, Any]) -> RewardModelConfig:
    """rlcore's typed ``reward_model`` section after ``overrides`` (keys below ``reward_model``), with the
    plugins' fields there, as a run hands it to the reward manager."""
    return contract_section(RewardModelConfig, {f"reward_model.{key}": value for key, value in overrides.items()})


def make_reward_batch(
    tokenizer: Any,
    responses: tuple[str, ...] | list[str] = RESPONSES,
    *,
    data_source: str = "contract",
    ground_truths: list[Any] | None = None,
) -> tuple[Any, list[int]]:
    """A generated-looking batch for ``responses`` and the valid length of each response.

    Prompts are 2..P tokens, left-padded to ``PROMPT_LENGTH``; non-empty responses get an eos token and are
    right-padded to ``RESPONSE_LENGTH``; ``attention_mask`` covers both. Sample ``i`` has ``data_source``,
    ``reward_model.ground_truth`` ``ground_truths[i]`` (default ``str(i)``) and ``extra_info``
    ``{"value": i + 1.5}``.
    """
    truths = [str(i) for i in range(len(responses))] if ground_truths is None else ground_truths
    from rlcore.api import Batch

    pad = tokenizer.pad_token_id
    filler = tokenizer.encode("question", add_special_tokens=False)[0]
    n = len(responses)
    prompts = torch.full((n, PROMPT_LENGTH), pad, dtype=torch.long)
    prompt_mask = torch.zeros(n, PROMPT_LENGTH, dtype=torch.long)
    out = torch.full((n, RESPONSE_LENGTH), pad, dtype=torch.long)
    response_mask = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.long)
    lengths = []
    for i, text in enumerate(responses):
        plen = 2 + i % (PROMPT_LENGTH - 1)
        prompts[i, PROMPT_LENGTH - plen :] = filler
        prompt_mask[i, PROMPT_LENGTH - plen :] = 1
        ids = tokenizer.encode(text, add_special_tokens=False)[: RESPONSE_LENGTH - 1] if text else []
        if text:
            ids.append(tokenizer.eos_token_id)
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        response_mask[i, : len(ids)] = 1
        lengths.append(len(ids))
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    batch = Batch.from_dict(
        {
            "prompts": prompts,
            "responses": out,
            "input_ids": torch.cat([prompts, out], dim=1),
            "attention_mask": attention_mask,
            "position_ids": torch.clamp(torch.cumsum(attention_mask, 1) - 1, min=0),
            "response_mask": response_mask,
            "data_source": np.array([data_source] * n, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": t} for t in truths], dtype=object),
            "extra_info": np.array([{"value": i + 1.5} for i in range(n)], dtype=object),
        }
    )
    return batch, lengths


class RewardManagerContract:
    """Tests every reward manager must pass; subclasses set ``component_name``."""

    #: the registered reward manager under test
    component_name: ClassVar[str] = ""
    #: check that a failing sample scores 0 and is counted (safe scoring)
    checks_safe_scoring: ClassVar[bool] = True
    #: extra ``reward_model.*`` keys for the manager's config
    config_overrides: ClassVar[dict[str, Any]] = {}

    def manager_class(self) -> type:
        """The manager class under test."""
        from rlcore import get_component

        return get_component("reward_manager", self.component_name)

    def make_manager(self, tokenizer: Any, per_sample: Callable[[str, str, Any, Any], Any], **overrides: Any) -> Any:
        """Construct the manager with a scorer applying ``per_sample`` to each sample (batched if the class is)."""
        cls = self.manager_class()

        def batch_scorer(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
            return [per_sample(*args) for args in zip(data_sources, solution_strs, ground_truths, extra_infos)]

        def sample_scorer(data_source, solution_str, ground_truth, extra_info=None):
            return per_sample(data_source, solution_str, ground_truth, extra_info)

        scorer = batch_scorer if getattr(cls, "batched", False) else sample_scorer
        config = reward_config({"scorer_timeout": 10.0, **self.config_overrides, **overrides})
        return cls(tokenizer, scorer, config)

    def test_scores_sit_on_the_last_valid_token(self, tiny_tokenizer: Any) -> None:
        """token_level_scores is [B, R] with each score at valid_len - 1 (0 for an empty response), zeros elsewhere."""
        batch, lengths = make_reward_batch(tiny_tokenizer)
        result = self.make_manager(tiny_tokenizer, lambda ds, s, gt, info: info["value"])(batch)
        scores = result.token_level_scores
        assert scores.shape == (len(lengths), RESPONSE_LENGTH) and scores.is_floating_point()
        expected = torch.zeros_like(scores)
        for i, n in enumerate(lengths):
            expected[i, max(n - 1, 0)] = i + 1.5
        assert torch.equal(scores, expected)

    def test_scorer_sees_the_decoded_response(self, tiny_tokenizer: Any) -> None:
        """solution_str is the valid response decoded without special tokens; ground truth and data source
        pass through."""
        batch, _ = make_reward_batch(tiny_tokenizer)

        def record(ds: str, solution: str, gt: Any, info: Any) -> dict[str, Any]:
            return {"score": 0.0, "seen": (gt, ds, solution)}  # scorers may run in other processes: report back

        result = self.make_manager(tiny_tokenizer, record)(batch)
        seen = {gt: (ds, solution) for gt, ds, solution in result.extra_info["seen"]}
        assert seen == {str(i): ("contract", text) for i, text in enumerate(RESPONSES)}

    def test_dict_scores_and_extras(self, tiny_tokenizer: Any) -> None:
        """A dict return uses "score"; its other keys come back as per-sample lists in extra_info."""
        batch, lengths = make_reward_batch(tiny_tokenizer)
        manager = self.make_manager(tiny_tokenizer, lambda ds, s, gt, info: {"score": 1.0, "acc": int(gt) % 2 == 0})
        result = manager(batch)
        assert result.token_level_scores.sum(-1).tolist() == [1.0] * len(lengths)
        assert result.extra_info["acc"] == [i % 2 == 0 for i in range(len(lengths))]

    def test_failing_sample_scores_zero(self, tiny_tokenizer: Any) -> None:
        """A scorer that raises for one sample: that sample scores 0, is counted, and the rest are scored."""
        if not self.checks_safe_scoring:
            pytest.skip("this manager does not implement safe scoring")

        def flaky(ds: str, solution: str, gt: Any, info: Any) -> float:
            if gt == "1":
                raise ValueError("contract failure")
            return info["value"]

        batch, _ = make_reward_batch(tiny_tokenizer)
        result = self.make_manager(tiny_tokenizer, flaky)(batch)
        totals = result.token_level_scores.sum(-1).tolist()
        assert totals == [1.5, 0.0, 3.5, 4.5]
        assert result.metrics["reward/scorer_errors"] == 1


class RewardScorerContract:
    """Tests every reward scorer must pass; subclasses set ``component_name`` and ``cases``."""

    #: the data_source (or alias) the scorer is registered for
    component_name: ClassVar[str] = ""
    #: ``(solution_str, ground_truth, expected_score)`` triples
    cases: ClassVar[list[tuple[str, Any, float]]] = []
    #: inputs that must give a finite number without raising
    garbage: ClassVar[list[str]] = ["", "####", "\\boxed{", "}}}{{{", "x" * 20000, "\u00e9\u4e2d\U0001f600 #### \u00bd"]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrise ``case`` over :attr:`cases`."""
        if "case" in metafunc.fixturenames:
            metafunc.parametrize("case", self.cases, ids=[f"case{i}" for i in range(len(self.cases))])

    def scorer(self) -> Callable[..., Any]:
        """The scorer under test."""
        from rlcore import get_component

        return get_component("reward_scorer", self.component_name)

    @staticmethod
    def as_score(value: Any) -> float:
        """The number in a scorer's return value (a number or a dict with ``"score"``)."""
        if isinstance(value, dict):
            assert "score" in value, f"a dict score must carry 'score': {value!r}"
            value = value["score"]
        assert isinstance(value, (int, float, np.floating, np.integer)), f"not a number: {value!r}"
        return float(value)

    def test_has_cases(self) -> None:
        """The subclass lists at least one matching and one non-matching case."""
        expected = [score for _, _, score in self.cases]
        assert expected and max(expected) > min(expected), "give at least one right and one wrong answer"

    def test_case(self, case: tuple[str, Any, float]) -> None:
        """Each case scores as expected."""
        solution, truth, expected = case
        got = self.as_score(self.scorer()(self.component_name, solution, truth, None))
        assert got == pytest.approx(expected), f"{solution!r} vs {truth!r}"

    def test_extra_info_is_accepted(self) -> None:
        """The scorer takes an ``extra_info`` dict and gives the same score as with ``None``."""
        solution, truth, _ = self.cases[0]
        scorer = self.scorer()
        with_info = self.as_score(scorer(self.component_name, solution, truth, {"index": 0, "split": "test"}))
        assert with_info == self.as_score(scorer(self.component_name, solution, truth, None))

    def test_garbage_gives_a_finite_number(self) -> None:
        """Malformed responses score a finite number instead of raising."""
        truth = self.cases[0][1]
        scorer = self.scorer()
        for text in self.garbage:
            assert math.isfinite(self.as_score(scorer(self.component_name, text, truth, None))), text[:40]
