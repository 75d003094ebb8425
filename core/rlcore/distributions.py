"""Which distribution provides each component that rlcore knows of but does not ship itself.

This is the table behind the ``pip install ...`` line of every "component not installed" error (and of an
``rlcore`` sub-command that a plugin adds, such as ``rlcore report``): when a
config names ``actor_rollout_ref.actor.strategy=fsdp`` and no loaded plugin registers it, the error says
``pip install rlcore-plugin-fsdp``. ``tests/test_registry.py`` checks that the row of every distribution in
this repository's ``plugins/`` (all of the rows today, the Megatron and DeepSpeed backends included) agrees
with what its plugin really registers, so the table cannot drift from the code; a row naming a kind that is
not in :data:`rlcore.api.kinds.KINDS` is refused when this module is imported.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field

from rlcore.api.kinds import KINDS


@dataclass(frozen=True)
class Distribution:
    """A plugin distribution, the components (names and aliases, by kind) it registers, and how to install it.

    ``extras`` maps an extra that a working install needs to the machines it is for (``{"cpu": "CPU
    machines", "gpu": "CUDA"}``); without extras, a plain ``pip install <name>`` is enough. ``commands`` are
    the ``rlcore`` sub-commands it adds, as typed after ``rlcore`` (``"sft"``, ``"data arith-sft"``).
    ``config_keys`` are the dotted prefixes of the config keys its ``config_defaults`` declares
    (``"global_profiler"``): without the plugin loaded, a config setting one of them names the distribution.
    """

    name: str
    components: dict[str, tuple[str, ...]]
    extras: dict[str, str] = field(default_factory=dict)
    commands: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a row whose components name a kind rlcore does not know."""
        unknown = sorted(set(self.components) - set(KINDS))
        if unknown:
            raise ValueError(f"distribution {self.name}: unknown component kind(s) {', '.join(unknown)}")

    @property
    def install_line(self) -> str:
        """The command that installs it, e.g. ``pip install 'rlcore-plugin-vllm[cpu]' (CPU machines) or ...``."""
        if not self.extras:
            return f"pip install {self.name}"
        lines = (f"pip install '{self.name}[{extra}]' ({machines})" for extra, machines in self.extras.items())
        return " or ".join(lines)

    @property
    def absence(self) -> str:
        """Why its components are missing: ``is not installed: <install line>``, or ``is installed but did not
        load (...)`` (disabled or failed)."""
        if self.is_installed():
            return "is installed but did not load (disabled or failed: see `rlcore plugins`)"
        return f"is not installed: {self.install_line}"

    def is_installed(self) -> bool:
        """Whether the distribution is installed in this environment (loaded or not)."""
        try:
            importlib.metadata.distribution(self.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


#: every plugin distribution rlcore points users to, with everything it registers
DISTRIBUTIONS: tuple[Distribution, ...] = (
    Distribution("rlcore-plugin-fsdp", {"training_backend": ("fsdp", "fsdp2")}),
    Distribution("rlcore-plugin-megatron", {"training_backend": ("megatron",)}),
    Distribution("rlcore-plugin-deepspeed", {"training_backend": ("deepspeed",)}),
    Distribution("rlcore-plugin-hf", {"rollout_engine": ("hf",)}),
    Distribution("rlcore-plugin-vllm", {"rollout_engine": ("vllm",)}, {"cpu": "CPU machines", "gpu": "CUDA"}),
    Distribution("rlcore-plugin-sglang", {"rollout_engine": ("sglang",)}, {"gpu": "CUDA only"}),
    Distribution(
        "rlcore-plugin-grpo", {"advantage_estimator": ("grpo", "grpo_passk", "gdpo"), "reward_manager": ("gdpo",)}
    ),
    Distribution("rlcore-plugin-ppo", {"advantage_estimator": ("gae",), "policy_loss": ("dppo_tv",)}),
    Distribution(
        "rlcore-plugin-dapo", {"preset": ("dapo",), "reward_manager": ("dapo",), "batch_filter": ("dapo-groups",)}
    ),
    Distribution("rlcore-plugin-rloo", {"advantage_estimator": ("rloo",)}),
    Distribution(
        "rlcore-plugin-reinforce-pp", {"advantage_estimator": ("reinforce_plus_plus", "reinforce_plus_plus_baseline")}
    ),
    Distribution("rlcore-plugin-remax", {"advantage_estimator": ("remax",)}),
    Distribution("rlcore-plugin-gspo", {"preset": ("gspo",), "policy_loss": ("gspo",)}),
    Distribution("rlcore-plugin-drgrpo", {"preset": ("drgrpo",)}),
    Distribution("rlcore-plugin-gpg", {"advantage_estimator": ("gpg",), "policy_loss": ("gpg",)}),
    Distribution("rlcore-plugin-entropy", {"policy_loss": ("clip_cov", "kl_cov")}),
    Distribution("rlcore-plugin-opo", {"advantage_estimator": ("opo",)}),
    Distribution(
        "rlcore-plugin-sppo", {"advantage_estimator": ("sppo",), "policy_loss": ("sppo",), "preset": ("sppo",)}
    ),
    Distribution("rlcore-plugin-cispo", {"policy_loss": ("cispo",)}),
    Distribution("rlcore-plugin-gmpo", {"policy_loss": ("geo_mean",)}),
    Distribution("rlcore-plugin-sapo", {"policy_loss": ("sapo",)}),
    Distribution("rlcore-plugin-otb", {"advantage_estimator": ("optimal_token_baseline",)}),
    Distribution("rlcore-plugin-prime", {"advantage_estimator": ("prime",), "preset": ("prime",)}),
    Distribution("rlcore-plugin-distill", {"reward_manager": ("teacher_only",)}),
    Distribution("rlcore-plugin-swanlab", {"tracker": ("swanlab",)}),
    Distribution("rlcore-plugin-wandb", {"tracker": ("wandb", "tracking")}),
    Distribution("rlcore-plugin-tensorboard", {"tracker": ("tensorboard",)}),
    Distribution("rlcore-plugin-mlflow", {"tracker": ("mlflow",)}),
    Distribution(
        "rlcore-plugin-sandbox",
        {"reward_scorer": ("codecontests", "apps", "codeforces", "taco"), "tool": ("code_interpreter",)},
        commands=("sandbox", "sandbox check"),
        config_keys=("reward_model.sandbox", "reward_model.sandbox_fusion"),
    ),
    Distribution(
        "rlcore-plugin-tasks",
        {
            "preset": ("arith-cpu", "arith-tools-cpu", "arith-chain-cpu", "arith-tail-cpu", "shapes-vl-cpu"),
            "reward_scorer": (
                *("rlcore/arith", "rlcore/arith_tools", "rlcore/arith_chain", "rlcore/shapes_vl"),
                *("openai/gsm8k", "gsm8k", "hiyouga/geometry3k", "geo3k"),
                *("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"),
            ),
            "tool": ("gsm8k", "verl.tools.gsm8k_tool.Gsm8kTool", "geo3k", "verl.tools.geo3k_tool.Geo3kTool"),
            "interaction": ("gsm8k", "verl.interactions.gsm8k_interaction.Gsm8kInteraction"),
        },
        commands=("data gsm8k", "data geo3k"),
    ),
    Distribution("rlcore-plugin-judge", {"reward_manager": ("judge",)}),
    Distribution(
        "rlcore-plugin-agents",
        {
            "agent_loop": ("single_turn", "single_turn_agent", "tool_agent"),
            "tool_parser": ("hermes", "qwen", "qwen25"),
            "tool": ("calculator", "search", "verl.tools.search_tool.SearchTool"),
            "retriever": ("http", "bm25"),
        },
    ),
    Distribution("rlcore-plugin-sft", {}, commands=("sft", "data arith-sft")),
    Distribution("rlcore-plugin-report", {}, commands=("report",), config_keys=("trainer.report",)),
    Distribution(
        "rlcore-plugin-health",
        {
            "health_monitor": (
                *("reward_hacking", "length_blowup", "entropy_collapse", "kl_spike", "grad_norm_spike"),
                *("clip_saturation", "repetition", "reward_dominance", "logprob_mismatch", "nonfinite"),
            ),
            "preset": ("reward-loophole",),
        },
    ),
    Distribution("rlcore-plugin-plan", {}, commands=("plan",)),
    Distribution("rlcore-plugin-scaffold", {}, commands=("new", "new plugin")),
    Distribution(
        "rlcore-plugin-profiler",
        {},
        config_keys=(
            "global_profiler",
            *(f"{role}.profiler" for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref")),
            *("actor_rollout_ref.rollout.profiler", "critic.profiler", "reward_model.profiler"),
        ),
    ),
)


def by_name(name: str) -> Distribution | None:
    """The table's row for the distribution ``name`` (normalised, e.g. ``rlcore-plugin-vllm``), if any."""
    return next((dist for dist in DISTRIBUTIONS if dist.name == name), None)


def provider(kind: str, name: str) -> Distribution | None:
    """The distribution that registers ``name`` (or the alias ``name``) of ``kind``, if the table knows one."""
    return next((dist for dist in DISTRIBUTIONS if name in dist.components.get(kind, ())), None)


def provided_names(kind: str) -> list[str]:
    """Every name and alias of ``kind`` in the table (candidates for a did-you-mean suggestion)."""
    return sorted({name for dist in DISTRIBUTIONS for name in dist.components.get(kind, ())})


def missing_command_advice(command: str) -> str | None:
    """What to do about the ``rlcore`` sub-command ``command`` (as typed after ``rlcore``: ``"data arith-sft"``)
    not being there: install the distribution that adds it, or find out why the installed one did not.
    ``None`` when no distribution of the table adds it."""
    dist = next((dist for dist in DISTRIBUTIONS if command in dist.commands), None)
    if dist is None:
        return None
    if dist.is_installed():
        return (
            f"`rlcore {command}` is added by {dist.name}, which is installed but did not add it "
            f"(disabled, failed to load, or an older version: see `rlcore plugins`)"
        )
    return f"`rlcore {command}` is added by {dist.name}, which is not installed: {dist.install_line}"


def key_owner(key: str) -> Distribution | None:
    """The distribution whose ``config_keys`` holds the dotted ``key`` (the prefix itself or a key under it)."""
    return next(
        (dist for dist in DISTRIBUTIONS if any(key == p or key.startswith(p + ".") for p in dist.config_keys)), None
    )


def owned_key_advice(key: str) -> str | None:
    """What to do about the config ``key`` that no loaded plugin declares when a distribution of the table owns
    it: install it, or find out why the installed one did not load. ``None`` when no distribution owns it."""
    dist = key_owner(key)
    if dist is None:
        return None
    if dist.is_installed():
        return f"a key of {dist.name}, which is installed but did not load (disabled or failed: see `rlcore plugins`)"
    return f"a key of {dist.name}, which is not installed: {dist.install_line}"


#: components verl has and no rlcore distribution provides yet, by (kind, verl's name): the feature, as a user
#: who names it should read it
NOT_IN_RLCORE: dict[tuple[str, str], str] = {
    ("training_backend", "veomni"): "verl's VeOmni engine",
    ("rollout_engine", "trtllm"): "TensorRT-LLM rollout (rollout.name=trtllm)",
}


def missing_component_advice(kind: str, name: str) -> str | None:
    """What to do about ``name`` of ``kind`` not being registered: install its distribution, find out why
    the installed one is not loaded, or (a component of verl's no distribution provides) that it is a missing
    feature. ``None`` when the tables do not know the name."""
    feature = NOT_IN_RLCORE.get((kind, name))
    if feature is not None:
        return f"{feature} is not supported by rlcore yet (no distribution provides it)"
    dist = provider(kind, name)
    if dist is None:
        return None
    if dist.is_installed():
        return (
            f"it is provided by {dist.name}, which is installed but did not register it "
            f"(disabled, failed to load, or an older version: see `rlcore plugins`)"
        )
    return f"it is provided by {dist.name}, which is not installed: {dist.install_line}"
