"""A ``key=value`` override's value: YAML, with Hydra's mapping without spaces (``{x:1,y:2}``) read as Hydra reads
it (rlcore.config.override_value), and one that cannot be read unambiguously an error naming the override."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit import runs

from rlcore.api import ConfigError
from rlcore.config import load_config
from rlcore.config.loader import parse_override
from rlcore.config.override_value import HydraMappingError, hydra_flow, read_value

TURBO = "actor_rollout_ref.actor.fsdp_config.turbo_config.distributed.fsdp_plan"


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        # what YAML reads as {'x:1': None, 'y:2': None}
        ("{x:1,y:2}", {"x": 1, "y": 2}),
        ("{x: 1, y:2}", {"x": 1, "y": 2}),
        ("{a.b:{},c:{}}", {"a.b": {}, "c": {}}),
        ("{a:{b:1e-6,c:true},d:[1,x]}", {"a": {"b": 1e-6, "c": True}, "d": [1, "x"]}),
        ("[1,{x:1}]", [1, {"x": 1}]),
        ("{a:'p:q',b:\"r,s\"}", {"a": "p:q", "b": "r,s"}),
        ("{a:null,b:}", {"a": None, "b": ""}),
        # Hydra's escaped braces, which YAML cannot read (an alias '*'), in keys and values
        (r"{model.visual.blocks.\{*\}:{},lm_head:{}}", {"model.visual.blocks.{*}": {}, "lm_head": {}}),
        (r"{a:\{x\}}", {"a": "{x}"}),
        # YAML's readings stay
        ("{x: 1, y: 2}", {"x": 1, "y": 2}),
        ("{'a:b': 1}", {"a:b": 1}),
        ("[a,b]", ["a", "b"]),
        ("1e-6", 1e-6),
        ("x:1", "x:1"),
    ],
)
def test_values_read_as_hydra_reads_them(raw: str, value: Any) -> None:
    assert read_value(raw) == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{a:b:c}", "a ':' in the value 'b'"),
        ("{a:1", "expected '}' at character 5, found the end"),
        ("{:1}", "an empty key at character 2"),
        ("{a:1,a:2}", "the key 'a' is given twice"),
        ("{a:1}x", "unexpected 'x' after the closing '}'"),
        ("{a{b:1}", "an unescaped '{' in a key at character 3"),
        ("{a:'b}", "the quote at character 4 is not closed"),
    ],
)
def test_a_mapping_that_cannot_be_read_unambiguously_says_why(raw: str, reason: str) -> None:
    with pytest.raises(HydraMappingError, match=reason.replace("(", r"\(").replace("[", r"\[").replace("{", r"\{")):
        hydra_flow(raw)


def test_the_error_names_the_override() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_override("+data.apply_chat_template_kwargs={a:b:c}")
    assert (
        "override '+data.apply_chat_template_kwargs={a:b:c}': cannot read the mapping unambiguously: a ':' in the "
        "value 'b'" in str(caught.value)
    )
    result = runs.dry_run("data.train_files=x.parquet", "actor_rollout_ref.model.path=m", "data.x={a:1")
    assert result.exit_code == 2, result.output
    assert "override 'data.x={a:1': cannot read the mapping unambiguously" in result.output
    assert "Traceback" not in result.output


def test_a_hydra_mapping_arrives_in_the_config() -> None:
    config = load_config(overrides=["+data.apply_chat_template_kwargs={enable_thinking:false,depth:2}"])
    assert OmegaConf.to_container(config.data.apply_chat_template_kwargs) == {"enable_thinking": False, "depth": 2}


def test_fsdp_turbos_escaped_module_plan_reaches_the_plan_note() -> None:
    """verl's FSDP-Turbo scripts write apply_modules={model.visual.blocks.\\{*\\}:{},...}."""
    result = runs.dry_run(
        "data.train_files=x.parquet",
        "actor_rollout_ref.model.path=m",
        "actor_rollout_ref.actor.strategy=fsdp_turbo",
        f"+{TURBO}.apply_modules={{model.layers.\\{{*\\}}:{{}},lm_head:{{}}}}",
    )
    assert result.exit_code == 0, result.output
    assert f"{TURBO.removeprefix('actor_rollout_ref.actor.')}" in result.output
    assert "lm_head" in result.output and "{*}" in result.output
