"""A generative reward model (LLM-as-judge): ``reward_model.reward_manager=judge``.

An LLM (``reward_model.model.path``) served by a rollout engine (``reward_model.rollout.name``: ``hf``,
``vllm``, ...) reads a grading prompt for each response and writes a verdict; the score is the number in the
verdict divided by ``reward_model.judge.max_score``. The whole batch is graded in one greedy
``generate`` call.

- The judge's engine is built with its typed rollout section (the engine's ``config_class``): the defaults of
  ``actor_rollout_ref.rollout``, then :data:`JUDGE_ENGINE`, then ``reward_model.rollout``'s values.
- ``reward_model.judge.prompt_template`` is a ``str.format`` template with ``{prompt}`` (the last user
  message of the sample's chat, else its decoded prompt), ``{response}``, ``{ground_truth}`` and
  ``{max_score}``; it is sent as one user message through the judge's chat template and cut from the
  left to ``reward_model.rollout.prompt_length`` tokens. The judge writes at most
  ``reward_model.rollout.response_length`` tokens.
- ``reward_model.judge.verdict_pattern`` is a regular expression whose first group is the score; without
  one, the last number in the verdict is.

Failures are isolated as the rule scorers' are (:class:`rlcore.api.NaiveRewardManager`): a verdict without a finite
number scores 0 and counts in ``reward/scorer_nan``; when the batched generation raises, the samples are
graded one at a time and each one that fails again scores 0 and counts in ``reward/scorer_errors``. With
``reward_model.scorer_fail_fast`` the first failure raises :class:`rlcore.api.RewardError`.
The verdicts are in the result's ``extra_info["judge_verdict"]``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from rlcore.api import (
    Batch,
    RewardError,
    RewardManagerBase,
    RewardModelConfig,
    RewardResult,
    RLCoreError,
    RolloutConfig,
    default_section,
)

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "You are grading a response to a task. Give a score from 0 (wrong or useless) to {max_score} "
    "(correct and complete).\n\nTask:\n{prompt}\n\nReference answer (may be empty):\n{ground_truth}\n\n"
    "Response:\n{response}\n\nReply with one line: Score: <number>"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
#: where the judge's engine differs from a policy rollout's defaults (``reward_model.rollout`` overrides these):
#: greedy, eager steps, the real weights of ``reward_model.model.path`` (it grades with ``val_kwargs``: greedy)
JUDGE_ENGINE: dict[str, Any] = {"do_sample": False, "enforce_eager": True, "load_format": "auto"}


def parse_verdict(text: str, pattern: re.Pattern[str] | None) -> float | None:
    """The score a verdict gives: ``pattern``'s first group (its last match), else the last number; None
    when there is none or it is not finite."""
    if pattern is not None:
        matches = list(pattern.finditer(text))
        found = matches[-1].group(1) if matches and matches[-1].groups() else None
    else:
        numbers = _NUMBER.findall(text)
        found = numbers[-1] if numbers else None
    if found is None:
        return None
    try:
        value = float(found)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class JudgeRewardManager(RewardManagerBase):
    """Grades each response with an LLM judge (see the module docstring); the engine starts on first use."""

    batched = False

    def __init__(self, tokenizer: Any, scorer: Any, config: RewardModelConfig | None = None) -> None:
        """``config`` is the typed ``reward_model`` section (``model.path``, ``rollout``, ``judge``, and the
        failure options of :class:`rlcore.api.RewardManagerBase`; None: the defaults)."""
        super().__init__(tokenizer, scorer, config)
        section = self.config
        path = section.model.path
        if not path:
            raise RLCoreError("reward_model.reward_manager=judge needs reward_model.model.path: the judge LLM")
        self.model_path = str(path)
        judge = section.judge
        self.template = judge.prompt_template or DEFAULT_TEMPLATE
        self.max_score = float(judge.max_score or type(judge).max_score)  # null: the default
        pattern = judge.verdict_pattern
        try:
            self.pattern = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise RLCoreError(
                f"reward_model.judge.verdict_pattern={pattern!r} is not a regular expression: {exc}"
            ) from exc
        if self.pattern is not None and self.pattern.groups < 1:
            raise RLCoreError(
                f"reward_model.judge.verdict_pattern={pattern!r} needs a group: the score, as in 'Score: (\\d+)'"
            )
        self.rollout = {**JUDGE_ENGINE, **section.rollout.tree()}
        #: the typed rollout section the judge's engine is built with (when it starts)
        self.engine_config: RolloutConfig | None = None
        self.trust_remote_code = bool(section.model.trust_remote_code)
        self.engine: Any = None
        self.judge_tokenizer: Any = None

    # ------------------------------------------------------------------ engine
    def _start(self) -> None:
        """Load the judge's tokenizer and start its rollout engine."""
        from transformers import AutoTokenizer

        from rlcore import get_component
        from rlcore.api import UnknownComponentError

        try:
            self.judge_tokenizer = AutoTokenizer.from_pretrained(
                self.model_path, trust_remote_code=self.trust_remote_code
            )
        except (OSError, ValueError) as exc:
            raise RLCoreError(f"reward_model.model.path={self.model_path!r} has no loadable tokenizer: {exc}") from exc
        self.judge_tokenizer.padding_side = "left"
        try:
            engine_cls = get_component("rollout_engine", self.rollout.get("name", RolloutConfig.name))
        except UnknownComponentError as exc:
            raise UnknownComponentError(f"reward_model.rollout.name: {exc}") from exc
        cuda = torch.cuda.is_available()
        self.engine_config = default_section(engine_cls.config_class, **self.rollout)
        self.engine = engine_cls(
            self.model_path,
            self.judge_tokenizer,
            self.engine_config,
            device=torch.device("cuda" if cuda else "cpu"),
            dtype=torch.bfloat16 if cuda else torch.float32,
        )

    def close(self) -> None:
        """Stop the judge engine (a later call starts it again) and the base class's scorer processes."""
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
        self.engine = None
        super().close()

    # ------------------------------------------------------------------ grading
    def _prompt_texts(self, batch: Any) -> list[str]:
        """Each sample's task: the last user message of ``raw_prompt``, else the decoded prompt."""
        n = len(batch)
        raws = list(batch["raw_prompt"]) if "raw_prompt" in batch else [None] * n
        texts: list[str] = []
        for i, raw in enumerate(raws):
            users = [m.get("content", "") for m in (raw or []) if isinstance(m, Mapping) and m.get("role") == "user"]
            if users:
                texts.append(str(users[-1]))
                continue
            prompt = batch["prompts"][i]
            if "attention_mask" in batch:
                prompt = prompt[batch["attention_mask"][i, : prompt.shape[0]].bool()]
            texts.append(self.tokenizer.decode(prompt.tolist(), skip_special_tokens=True))
        return texts

    def _judge_batch(self, prompts: list[str]) -> list[str]:
        """The judge's verdicts for grading prompts, in one greedy generation."""
        tokenizer = self.judge_tokenizer
        assert self.engine_config is not None, "_start() builds the engine first"
        limit = self.engine_config.prompt_length
        rows = []
        for text in prompts:
            chat = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
            )
            rows.append(tokenizer(chat, add_special_tokens=False)["input_ids"][-limit:])
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):
            input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[i, width - len(ids) :] = 1
        batch = Batch.from_dict(
            {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        )
        batch.meta["do_sample"] = False
        out = self.engine.generate(batch, validate=True)
        responses, response_mask = out["responses"], out["response_mask"]
        return [
            tokenizer.decode(responses[i][response_mask[i].bool()].tolist(), skip_special_tokens=True)
            for i in range(len(rows))
        ]

    def _verdicts(self, prompts: list[str]) -> list[str | Exception]:
        """Verdicts for the whole batch; when that fails, one sample at a time (each failure kept as its error)."""
        try:
            return list(self._judge_batch(prompts))
        except RLCoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - isolated below, one sample at a time
            logger.warning(
                "the judge failed on the batch (%s: %s); grading one sample at a time", type(exc).__name__, exc
            )
        verdicts: list[str | Exception] = []
        for prompt in prompts:
            try:
                verdicts.append(self._judge_batch([prompt])[0])
            except RLCoreError:
                raise
            except Exception as exc:  # noqa: BLE001 - this sample scores 0
                verdicts.append(exc)
        return verdicts

    def __call__(self, batch: Any) -> RewardResult:
        """Grade every response of ``batch`` with the judge."""
        if self.engine is None:
            self._start()
        responses, valid, texts, sources, truths, _ = self._inputs(batch)
        tasks = self._prompt_texts(batch)
        grading = [
            self.template.format(
                prompt=task, response=text, ground_truth="" if truth is None else truth, max_score=f"{self.max_score:g}"
            )
            for task, text, truth in zip(tasks, texts, truths, strict=True)
        ]
        verdicts = self._verdicts(grading)
        scores = [0.0] * len(texts)
        errors: list[int] = []
        unparsed: list[int] = []
        for i, verdict in enumerate(verdicts):
            if isinstance(verdict, Exception):
                errors.append(i)
                continue
            value = parse_verdict(verdict, self.pattern)
            if value is None:
                unparsed.append(i)
                continue
            scores[i] = value / self.max_score
        for what, rows in (("raised an exception", errors), ("gave no score in its verdict", unparsed)):
            if rows:
                first = rows[0]
                detail = verdicts[first]
                message = (
                    f"the judge {what} for {len(rows)} of {len(texts)} sample(s); first: sample {first}, "
                    f"data_source {sources[first]!r}: {str(detail)[:200]!r}"
                )
                if self.fail_fast:
                    raise RewardError(message + " (reward_model.scorer_fail_fast=true)")
                logger.warning("%s; these samples score 0", message)
        self._examine(batch, texts, sources, truths, scores)
        extra = {"judge_verdict": [v if isinstance(v, str) else f"error: {v}" for v in verdicts]}
        metrics = {
            "reward/scorer_errors": float(len(errors)),
            "reward/scorer_timeouts": 0.0,
            "reward/scorer_nan": float(len(unparsed)),
        }
        return RewardResult(self._place(scores, valid, responses.shape[1]), extra, metrics)
