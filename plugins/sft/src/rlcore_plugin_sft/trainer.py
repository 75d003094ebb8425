"""The SFT loop: batches of the SFT dataset through rlcore's worker group, validation loss, checkpoints that
resume exactly, trackers and the report — the run directory and checkpoint layout of ``rlcore run``.

A step: the next ``data.train_batch_size`` sequences (:class:`~rlcore.api.PromptLoader`, seeded
per epoch) → :meth:`rlcore_plugin_sft.worker.SFTWorker.train_batch` (one optimizer step, one LR-schedule step) →
validation loss every ``trainer.test_freq`` steps and at the end (and before the first step) → a
checkpoint every ``trainer.save_freq`` steps and at the end. Checkpoints are the RL ones:
``global_step_N/actor`` (the engine's sharded state, RNG and LR schedule, and ``huggingface/``, which
``rlcore run actor_rollout_ref.model.path=...`` takes) and ``trainer_state.json`` (step, loader position).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol, cast

import click
from omegaconf import DictConfig

from rlcore.api import (
    Batch,
    PluginRun,
    PromptLoader,
    RLCoreError,
    RunCheckpoints,
    WorkerGroup,
    collate_rows,
    compute_throughput_metrics,
    reduce_metrics,
    to_plain,
)
from rlcore_plugin_sft.config import SFTBatchSizes
from rlcore_plugin_sft.dataset import SFTDataset, sft_batch

#: the worker class of an SFT run's group
SFT_WORKER = "rlcore_plugin_sft.worker:SFTWorker"
#: what the progress bar shows after the bar, and in a log line
BAR_KEYS: tuple[str, ...] = ("train/loss", "val/loss", "val/greedy_acc")
LINE_KEYS: tuple[tuple[str, str], ...] = (
    ("loss", "train/loss"),
    ("val loss", "val/loss"),
    ("val acc", "val/greedy_acc"),
)


class SFTGroup(WorkerGroup, Protocol):
    """The calls the SFT loop makes on its group (implemented by :class:`rlcore_plugin_sft.worker.SFTWorker`)."""

    def train_batch(self, batch: Batch) -> Batch:
        """One optimizer step; ``meta["metrics"]`` holds ``train/*``."""
        ...

    def eval_loss(self, batch: Batch) -> Batch:
        """``val/nll_sum`` and ``val/tokens`` of the batch in ``meta["metrics"]``."""
        ...


class SFTTrainer:
    """One SFT run: ``config`` is the SFT config, ``engine`` its lowered RL-tree config (the workers')."""

    def __init__(self, config: DictConfig, engine: DictConfig, sizes: SFTBatchSizes, run: PluginRun) -> None:
        """Train ``config`` (the SFT config) on the engine config ``engine`` in ``run`` (the core's run
        machinery: its checkpoints, trackers, progress bar and stop request)."""
        self.config = config
        self.engine = engine
        self.sizes = sizes
        self.run = run
        #: the run's checkpoints (``trainer`` section of the engine config: the folder, how the run resumes)
        self.checkpoints: RunCheckpoints = run.checkpoints
        self.global_step = 0
        self.last: dict[str, float] = {}
        self.prepared = False  # prepare() has run
        self.resume_from: Path | None = None  # the checkpoint fit() resumes from (set by prepare())
        self.last_checkpoint: Path | None = None  # the newest checkpoint this run saved
        #: SIGINT/SIGTERM during :meth:`fit`: the step in progress finishes (within ``trainer.stop_grace_s``), then
        #: the run stops
        self.stop = run.stop

    # ------------------------------------------------------------------ set-up
    def _build_data(self) -> None:
        """Tokenizer, datasets, loader and the number of steps (which the LR schedule needs)."""
        from transformers import AutoTokenizer

        model = self.config.model
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                model.partial_pretrain, trust_remote_code=model.trust_remote_code
            )
        except Exception as exc:  # transformers raises many types; the user needs one line
            raise RLCoreError(
                f"model.partial_pretrain={model.partial_pretrain}: the tokenizer cannot be loaded "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''})"
            ) from exc
        data = self.config.data
        if data.chat_template:
            self.tokenizer.chat_template = data.chat_template
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self.train_dataset = SFTDataset(data.train_files, self.tokenizer, data, split="train")
        self.val_dataset = SFTDataset(data.val_files, self.tokenizer, data, split="val") if data.val_files else None
        self.loader = PromptLoader(
            self.train_dataset,
            int(data.train_batch_size),
            shuffle=bool(data.shuffle),
            seed=int(self.config.trainer.seed),
        )
        steps = self.config.trainer.total_training_steps
        self.total_steps = int(steps if steps is not None else len(self.loader) * int(self.config.trainer.total_epochs))
        if self.total_steps < 1:
            raise RLCoreError(f"the run has no step: trainer.total_training_steps={self.total_steps}")
        self.engine.actor_rollout_ref.actor.optim.total_training_steps = self.total_steps

    # ------------------------------------------------------------------- steps
    def _step(self) -> dict[str, float]:
        """One training step; its metrics."""
        start = time.perf_counter()
        batch = sft_batch(self.loader.next_batch(), self.pad_token_id)
        loaded = time.perf_counter()
        metrics = reduce_metrics(self.group.train_batch(batch).meta["metrics"])
        elapsed = time.perf_counter() - start
        tokens = int(batch["attention_mask"].sum())
        metrics.update(compute_throughput_metrics(tokens, elapsed, self.sizes.dp_size))
        metrics["timing_s/step"] = elapsed
        metrics["timing_s/data"] = loaded - start
        metrics["timing_s/train"] = elapsed - (loaded - start)
        metrics["train/tokens"] = float(batch["response_mask"].sum())
        metrics["training/global_step"] = float(self.global_step)
        metrics["training/epoch"] = float(self.loader.epoch)
        return metrics

    def _pad_to_ranks(self, batch: Batch) -> Batch:
        """``batch`` plus copies of its first row with an empty loss mask, up to a multiple of the
        data-parallel size (they change no sum of the validation loss)."""
        missing = -len(batch) % self.sizes.dp_size
        if not missing:
            return batch
        filler = batch.index(list(range(1)) * missing)
        filler["response_mask"] = filler["response_mask"] * 0
        return Batch.concat([batch, filler])

    def validate(self) -> dict[str, float]:
        """``val/loss``, the token-mean NLL of the validation set's loss tokens, and ``val/greedy_acc``, the
        share of its rows that greedy decoding reproduces exactly (:meth:`SFTWorker.eval_loss`);
        ``timing_s/testing``: its seconds."""
        assert self.val_dataset is not None
        start = time.perf_counter()
        size = int(self.config.data.train_batch_size)
        sums = dict.fromkeys(("val/nll_sum", "val/tokens", "val/rows", "val/greedy_rows"), 0.0)
        for begin in range(0, len(self.val_dataset), size):
            rows = [self.val_dataset[i] for i in range(begin, min(begin + size, len(self.val_dataset)))]
            batch = self._pad_to_ranks(sft_batch(collate_rows(rows), self.pad_token_id))
            metrics = reduce_metrics(self.group.eval_loss(batch).meta["metrics"])
            for key in sums:
                sums[key] += metrics[key]
        return {
            "val/loss": sums["val/nll_sum"] / sums["val/tokens"] if sums["val/tokens"] else float("nan"),
            "val/greedy_acc": sums["val/greedy_rows"] / sums["val/rows"] if sums["val/rows"] else float("nan"),
            "timing_s/testing": time.perf_counter() - start,
        }

    # -------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> Path:
        """``default_local_dir/global_step_N`` (atomic, verified on resume): ``actor/`` and
        ``trainer_state.json`` with the step, the loader position and the model."""

        state = {"global_step": self.global_step, "data": self.loader.state_dict()}
        return self.checkpoints.save(
            self.global_step, state, lambda folder: self.group.save_checkpoint(str(folder / "actor"))
        )

    def fingerprint(self) -> dict[str, Any]:
        """What defines this SFT run (:meth:`rlcore.api.RunCheckpoints.fingerprint`): the model, its weights and
        shape, and the training files. Call it after :meth:`_build_data`."""
        from transformers import AutoConfig

        model = self.config.model
        try:
            shape = AutoConfig.from_pretrained(
                model.partial_pretrain, trust_remote_code=model.trust_remote_code
            ).to_dict()
        except Exception:  # noqa: BLE001 - transformers raises many types; the model check reports a broken model
            shape = {}
        return RunCheckpoints.fingerprint(
            "sft",
            model_path=str(model.partial_pretrain),
            model_config=shape,
            train_files=to_plain(self.config.data.train_files),
        )

    def load_checkpoint(self, path: Path) -> None:
        """Restore the worker, the loader and the step from ``path``; notes it in ``resume.json``."""
        state = RunCheckpoints.state(path)
        step = int(state["global_step"])
        self.group.load_checkpoint(str(path / "actor"))
        self.loader.load_state_dict(state["data"])
        self.global_step = step
        (self.run.directory / "resume.json").write_text(json.dumps({"path": str(path), "step": step}))
        click.echo(f"resumed from {path} (step {step} of {self.total_steps})")

    # -------------------------------------------------------------------- fit
    def prepare(self) -> None:
        """What can fail before the worker starts, done once: the checkpoint to resume (a finished one starts
        a fresh run, which moves the checkpoints of another run aside: see
        :meth:`~rlcore.api.RunCheckpoints.claim`), the tokenizer and the datasets. ``rlcore sft`` calls it
        before it creates the run directory, holding the checkpoint folder's lock; :meth:`fit` calls it when
        nobody did."""
        if self.prepared:
            return
        candidate = self.checkpoints.resume_candidate()
        self._build_data()
        self.checkpoints.identity.fingerprint = self.fingerprint()
        self.resume_from = self.checkpoints.accept(candidate, self.total_steps) if candidate is not None else None
        self.checkpoints.claim(self.resume_from, saves=True)  # SFT saves at its end
        self.prepared = True

    def fit(self) -> dict[str, float]:
        """Train for ``total_steps`` (resuming first when ``trainer.resume_mode`` selects a checkpoint);
        returns the last step's metrics. A stop signal ends the run after the step in progress (with
        ``trainer.save_on_signal``, after saving it); :attr:`stop` says whether one came."""
        with self.stop:
            return self._fit()

    def _fit(self) -> dict[str, float]:
        self.prepare()
        resume_from = self.resume_from
        cfg = self.config.trainer
        click.echo(f"starting the worker: loading {self.config.model.partial_pretrain} ...")
        self.group = cast(SFTGroup, self.run.worker_group(SFT_WORKER, self.engine, "actor"))
        trackers = None
        try:
            self.group.init_model()
            trackers = self.run.trackers()
            if resume_from is not None:
                self.load_checkpoint(resume_from)
            with self.run.progress(
                self.total_steps, initial_step=self.global_step, keys=BAR_KEYS, line_keys=LINE_KEYS
            ) as bar:
                if self.val_dataset is not None and resume_from is None:
                    with bar.phase("validating before training"):
                        val = self.validate()
                    trackers.log(val, step=0)
                    bar.update(0, val)
                    self.last.update(val)
                saved = self.global_step
                for step in range(self.global_step + 1, self.total_steps + 1):
                    if self.stop.requested:
                        break
                    self.global_step = step
                    metrics = self._step()
                    is_last = step == self.total_steps
                    if self.val_dataset is not None and (is_last or cfg.test_freq > 0 and step % cfg.test_freq == 0):
                        with bar.phase(f"validating after step {step}"):
                            metrics.update(self.validate())
                    trackers.log(metrics, step=step)
                    bar.update(step, metrics)
                    self.last.update(metrics)
                    if is_last or cfg.save_freq > 0 and step % cfg.save_freq == 0:
                        with bar.phase(f"saving the checkpoint of step {step}"):
                            self.last_checkpoint = self.save_checkpoint()
                        saved = step
                if self.stop.requested and cfg.save_on_signal and self.global_step > saved:
                    with bar.phase(f"saving the checkpoint of step {self.global_step}"):
                        self.last_checkpoint = self.save_checkpoint()
        finally:
            if trackers is not None:
                trackers.finish()
            self.group.shutdown()
        return self.last
