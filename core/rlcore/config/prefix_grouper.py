"""``actor_rollout_ref.actor.use_prefix_grouper``: the checks of the setting before a run starts.

The actor's forwards then compute each prompt once for its ``rollout.n`` responses
(:mod:`rlcore.modelkit.prefix_grouper`). What that forward cannot combine with is refused here, by name, as
verl refuses it: packed sequences, Ulysses sequence parallelism, fused kernels, the Megatron backend, routing
replay, and an update that shuffles rows (it would scatter the samples of a prompt). A vision-language or
mixture-of-experts model, flash attention and sliding-window layers are refused by the engine when it sees
the model. This module reads configs only (no torch): it runs in the dry run.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

KEY = "actor_rollout_ref.actor.use_prefix_grouper"
#: the training backends whose forward is the shared Hugging Face one (:mod:`rlcore.modelkit.hf_models`)
GROUPING_BACKENDS: tuple[str, ...] = ("fsdp", "fsdp2", "deepspeed")


def enabled(config: DictConfig) -> bool:
    """Whether the actor runs the shared-prompt forward."""
    return bool(OmegaConf.select(config, KEY, default=False))


def prefix_grouper_problems(config: DictConfig) -> list[str]:
    """The settings that contradict ``use_prefix_grouper=true``, each naming its key (none when it is off)."""
    if not enabled(config):
        return []
    actor, model = "actor_rollout_ref.actor", "actor_rollout_ref.model"
    checks = [
        (f"{model}.use_remove_padding", True, "packed sequences have no prompt to share"),
        (f"{model}.use_fused_kernels", True, "a fused head takes one label per position"),
        (f"{actor}.shuffle", True, "shuffled rows scatter the samples of a prompt"),
    ]
    problems = [
        f"{KEY}=true cannot run with {key}={str(value).lower()}: {why}"
        for key, value, why in checks
        if OmegaConf.select(config, key, default=None) == value
    ]
    ulysses = OmegaConf.select(config, f"{actor}.ulysses_sequence_parallel_size", default=1)
    if isinstance(ulysses, int) and ulysses > 1:
        problems.append(f"{KEY}=true cannot run with {actor}.ulysses_sequence_parallel_size={ulysses} (> 1)")
    strategy = OmegaConf.select(config, f"{actor}.strategy", default="fsdp")
    if strategy not in GROUPING_BACKENDS:
        problems.append(
            f"{KEY}=true needs a backend that trains the Hugging Face model directly "
            f"({', '.join(GROUPING_BACKENDS)}), not {actor}.strategy={strategy}"
        )
    mode = OmegaConf.select(config, f"{actor}.router_replay.mode", default="disabled")
    if mode != "disabled":
        problems.append(f"{KEY}=true cannot run with {actor}.router_replay.mode={mode}: routing replay is per row")
    return problems


def prefix_grouper_notes(config: DictConfig) -> list[str]:
    """Notes on settings that leave ``use_prefix_grouper=true`` less to share (none when it is off): one
    response per prompt, and fixed micro-batch sizes that cut a prompt's ``rollout.n`` samples (each part then
    runs as a group of its own: the same numbers, the prompt computed once per part)."""
    if not enabled(config):
        return []
    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=1)
    if n == 1:
        return [f"{KEY}=true with actor_rollout_ref.rollout.n=1: every prompt has one response, nothing is shared"]
    notes = []
    passes = (
        ("actor_rollout_ref.actor", "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz"),
        ("actor_rollout_ref.rollout", "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz"),
    )
    for section, size_key, dynamic_key in passes:
        size = OmegaConf.select(config, f"{section}.{size_key}", default=None)
        dynamic = OmegaConf.select(config, f"{section}.{dynamic_key}", default=False)
        if not dynamic and isinstance(size, int) and size % n:
            notes.append(
                f"{KEY}=true: {section}.{size_key}={size} is not a multiple of rollout.n={n}, so some "
                "micro-batches cut a prompt's samples; each part computes the prompt once (a multiple of n, or "
                "the token budget, shares more)"
            )
    return notes
