"""The plugin's hooks: the bundled CPU tasks' scorers (``rlcore/arith``, ...) and presets (``arith-cpu``, the
task ``rlcore run`` trains by default, ...), and verl's GSM8K, MATH and Geometry3K task parts: their scorers (by
``data_source``), tools, interaction and ``rlcore data gsm8k`` / ``rlcore data geo3k``.

This module must stay free of torch imports: ``rlcore plugins``, config loading and the command line's start-up
import it.
"""

from __future__ import annotations

import click

from rlcore import hookimpl
from rlcore.api import PresetSpec, RewardScorerSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_reward_scorers(register):
    """Register the scorers of the bundled tasks and verl's GSM8K, MATH and Geometry3K scorers. Each compares the answer with the ground truth as text
    (``RewardScorerSpec(ground_truth="text")``): the reward manager passes ``33.0`` from a float column as
    ``"33"`` and counts the ground truths without a clear text form (see ``rlcore.reward.ground_truth``)."""
    text = RewardScorerSpec(ground_truth="text")
    register(
        "rlcore/arith",
        "rlcore_plugin_tasks.arith:score",
        description="bundled task: exact answer of a small sum",
        spec=text,
    )
    register(
        "rlcore/arith_tools",
        "rlcore_plugin_tasks.arith_tools:score",
        description="bundled tool task: the last integer of the response is the product",
        spec=text,
    )
    register(
        "rlcore/arith_chain",
        "rlcore_plugin_tasks.arith_chain:score",
        description="bundled two-step task: the last integer of the response is a+b-c",
        spec=text,
    )
    register(
        "rlcore/shapes_vl",
        "rlcore_plugin_tasks.shapes_vl:score",
        description="bundled vision-language task: the first word of the response is the shape's colour",
        spec=text,
    )
    register(
        "openai/gsm8k",
        "rlcore_plugin_tasks.scorers.gsm8k:score",
        spec=text,
        description="GSM8K '#### N' answer match",
        aliases=("gsm8k",),
    )
    register(
        "lighteval/MATH",
        "rlcore_plugin_tasks.scorers.math:score",
        spec=text,
        description="MATH \\boxed{} answer match (math-verify when installed)",
        aliases=("DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"),
    )
    register(
        "hiyouga/geometry3k",
        "rlcore_plugin_tasks.scorers.geo3k:score",
        spec=text,
        description="Geometry3K: 0.9 x \\boxed{} answer match + 0.1 x <think>...</think> format",
        aliases=("geo3k",),
    )


@hookimpl
def register_presets(register):
    """Register the bundled tasks' presets (``arith-cpu`` is applied by ``rlcore run`` when no data is given).

    The spec's ``prepare`` writes a task's data before the run; ``task`` is the stem of its run's name, which
    :func:`rlcore.config.run_name.name_after_presets` completes with the presets applied on top."""
    register(
        "arith-cpu",
        "rlcore_plugin_tasks.arith:cpu_preset",
        description="bundled CPU task: GRPO on small sums from a biased warm-started model",
        spec=PresetSpec(prepare="rlcore_plugin_tasks.arith:prepare_assets", task="arith"),
    )
    register(
        "arith-tail-cpu",
        "rlcore_plugin_tasks.arith_tail:cpu_preset",
        description="bundled benchmark task: the sums with heavy-tailed response budgets (Pareto, up to 192 tokens)",
        spec=PresetSpec(prepare="rlcore_plugin_tasks.arith_tail:prepare_assets", task="arith-tail"),
    )
    register(
        "arith-tools-cpu",
        "rlcore_plugin_tasks.arith_tools:cpu_preset",
        description="bundled multi-turn task: 2-digit products with a calculator tool (GRPO, HF engine)",
        spec=PresetSpec(prepare="rlcore_plugin_tasks.arith_tools:prepare_assets", task="arith-tools"),
    )
    register(
        "arith-chain-cpu",
        "rlcore_plugin_tasks.arith_chain:cpu_preset",
        description="bundled CPU task: GRPO on a+b-c answered as a two-step chain, from a biased warm start",
        spec=PresetSpec(prepare="rlcore_plugin_tasks.arith_chain:prepare_assets"),
    )
    register(
        "shapes-vl-cpu",
        "rlcore_plugin_tasks.shapes_vl:cpu_preset",
        description="bundled vision-language task: name the colour of a drawn shape (tiny Qwen2-VL, GRPO, HF engine)",
        spec=PresetSpec(prepare="rlcore_plugin_tasks.shapes_vl:prepare_assets", task="shapes-vl"),
    )


@hookimpl
def register_tools(register):
    """Register verl's GSM8K and Geometry3K answer-check tools (verl's class paths are aliases, so verl's tool
    YAML files load unchanged)."""
    register(
        "gsm8k",
        "rlcore_plugin_tasks.answer_tools:Gsm8kTool",
        description="verl's GSM8K answer check (calc_gsm8k_reward)",
        aliases=("verl.tools.gsm8k_tool.Gsm8kTool",),
    )
    register(
        "geo3k",
        "rlcore_plugin_tasks.answer_tools:Geo3kTool",
        description="verl's Geometry3K answer check (calc_geo3k_reward)",
        aliases=("verl.tools.geo3k_tool.Geo3kTool",),
    )


@hookimpl
def register_interactions(register):
    """Register verl's GSM8K interaction (verl's class path is an alias)."""
    register(
        "gsm8k",
        "rlcore_plugin_tasks.interactions:Gsm8kInteraction",
        description="verl's GSM8K user: 'try again' until the answer is right",
        aliases=("verl.interactions.gsm8k_interaction.Gsm8kInteraction",),
    )


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``data gsm8k`` and ``data geo3k`` (verl's GSM8K and Geometry3K as verl-schema parquet)."""
    from rlcore_plugin_tasks.commands import add_commands

    add_commands(cli)
