"""``trainer`` (the run's length, placement, seed and outputs) and ``async_training``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlcore.config.lanes import lane_cpu_problems
from rlcore.config.sections.base import Section
from rlcore.config.sections.v1 import V1Config


@dataclass(frozen=True)
class LaneCpusConfig(Section):
    """``trainer.lane_cpus``: the CPU cores of each pool's worker processes (executor=ray; docs/distributed.md
    "Pinned lanes"). A value is a Linux CPU list (``"0-3,8"``, or one core number); null leaves that pool
    unpinned. Each worker of a pinned pool runs on the pool's cores with torch threads = its share of them."""

    PATH = "trainer.lane_cpus"
    #: cores of the train pool's workers (actor, reference, critic; every role when colocated); null: unpinned
    trainer: str | None = None
    #: placement=split: cores of the rollout pool's workers, apart from the train pool's; null: unpinned
    rollout: str | None = None

    def problems(self) -> list[str]:
        """Each value is a CPU list; the two lists share no core."""
        return lane_cpu_problems({"trainer": self.trainer, "rollout": self.rollout})


@dataclass(frozen=True)
class TrainerConfig(Section):
    """``trainer``: the run's length, placement, seed and outputs (the ones the core reads)."""

    PATH = "trainer"
    #: auto (local for one rank, else ray) | local (in-process) | ray
    executor: Literal["auto", "local", "ray"] = "auto"
    #: auto | cpu | cuda
    device: str = "auto"
    #: torch's CPU threads in the driver (and the local executor's workers); null: OMP_NUM_THREADS, else torch's default
    #: within the usable cores
    cpu_threads: int | None = None
    #: the seed of every rank and of the prompt uids
    seed: int = 1
    #: reorder each batch so every data-parallel rank gets a similar token count
    balance_batch: bool = False
    #: passes over the training data (unless ``total_training_steps``)
    total_epochs: int = 30
    #: training steps (None: from the epochs)
    total_training_steps: int | None = None
    #: the project's name (checkpoint and run folders, trackers)
    project_name: str = "rlcore"
    #: the run's name (checkpoint and run folders, trackers)
    experiment_name: str = "run"
    #: trackers: console, and plugins: swanlab, wandb (alias tracking), tensorboard, mlflow (+ jsonl, always; alias
    #: file)
    logger: list[str] = field(default_factory=lambda: ["console"])
    #: validation generations logged per validation
    log_val_generations: int = 0
    #: nodes of the run
    nnodes: int = 1
    #: ranks per node: GPUs, or worker processes on CPU
    n_gpus_per_node: int = 1
    #: colocated (every role shares the ranks) | split (rollout on its own ranks; ray)
    placement: Literal["colocated", "split"] = "colocated"
    #: placement=split: rollout ranks per node, besides n_gpus_per_node
    rollout_n_gpus_per_node: int = 1
    #: executor=ray: null starts a local Ray; auto or HOST:PORT attaches to a cluster
    ray_address: str | None = None
    #: executor=ray: the cores of each pool's workers (pinned lanes)
    lane_cpus: LaneCpusConfig = field(default_factory=LaneCpusConfig)
    #: save a checkpoint every this many steps (<= 0: none)
    save_freq: int = -1
    #: true: a completed run ends by writing the actor as a Hugging Face model to <run directory>/model
    save_final_model: bool = False
    #: validate every this many steps and after the last (<= 0: never during training)
    test_freq: int = -1
    #: steps that train only the critic before the actor updates too
    critic_warmup: int = 0
    #: validate once before the first step
    val_before_train: bool = True
    #: validate once and stop
    val_only: bool = False
    #: auto | disable | resume_path
    resume_mode: str = "auto"
    #: resume_mode=resume_path: the checkpoint folder (global_step_<N>)
    resume_from_path: str | None = None
    #: what may differ from a resumed checkpoint's run: model, weights, tokenizer, algorithm, data, unrecorded
    #: (docs/checkpoints.md)
    resume_allow_changes: list[str] = field(default_factory=list)
    #: where checkpoints are saved
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    #: run directories are created under this folder
    runs_dir: str = "outputs"
    #: keep only the newest this many actor checkpoints (null: all)
    max_actor_ckpt_to_keep: int | None = None
    #: keep only the newest this many critic checkpoints (null: all)
    max_critic_ckpt_to_keep: int | None = None
    #: a class (package.module.Class or file.py:Class) built once, whose on_save(path, step) is called after
    #: every checkpoint is published (docs/checkpoints.md)
    checkpoint_callback_class: str | None = None
    #: show a progress bar of the steps
    progress_bar: bool = True
    #: auto | disable (rlcore has only the engine workers; verl's legacy ones: no)
    use_legacy_worker_impl: str = "auto"
    #: a folder: each step's generations are written to <folder>/<step>.jsonl
    rollout_data_dir: str | None = None
    #: a folder: each validation's generations are written to <folder>/<step>.jsonl
    validation_data_dir: str | None = None
    #: stop after this many steps in a row whose loss or gradient norm was not finite
    max_nonfinite_steps: int = 3
    #: SIGINT/SIGTERM: also save a checkpoint of the last finished step before exiting
    save_on_signal: bool = False
    #: SIGINT/SIGTERM: seconds the step in progress may take before it is abandoned (0/null: no bound)
    stop_grace_s: float | None = 20.0
    #: verl's V1 trainer: sync, colocate_async or separate_async, and the sample buffer's staleness bound
    v1: V1Config = field(default_factory=V1Config)

    def problems(self) -> list[str]:
        """Counts are positive (steps: or null), the grace period is seconds ≥ 0."""
        return (
            self.positive("total_epochs")
            + self.positive("max_nonfinite_steps")
            + self.positive("total_training_steps", null=True)
            + self.non_negative("log_val_generations")
            + self.seconds("stop_grace_s")
        )


@dataclass(frozen=True)
class AsyncTrainingConfig(Section):
    """``async_training``: one-step-off-policy training (verl's recipe/one_step_off_policy); docs/async-training.md."""

    PATH = "async_training"
    #: true: the rollout pool generates the next batches while the trainer updates (placement=split, ray)
    enable: bool = False
    #: batches generated ahead: a batch is trained at most this many updates after its weights
    max_staleness_steps: int = 1
    #: verl's fully-async key, mapped onto V1: trainer.v1.separate_async.num_warmup_batches (batches ahead)
    staleness_threshold: float | None = None
    #: verl's fully-async key, mapped onto V1: trainer.v1.separate_async.parameter_sync_step
    trigger_parameter_sync_step: int | None = None
    #: verl's fully-async key: mini-batches per update step; V1's parameter_sync_step is
    #: trigger_parameter_sync_step × require_batches (rlcore samples the step's whole batch at once)
    require_batches: int = 1
    #: verl's fully-async key: responses in flight at a weight sync continue under the new weights; with
    #: separate_async, rlcore's partial rollout (trainer.v1.partial_rollout_tokens, else data.max_response_length / 4)
    partial_rollout: bool = False
