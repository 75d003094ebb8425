"""Config files are read with verl's rules: OmegaConf's YAML (``1e-5`` is a float, a repeated key is an error),
interpolations kept for the whole config to resolve."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlcore.config import ConfigError, load_config
from rlcore.config.compose import read_yaml

ROOT = Path(__file__).resolve().parents[1]
#: every YAML file of the verl samples kept in tests/ (verl 0.9, 0.10 and its engine configs)
VERL_YAML = sorted(
    path
    for folder in ("verl_examples", "verl010_examples", "verl_engine_configs")
    for path in (ROOT / "tests" / folder).rglob("*.yaml")
)


def test_the_verl_samples_have_yaml_files() -> None:
    assert len(VERL_YAML) >= 8, VERL_YAML


@pytest.mark.parametrize("path", VERL_YAML, ids=[str(p.relative_to(ROOT / "tests")) for p in VERL_YAML])
def test_a_verl_yaml_file_reads_as_omegaconf_reads_it(path: Path) -> None:
    """rlcore's reading of the file and verl's (``OmegaConf.load``, interpolations unresolved) are the same
    values of the same types."""
    ours = read_yaml(path)
    verls = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert ours == verls
    assert repr(ours) == repr(verls), "same values, but of different types"


def test_e_notation_in_a_file_is_a_float(tmp_path: Path) -> None:
    """verl's config files write learning rates as ``1e-5``: a float, as on the command line (YAML 1.1 alone
    reads it as a string, which was refused as the wrong type)."""
    path = tmp_path / "run.yaml"
    path.write_text("actor_rollout_ref:\n  actor:\n    optim:\n      lr: 1e-5\n      weight_decay: 1E-2\n")
    config = load_config(files=[str(path)])
    assert config.actor_rollout_ref.actor.optim.lr == 1e-5
    assert config.actor_rollout_ref.actor.optim.weight_decay == 0.01
    assert (
        config.actor_rollout_ref.actor.optim.lr
        == load_config(overrides=["actor_rollout_ref.actor.optim.lr=1e-5"]).actor_rollout_ref.actor.optim.lr
    )


def test_interpolations_in_a_file_resolve_against_the_whole_config(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "trainer:\n  project_name: p\n  experiment_name: ${trainer.project_name}-e\ndata:\n  max_response_length: 48\n"
    )
    config = load_config(files=[str(path)])
    assert config.trainer.experiment_name == "p-e"
    assert config.actor_rollout_ref.rollout.response_length == 48, "rlcore's own interpolation still follows"


def test_a_repeated_key_names_the_file_and_line(tmp_path: Path) -> None:
    """OmegaConf refuses a key given twice in one mapping (plain YAML keeps the last one silently)."""
    path = tmp_path / "twice.yaml"
    path.write_text("trainer:\n  total_epochs: 2\n  total_epochs: 3\n")
    with pytest.raises(ConfigError, match=r"twice.yaml' is not valid YAML: line 3, column 3: found duplicate key"):
        load_config(files=[str(path)])
