"""The keys that several sections share, as mixins with their checks: the update of the actor and the
critic (:class:`PPOUpdateConfig`), a log-prob pass (:class:`LogProbConfig`) and a worker checkpoint
(:class:`CheckpointConfig`). Each section declares the fields itself, with its defaults, in the order of
its keys; the mixins name them for the readers (:mod:`rlcore.config.batch_sizes`)."""

from __future__ import annotations

from rlcore.config.sections.base import Section

#: the parts of a sharded engine state (:meth:`rlcore.api.training.TrainingEngine.save`) that
#: ``*.checkpoint.save_contents`` may name
ENGINE_CONTENTS: tuple[str, ...] = ("model", "optimizer")
#: what a checkpoint may contain (``checkpoint.save_contents`` / ``load_contents``); ``hf_model`` (a Hugging
#: Face export of the weights) is written by the actor only and never loaded
CHECKPOINT_CONTENTS: tuple[str, ...] = (*ENGINE_CONTENTS, "extra", "hf_model")


class CheckpointConfig(Section):
    """``<role>.checkpoint``: what a worker checkpoint holds (see :mod:`rlcore.workers.base`)."""

    save_contents: list[str]
    load_contents: list[str]

    def problems(self) -> list[str]:
        """Both lists name only :data:`CHECKPOINT_CONTENTS`."""
        found = []
        for name in ("save_contents", "load_contents"):
            unknown = sorted(set(getattr(self, name)) - set(CHECKPOINT_CONTENTS))
            if unknown:
                found.append(
                    f"{self.key(name)} has unknown item(s) {unknown}; allowed: {', '.join(CHECKPOINT_CONTENTS)}"
                )
        return found


class PPOUpdateConfig(Section):
    """The update keys the actor and the critic share (verl's names); batch sizes count prompts
    (``ppo_mini_batch_size``) or responses on one rank (``*_per_gpu``), see :mod:`rlcore.config.batch_sizes`."""

    strategy: str
    ppo_mini_batch_size: int
    ppo_micro_batch_size: int | None
    ppo_micro_batch_size_per_gpu: int | None
    use_dynamic_bsz: bool
    ppo_max_token_len_per_gpu: int
    ppo_epochs: int
    shuffle: bool
    grad_clip: float | None
    loss_agg_mode: str
    ulysses_sequence_parallel_size: int

    def problems(self) -> list[str]:
        """The loss aggregation mode must be known."""
        from rlcore.config.algorithm_names import LOSS_AGG_MODES

        if self.loss_agg_mode in LOSS_AGG_MODES:
            return []
        return [
            f"unknown {self.key('loss_agg_mode')} {self.loss_agg_mode!r}; expected one of: {', '.join(LOSS_AGG_MODES)}"
        ]


class LogProbConfig(Section):
    """The micro-batching of a log-prob pass (rollout: old log-probs; ref: reference log-probs)."""

    log_prob_micro_batch_size: int | None
    log_prob_micro_batch_size_per_gpu: int | None
    log_prob_use_dynamic_bsz: bool
    log_prob_max_token_len_per_gpu: int
