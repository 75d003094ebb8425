"""The run machinery a plugin's own trainer runs on (``rlcore.api.RunKit``, ``PluginRun``, ``RunCheckpoints``,
``load_config_tree``), on real files: ``rlcore sft`` end to end is in ``tests/test_sft.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from rlcore.api import (
    ConfigError,
    ConfigSource,
    Problems,
    RunCheckpoints,
    RunKit,
    default_config,
    load_config_tree,
)

TREE = {
    "optim": {"lr": 1.0, "betas": [0.9, 0.99]},
    "trainer": {"executor": "auto", "nnodes": 1, "n_gpus_per_node": 2, "steps": 3},
}


def test_a_plugin_config_tree_reports_every_bad_key_at_once() -> None:
    """Wrong types and unknown keys (with the closest known key and the plugin's listing command) are
    collected; aliases and the base source apply; ``trainer.executor=auto`` is made concrete."""
    problems = Problems()
    config = load_config_tree(
        OmegaConf.create(TREE),
        overrides=["optim.lr=fast", "optim.lrr=2", "trainer.total=5", "optim.betas=[0.8,0.9]"],
        problems=problems,
        base=ConfigSource("bundled task", {"trainer": {"steps": 7}, "optim": {"rate": 2.0}}),
        aliases={"optim.rate": "optim.lr"},
        unknown="unknown demo config key",
        listing="`rlcore demo --dry-run` prints every key",
    )
    with pytest.raises(ConfigError) as caught:
        problems.raise_if_any()
    message = str(caught.value)
    assert "command line: optim.lr='fast' has the wrong type" in message
    assert (
        "command line: unknown demo config key 'optim.lrr'. Did you mean 'optim.lr'? "
        "(`rlcore demo --dry-run` prints every key)" in message
    )
    assert "'trainer.total'" in message
    assert config.trainer.steps == 7 and config.optim.lr == 2.0  # the base, through the alias
    assert list(config.optim.betas) == [0.8, 0.9]
    assert config.trainer.executor == "ray"  # two ranks


def _run_config(tmp_path: Path) -> tuple[DictConfig, DictConfig]:
    """A plugin's config with the ``trainer`` keys the run machinery reads, and the RL-tree config whose
    ``trainer`` section its checkpoints follow."""
    config = OmegaConf.create(
        {
            "trainer": {
                "runs_dir": str(tmp_path / "outputs"),
                "default_local_dir": str(tmp_path / "ckpt"),
                "project_name": "demo",
                "experiment_name": "own-loop",
                "logger": [],
                "progress_bar": False,
                "stop_grace_s": 5.0,
                "cpu_threads": None,
                "device": "cpu",
                "resume_allow_changes": [],
            }
        }
    )
    checkpoints = default_config()
    checkpoints.trainer.default_local_dir = str(tmp_path / "ckpt")
    checkpoints.trainer.resume_mode = "auto"
    return config, checkpoints


def test_a_plugin_run_writes_its_directory_and_resumes_only_its_own_unfinished_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``open_run`` locks the checkpoint folder; ``make_dir`` writes the run directory's files; a checkpoint
    saved with the run's fingerprint is resumed while steps are left; a finished one, or another run's, starts
    a fresh run (``trainer.resume_mode=auto``), saying why."""
    kit = RunKit.load()
    config, checkpoints = _run_config(tmp_path)
    problems = Problems()
    kit.quiet_libraries(config)
    kit.check(config, problems)
    problems.raise_if_any()
    with kit.open_run(config, checkpoints) as run:
        assert (tmp_path / "ckpt" / "rlcore-run.lock").is_file()
        run_dir = run.make_dir({"dp_size": 1})
        assert run_dir.parent == tmp_path / "outputs" / "demo" and run_dir.name.startswith("own-loop-")
        assert json.loads((run_dir / "derived.json").read_text()) == {"dp_size": 1}
        assert OmegaConf.load(run_dir / "config.yaml").trainer.project_name == "demo"
        plugins = json.loads((run_dir / "plugins.json").read_text())
        assert plugins and all(set(record) == {"version", "status"} for record in plugins.values())
        ours = RunCheckpoints.fingerprint("demo", model_path="m", model_config={}, train_files=["a.parquet"])
        run.checkpoints.identity.fingerprint = ours
        saved = run.checkpoints.save(2, {"global_step": 2}, lambda folder: (folder / "actor").mkdir())
        assert (saved / "actor").is_dir() and RunCheckpoints.state(saved)["global_step"] == 2
        assert run.checkpoints.resume_candidate() == saved
        assert run.checkpoints.accept(saved, total_steps=3) == saved
        assert run.checkpoints.accept(saved, total_steps=2) is None  # finished: a fresh run
        run.checkpoints.identity.fingerprint = RunCheckpoints.fingerprint(
            "demo", model_path="other", model_config={}, train_files=["a.parquet"]
        )
        assert run.checkpoints.accept(saved, total_steps=3) is None
    assert "another run's" in capsys.readouterr().out
