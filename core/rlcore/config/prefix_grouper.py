"""``actor_rollout_ref.actor.use_prefix_grouper``: the checks of the setting before a run starts.

The actor's forwards then compute each prompt once for its ``rollout.n`` responses
(:mod:`rlcore.modelkit.prefix_grouper`). What that forward cannot combine with is refused here, by name, as
verl refuses it: packed sequences, Ulysses sequence parallelism, fused kernels, the Megatron backend, routing
replay, and an update that shuffles rows (it would scatter the samples of a prompt). A vision-language or
mixture-of-experts model, flash attention and sliding-window layers are refused by the engine when it sees
the model. This module reads the typed sections only (no torch): it runs in the dry run.
"""

from __future__ import annotations

from rlcore.config.schema import ActorRolloutRefConfig

KEY = "actor_rollout_ref.actor.use_prefix_grouper"
#: the training backends whose forward is the shared Hugging Face one (:mod:`rlcore.modelkit.hf_models`)
GROUPING_BACKENDS: tuple[str, ...] = ("fsdp", "fsdp2", "deepspeed")


def prefix_grouper_problems(policy: ActorRolloutRefConfig) -> list[str]:
    """The settings that contradict ``use_prefix_grouper=true``, each naming its key (none when it is off)."""
    actor, model = policy.actor, policy.model
    if not actor.use_prefix_grouper:
        return []
    checks = [
        (model.key("use_remove_padding"), model.use_remove_padding, "packed sequences have no prompt to share"),
        (model.key("use_fused_kernels"), model.use_fused_kernels, "a fused head takes one label per position"),
        (actor.key("shuffle"), actor.shuffle, "shuffled rows scatter the samples of a prompt"),
    ]
    problems = [f"{KEY}=true cannot run with {key}=true: {why}" for key, value, why in checks if value is True]
    ulysses = actor.ulysses_sequence_parallel_size
    if isinstance(ulysses, int) and ulysses > 1:
        problems.append(f"{KEY}=true cannot run with {actor.key('ulysses_sequence_parallel_size')}={ulysses} (> 1)")
    if actor.strategy not in GROUPING_BACKENDS:
        problems.append(
            f"{KEY}=true needs a backend that trains the Hugging Face model directly "
            f"({', '.join(GROUPING_BACKENDS)}), not {actor.key('strategy')}={actor.strategy}"
        )
    mode = actor.router_replay.mode
    if mode != "disabled":
        problems.append(f"{KEY}=true cannot run with {actor.PATH}.router_replay.mode={mode}: routing replay is per row")
    return problems


def prefix_grouper_notes(policy: ActorRolloutRefConfig) -> list[str]:
    """Notes on settings that leave ``use_prefix_grouper=true`` less to share (none when it is off): one
    response per prompt, and fixed micro-batch sizes that cut a prompt's ``rollout.n`` samples (each part then
    runs as a group of its own: the same numbers, the prompt computed once per part)."""
    actor, rollout = policy.actor, policy.rollout
    if not actor.use_prefix_grouper:
        return []
    n = rollout.n
    if n == 1:
        return [f"{KEY}=true with actor_rollout_ref.rollout.n=1: every prompt has one response, nothing is shared"]
    notes = []
    passes = (
        (actor.key("ppo_micro_batch_size_per_gpu"), actor.ppo_micro_batch_size_per_gpu, actor.use_dynamic_bsz),
        (
            rollout.key("log_prob_micro_batch_size_per_gpu"),
            rollout.log_prob_micro_batch_size_per_gpu,
            rollout.log_prob_use_dynamic_bsz,
        ),
    )
    for key, size, dynamic in passes:
        if not dynamic and isinstance(size, int) and size % n:
            notes.append(
                f"{KEY}=true: {key}={size} is not a multiple of rollout.n={n}, so some "
                "micro-batches cut a prompt's samples; each part computes the prompt once (a multiple of n, or "
                "the token budget, shares more)"
            )
    return notes
