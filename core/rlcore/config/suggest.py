"""What an undeclared config key was meant to be: another trainer's name for one of verl's keys
(``learning_rate`` → ``lr``), or an option of ``rlcore run`` written as a key (``preset=dapo`` →
``--preset dapo``).

:class:`~rlcore.config.loader.KnownKeys` asks :func:`synonym_key` before its spelling-based suggestion, and
the loader asks :func:`option_hint` before calling a key unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: the last part of a key as other trainers (Hugging Face's Trainer, TRL, OpenRLHF, ...) name it -> the last
#: part of verl's key for it, in order of preference
SYNONYMS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr",),
    "epochs": ("total_epochs", "ppo_epochs"),
    "num_epochs": ("total_epochs",),
    "num_train_epochs": ("total_epochs",),
    "max_epochs": ("total_epochs",),
    "steps": ("total_training_steps",),
    "max_steps": ("total_training_steps",),
    "num_steps": ("total_training_steps",),
    "total_steps": ("total_training_steps",),
    "train_steps": ("total_training_steps",),
    "num_generations": ("n",),
    "num_samples": ("n",),
    "group_size": ("n",),
    "num_return_sequences": ("n",),
    "max_grad_norm": ("grad_clip",),
    "gradient_clipping": ("grad_clip",),
    "warmup_steps": ("lr_warmup_steps",),
    "num_warmup_steps": ("lr_warmup_steps",),
    "batch_size": ("train_batch_size",),
    "mini_batch_size": ("ppo_mini_batch_size",),
    "micro_batch_size": ("ppo_micro_batch_size_per_gpu",),
    "per_device_train_batch_size": ("ppo_micro_batch_size_per_gpu",),
    "max_completion_length": ("max_response_length",),
    "max_new_tokens": ("max_response_length",),
    "beta": ("kl_loss_coef",),
    "entropy_coef": ("entropy_coeff",),
    "epsilon": ("clip_ratio",),
    "epsilon_high": ("clip_ratio_high",),
    "epsilon_low": ("clip_ratio_low",),
    "cliprange": ("clip_ratio",),
    "model_name_or_path": ("path",),
    "model_name": ("path",),
    "model_path": ("path",),
    "gradient_checkpointing": ("enable_gradient_checkpointing",),
    "output_dir": ("default_local_dir",),
    "checkpoint_dir": ("default_local_dir",),
    "save_steps": ("save_freq",),
    "save_interval": ("save_freq",),
    "eval_steps": ("test_freq",),
    "eval_freq": ("test_freq",),
    "val_freq": ("test_freq",),
    "num_iterations": ("ppo_epochs",),
    "train_file": ("train_files",),
    "val_file": ("val_files",),
    "eval_files": ("val_files",),
    "test_files": ("val_files",),
    "project": ("project_name",),
    "run_name": ("experiment_name",),
    "report_to": ("logger",),
    "num_gpus": ("n_gpus_per_node",),
    "loss_type": ("loss_agg_mode",),
    "lr_scheduler": ("lr_scheduler_type",),
    "advantage_estimator": ("adv_estimator",),
}

#: the top-level sections in the order a key that several of them have is suggested from (the actor's
#: ``optim.lr`` before the critic's)
SECTION_ORDER = ("actor_rollout_ref", "data", "trainer", "algorithm", "critic", "reward_model")

#: keys that are options of ``rlcore run`` -> the option
OPTION_KEYS: dict[str, str] = {"preset": "--preset", "presets": "--preset", "dry_run": "--dry-run"}


def _rank(candidate: str, given_parts: set[str]) -> tuple[int, int, int]:
    """Sort key among the declared keys a synonym points to: most parts in common with the given key, then
    :data:`SECTION_ORDER`, then the shorter key."""
    parts = candidate.split(".")
    section = SECTION_ORDER.index(parts[0]) if parts[0] in SECTION_ORDER else len(SECTION_ORDER)
    return (-len(given_parts & set(parts[:-1])), section, len(parts))


def synonym_key(key: str, declared: Iterable[str]) -> str | None:
    """The declared key that ``key`` names with another trainer's word (:data:`SYNONYMS`): the same key with
    verl's word, else the declared key ending in verl's word that shares most parts with ``key``; None when
    the last part of ``key`` is not such a word."""
    head, _, word = key.rpartition(".")
    keys = set(declared)
    given = set(head.split(".")) if head else set()
    for name in SYNONYMS.get(word, ()):
        wanted = f"{head}.{name}" if head else name
        if wanted in keys:
            return wanted
        ending = [k for k in keys if k.endswith("." + wanted)] or [k for k in keys if k.split(".")[-1] == name]
        if ending:
            return min(ending, key=lambda k: (_rank(k, given), k))
    return None


def option_hint(key: str, value: Any) -> str | None:
    """For a key that is an option of ``rlcore run`` (``preset=dapo``), the option to write instead."""
    option = OPTION_KEYS.get(key)
    if option is None:
        return None
    if option == "--preset":
        names = value if isinstance(value, list) else [value]
        return f"a preset is not a config key: choose it with {' '.join(f'--preset {name}' for name in names)}"
    return f"{key} is not a config key: it is the option {option} of rlcore run"
