"""The teacher worker (role ``teacher``): one frozen engine per teacher model, scoring the student's samples.

Each teacher is built like the reference model (role ``ref`` of the actor's training backend,
``actor_rollout_ref.actor.strategy``, with the ``actor_rollout_ref.ref.*`` and ``actor_rollout_ref.model.*``
settings) from its own ``model_path``, and returns the log-probs of the sampled response tokens at
temperature 1 (verl forces 1 too: the teacher scores, it does not sample) or, with ``forward_kl_topk``, its
``topk`` most likely tokens at each response position with their log-probs. With several teachers each row goes
to the teacher whose ``key`` equals the row's ``distillation.teacher_key`` field (``data_source`` by default).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rlcore.api import (
    GATHER_IDS,
    LOG_PROB_BUDGET,
    Batch,
    RLCoreError,
    TrainingEngine,
    WorkerBase,
    cpu_batch,
    data_parallel_size,
    inference_micro_batch_size,
    plan_micro_batches,
    select,
    token_budget,
)
from rlcore_plugin_distill.loss import TEACHER_LOG_PROBS, TEACHER_TOPK_LOG_PROBS
from rlcore_plugin_distill.settings import D, Teacher, distillation_settings

ARR = "actor_rollout_ref"
#: the batch columns a teacher's forward reads
INPUTS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


def _vocabulary(path: str, key: str) -> dict[str, int]:
    """The token → id map of the tokenizer at ``path`` (``key`` names it in the error)."""
    from transformers import AutoTokenizer

    try:
        return dict(AutoTokenizer.from_pretrained(path).get_vocab())
    except Exception as exc:  # transformers raises many types; the user needs one line
        raise RLCoreError(f"{key}={path}: the tokenizer cannot be loaded ({type(exc).__name__})") from exc


def check_same_tokenizer(student: str, teacher: str, key: str) -> int:
    """verl's rule: a teacher shares the student's tokenizer (its per-token log-probs are read at the student's
    token ids). Raise, naming ``key``, when the two vocabularies differ; return the number of ids the shared
    tokenizer uses (its largest id + 1)."""
    mine, theirs = _vocabulary(student, f"{ARR}.model.path"), _vocabulary(teacher, key)
    if mine != theirs:
        differ = sorted(set(mine.items()) ^ set(theirs.items()))
        raise RLCoreError(
            f"{key}={teacher}: the teacher's tokenizer differs from the student's ({student}): "
            f"{len(mine)} vs {len(theirs)} tokens, {len(differ)} token/id pairs differ (e.g. {differ[0]!r}); "
            "on-policy distillation needs one tokenizer for both (verl's rule)"
        )
    return max(mine.values(), default=-1) + 1


def vocab_size(path: str) -> int:
    """How many ids the model at ``path`` gives log-probs for (its text config's ``vocab_size``: the rows of
    its output layer, often padded past the tokenizer's ids), 0 when the config does not say."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(path)
    return int(getattr(hf_config.get_text_config(), "vocab_size", 0) or 0)


def check_vocab_sizes(student: str, teacher: str, key: str, token_ids: int) -> int:
    """The student's vocabulary size, when the teacher at ``teacher`` (named by ``key``) can score it: the same
    size, or a teacher padded past the student (``vocab_size`` 151936 against 151669: the ids past the student's
    are padding, no token of the shared tokenizer, which uses ``token_ids`` ids, has one; the teacher's top-k
    drops them). Raise naming both sizes and ``key`` otherwise: a smaller teacher has no log-prob for ids the
    student can sample."""
    mine, theirs = vocab_size(student), vocab_size(teacher)
    if not mine or not theirs or mine == theirs or token_ids <= mine < theirs:
        return mine
    why = (
        "the student can sample ids the teacher has no log-prob for; use a teacher whose vocabulary is at least the "
        "student's"
        if theirs < mine
        else f"the shared tokenizer has ids up to {token_ids - 1}, past the student's vocabulary"
    )
    raise RLCoreError(
        f"{key}={teacher}: the teacher's vocabulary (vocab_size {theirs}) and the student's "
        f"({ARR}.model.path={student}, vocab_size {mine}) differ and {why}"
    )


def check_topk(path: str, key: str, topk: int) -> None:
    """``distillation_loss.topk`` must not exceed the vocabulary of the teacher at ``path`` (``key`` names it)."""
    vocab = vocab_size(path)
    if vocab and topk > vocab:
        raise RLCoreError(
            f"{D}.distillation_loss.topk={topk} exceeds the vocabulary ({vocab} tokens) of the teacher at {key}={path}"
        )


def teacher_config(config: DictConfig, teacher: Teacher) -> DictConfig:
    """A copy of ``config`` whose policy model is the teacher's (the reference engine is built from it)."""
    copied = copy.deepcopy(config)
    OmegaConf.update(copied, f"{ARR}.model.path", teacher.model_path)
    OmegaConf.update(copied, f"{ARR}.model.tokenizer_path", None)
    return copied


class TeacherWorker(WorkerBase):
    """One rank of the teacher group: ``compute_teacher_log_prob(batch)`` → ``teacher_log_probs`` ``[B, R]``."""

    ROLES = ("teacher",)

    def configure(self) -> None:
        """Validate the ``distillation`` section, each teacher's directory and tokenizer, and the engine
        settings, before anything is initialised."""
        self.settings = distillation_settings(self.config)
        student_model = str(select(self.config, f"{ARR}.model.path"))
        student = str(select(self.config, f"{ARR}.model.tokenizer_path") or student_model)
        self.configs: list[DictConfig] = []
        #: the student's vocabulary size: a teacher's top-k ids past it (its padding) are dropped
        self.student_vocab = 0
        for teacher in self.settings.teachers:
            key = f"{D}.teacher_models.{teacher.name}.model_path"
            if not (Path(teacher.model_path).expanduser() / "config.json").is_file():
                raise RLCoreError(
                    f"{key}={teacher.model_path}: no config.json there; give the teacher's model directory"
                )
            token_ids = check_same_tokenizer(student, teacher.model_path, key)
            self.student_vocab = check_vocab_sizes(student_model, teacher.model_path, key, token_ids)
            if self.settings.loss.uses_topk:
                check_topk(teacher.model_path, key, self.settings.loss.topk)
            self.configs.append(teacher_config(self.config, teacher))
            self._backend("ref", f"{ARR}.ref").check_config(self.configs[-1], "ref", f"{ARR}.ref", f"{ARR}.model")
        ref = self.sections.actor_rollout_ref.ref
        self.micro = inference_micro_batch_size(ref, data_parallel_size(self.config, f"{ARR}.actor", self.world_size))
        self.budget = token_budget(ref, *LOG_PROB_BUDGET)
        self.teachers: list[TrainingEngine] = []

    def init_model(self) -> None:
        """Build one frozen engine per teacher."""
        for config in self.configs:
            request = self.engine_request("ref", f"{ARR}.ref", f"{ARR}.model", config=config)
            engine = self._backend("ref", f"{ARR}.ref").create_engine(request)
            self.engines.append(engine)
            self.teachers.append(engine)

    def _rows(self, batch: Batch) -> list[torch.Tensor]:
        """The row indices of ``batch`` each teacher scores (all rows for a single teacher)."""
        if len(self.teachers) == 1:
            return [torch.arange(len(batch))]
        field = self.settings.teacher_key
        if field not in batch:
            raise RLCoreError(f"{D}.teacher_key={field!r}: the batch has no such field to route samples by")
        values = np.asarray([str(v) for v in batch[field]], dtype=object)
        keys = [str(t.key) for t in self.settings.teachers]
        unrouted = sorted(set(values) - set(keys))
        if unrouted:
            raise RLCoreError(
                f"{D}.teacher_key={field!r}: no teacher has the key {unrouted[0]!r} (the teachers' keys: "
                f"{', '.join(keys)}); set {D}.teacher_models.<name>.key"
            )
        return [torch.from_numpy(np.flatnonzero(values == key)) for key in keys]

    def _score(self, engine: TrainingEngine, part: Batch) -> list[torch.Tensor]:
        """The teacher's outputs of the rows ``part``, in its row order: ``[log_probs]`` or, with
        ``forward_kl_topk``, ``[top_k_ids, top_k_log_probs]``."""
        plan = plan_micro_batches(
            part,
            size=self.micro,
            budget=self.budget,
            budget_key=f"{ARR}.ref.log_prob_max_token_len_per_gpu",
            device=engine.device,
        )
        topk = self.settings.loss.topk if self.settings.loss.uses_topk else 0
        with engine.resident():
            if topk:  # passed only when asked: not every backend takes it (see TrainingEngine.forward)
                outputs = engine.forward(plan.parts, temperature=1.0, with_entropy=False, top_k=topk)
            else:
                outputs = engine.forward(plan.parts, temperature=1.0, with_entropy=False)
        names = ("top_k_ids", "top_k_log_probs") if topk else ("log_probs",)
        return [plan.restore([o.require(name).cpu() for o in outputs]) for name in names]

    def compute_teacher_log_prob(self, batch: Batch) -> Batch:
        """The teachers' scores of the sampled responses, each row by its routed teacher, at temperature 1, in
        micro-batches of ``ref.log_prob_micro_batch_size_per_gpu`` (or of at most
        ``ref.log_prob_max_token_len_per_gpu`` tokens): ``teacher_log_probs`` ``[B, R]`` (the sampled tokens'
        log-probs) or, with ``forward_kl_topk``, ``gather_ids`` and ``teacher_topk_log_probs`` ``[B, R, k]`` (the
        ``topk`` most likely tokens and their log-probs); 0 on padding. A top-k id past the student's
        vocabulary (a teacher padded past it: no token has that id) gets id 0 and log-prob ``-inf``, which the
        loss leaves out."""
        if not self.teachers:
            raise RLCoreError("compute_teacher_log_prob() called before init_model()")
        data = cpu_batch(batch).select(list(INPUTS))
        shape = tuple(data["responses"].shape)
        if self.settings.loss.uses_topk:
            shape = (*shape, self.settings.loss.topk)
        ids = torch.zeros(shape, dtype=torch.long)
        out = torch.zeros(shape, dtype=torch.float32)
        for engine, rows in zip(self.teachers, self._rows(batch)):
            if not len(rows):
                continue
            scores = self._score(engine, data.index(rows))
            out[rows] = scores[-1].float()
            if self.settings.loss.uses_topk:
                ids[rows] = scores[0].long()
        mask = data["response_mask"].reshape(*data["response_mask"].shape, *([1] * (len(shape) - 2))).bool()
        out = torch.where(mask, out, 0.0)
        if not self.settings.loss.uses_topk:
            return Batch.from_dict({TEACHER_LOG_PROBS: out})
        ids = torch.where(mask, ids, 0)
        if self.student_vocab:
            padding = ids >= self.student_vocab
            ids, out = ids.masked_fill(padding, 0), out.masked_fill(padding, float("-inf"))
        return Batch.from_dict({GATHER_IDS: ids, TEACHER_TOPK_LOG_PROBS: out})
