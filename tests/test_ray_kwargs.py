"""verl's ``ray_kwargs``: ``ray.init`` options on a real Ray, the timeline file, and the dry-run checks and note."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit.runs import dry_run as rlcore_dry_run

from rlcore.config import load_config
from rlcore.config.ray_kwargs import given_ray_kwargs, ray_init_options

PROBE_MODULE = """
import os


class EnvProbe:
    def __init__(self, config, role, rank, world_size):
        self.rank = rank

    def read_env(self, name):
        return os.environ.get(name)
"""


def dry_run(*args: str):
    """``rlcore run --dry-run`` with a model and data path, plus ``args``."""
    return rlcore_dry_run("data.train_files=x.parquet", "actor_rollout_ref.model.path=m", *args)


def test_ray_init_options_leave_out_nulls_and_what_an_attached_cluster_refuses() -> None:
    config = load_config(
        overrides=[
            "ray_kwargs.ray_init.num_cpus=3",
            "ray_kwargs.ray_init.runtime_env.env_vars.FLAG=true",
            "ray_kwargs.ray_init.runtime_env.py_executable=python3 -X faulthandler",
        ]
    )
    runtime_env = {"env_vars": {"FLAG": "True"}, "py_executable": "python3 -X faulthandler"}
    common = {"include_dashboard": False, "log_to_driver": True, "runtime_env": runtime_env}
    assert ray_init_options(config, attach=False) == {"num_cpus": 3, **common}
    assert ray_init_options(config, attach=True) == {"log_to_driver": True, "runtime_env": runtime_env}
    assert given_ray_kwargs(config) == [
        "ray_kwargs.ray_init.num_cpus",
        "ray_kwargs.ray_init.runtime_env.env_vars.FLAG",
        "ray_kwargs.ray_init.runtime_env.py_executable",
    ]


def test_attaching_with_num_cpus_fails_the_dry_run_naming_both_keys() -> None:
    result = dry_run(
        "trainer.executor=ray",
        "trainer.ray_address=auto",
        "ray_kwargs.ray_init.num_cpus=8",
        "trainer.n_gpus_per_node=2",
    )
    assert result.exit_code == 2, result.output
    assert "ray_kwargs.ray_init.num_cpus=8 cannot be used with trainer.ray_address='auto'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ray_kwargs.ray_init.num_cpus=two", "ray_kwargs.ray_init.num_cpus must be a positive integer or null"),
        ("ray_kwargs.ray_init.object_store_memory=-1", "object_store_memory must be a positive integer or null"),
        (
            "ray_kwargs.ray_init.object_store_memory=1000000",
            "ray_kwargs.ray_init.object_store_memory=1000000 is below Ray's minimum object store of 78643200 bytes",
        ),
        ("ray_kwargs.ray_init.runtime_env.env_vars.X=[1]", "runtime_env.env_vars.X must be a string or a number"),
        ("ray_kwargs.ray_init.runtime_env.py_executable=[python]", "runtime_env.py_executable must be a command"),
        ("ray_kwargs.ray_init.log_to_driver=maybe", "ray_kwargs.ray_init.log_to_driver='maybe' has the wrong type"),
        ("ray_kwargs.timeline_json_file=5", "ray_kwargs.timeline_json_file must be a file path, got 5"),
        ("ray_kwargs.ray_init.num_cpus=1", "ray_kwargs.ray_init.num_cpus=1 is fewer than the 2 CPU bundle(s)"),
    ],
)
def test_bad_ray_kwargs_fail_the_dry_run_naming_the_key(override: str, message: str) -> None:
    result = dry_run("trainer.executor=ray", "trainer.n_gpus_per_node=2", override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_the_cpu_check_counts_the_bundles_of_every_pool() -> None:
    """With split placement a node holds the training and the rollout pool's bundles: 2 + 1 CPUs."""
    split = ("trainer.executor=ray", "trainer.placement=split", "trainer.n_gpus_per_node=2")
    result = dry_run(*split, "trainer.rollout_n_gpus_per_node=1", "ray_kwargs.ray_init.num_cpus=2")
    assert result.exit_code == 2, result.output
    assert "ray_kwargs.ray_init.num_cpus=2 is fewer than the 3 CPU bundle(s)" in result.output
    assert dry_run(*split, "trainer.rollout_n_gpus_per_node=1", "ray_kwargs.ray_init.num_cpus=3").exit_code == 0


def test_the_object_store_minimum_is_rays() -> None:
    """The dry run's minimum is the one ``ray.init`` enforces (Ray's own constant)."""
    pytest.importorskip("ray")
    from ray._private import ray_constants

    from rlcore.config.ray_kwargs import OBJECT_STORE_MINIMUM_BYTES

    assert ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES == OBJECT_STORE_MINIMUM_BYTES
    at_minimum = f"ray_kwargs.ray_init.object_store_memory={OBJECT_STORE_MINIMUM_BYTES}"
    assert dry_run("trainer.executor=ray", "trainer.n_gpus_per_node=2", at_minimum).exit_code == 0


def test_the_local_executor_accepts_ray_kwargs_and_notes_them_as_unused() -> None:
    result = dry_run(
        "trainer.executor=local",
        "ray_kwargs.ray_init.num_cpus=4",
        "+ray_kwargs.ray_init.runtime_env.py_executable=python3",
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "ray_kwargs" in line and line.startswith("note:")]
    assert notes == [
        "note: ray_kwargs.ray_init.num_cpus, ray_kwargs.ray_init.runtime_env.py_executable: unused, "
        "trainer.executor=local runs the workers in this process without Ray (set trainer.executor=ray to start "
        "Ray with them)"
    ]
    assert "ray_kwargs" not in "".join(line for line in dry_run().output.splitlines() if line.startswith("note:"))


@pytest.mark.slow  # Ray's start-up: about 13 s on two busy cores
def test_ray_init_options_reach_a_real_ray_and_its_workers(tmp_path: Path) -> None:
    """A Ray started with num_cpus=3 reports 3 CPUs, in the namespace added with +; env_vars reach the worker actor (its PYTHONPATH finds a
    module only the workers see, its probe variable is set); the timeline file is written once the group is
    shut down. Ray's own SIGTERM handler (it exits the driver at once) does not replace the run's stop handling."""
    ray = pytest.importorskip("ray")
    from rlcore.controller.placement import SESSION
    from rlcore.controller.ray_executor import RayWorkerGroup
    from rlcore.controller.worker_spec import WorkerSpec
    from rlcore.graceful_stop import StopRequest

    assert not ray.is_initialized()
    (tmp_path / "probe_only_workers.py").write_text(PROBE_MODULE)
    timeline = tmp_path / "trace" / "timeline.json"
    pythonpath = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    config = load_config(
        overrides=[
            "trainer.executor=ray",
            "trainer.device=cpu",
            "ray_kwargs.ray_init.num_cpus=3",
            "ray_kwargs.ray_init.runtime_env.env_vars.RAY_KWARGS_PROBE=from-config",
            f"ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH='{pythonpath}'",
            f"ray_kwargs.timeline_json_file={timeline}",
            "+ray_kwargs.ray_init.namespace=rlcore-ray-kwargs",
        ]
    )
    with StopRequest(30.0):
        run_handler = signal.getsignal(signal.SIGTERM)
        group = RayWorkerGroup(WorkerSpec("probe_only_workers:EnvProbe"), config, role="probe")
        assert signal.getsignal(signal.SIGTERM) is run_handler
    try:
        assert ray.cluster_resources()["CPU"] == 3
        assert ray.get_runtime_context().namespace == "rlcore-ray-kwargs"  # a ray.init argument added with +
        assert group.read_env("RAY_KWARGS_PROBE") == "from-config"
    finally:
        group.shutdown()
    assert not ray.is_initialized() and not SESSION.pools
    events = json.loads(timeline.read_text())
    assert events and all({"name", "ph", "ts"} <= set(event) for event in events)  # Chrome trace events


def test_a_ray_init_argument_ray_does_not_know_is_a_config_error() -> None:
    ray = pytest.importorskip("ray")
    from rlcore.config import ConfigError
    from rlcore.controller.placement import ensure_ray

    if ray.is_initialized():
        pytest.skip("another test of this process left Ray running")
    config = load_config(overrides=["trainer.executor=ray", "+ray_kwargs.ray_init.no_such_argument=1"])
    with pytest.raises(ConfigError, match=r"ray_kwargs.ray_init: ray.init\(\) refused .*no_such_argument"):
        ensure_ray(config)
    assert not ray.is_initialized()


def test_verl_file_logger_is_the_jsonl_sink_written_once(tmp_path: Path, plugin_manager: Any) -> None:
    from rlcore.tracking.sinks import build_trackers, read_metrics

    config = OmegaConf.create({"trainer": {"project_name": "p", "experiment_name": "e", "logger": ["console", "file"]}})
    with build_trackers(config, tmp_path, plugin_manager.registry) as trackers:
        assert trackers.names == ["console", "jsonl"]
        trackers.log({"loss": 0.5}, step=1)
    assert read_metrics(tmp_path) == [{"step": 1, "loss": 0.5}]


def test_verl_file_logger_path_is_named_as_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/somewhere/metrics.jsonl")
    result = dry_run("trainer.logger=[console,file]")
    assert result.exit_code == 0, result.output
    assert (
        "note: trainer.logger=file is rlcore's JSONL sink: the metrics go to <run_dir>/metrics.jsonl as flat "
        '{"step": N, "<metric>": value} lines; VERL_FILE_LOGGER_PATH=/somewhere/metrics.jsonl is not read'
    ) in result.output
