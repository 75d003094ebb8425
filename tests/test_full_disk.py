"""A full disk anywhere in a save is named as such, and the previous checkpoint stays intact: the Hugging Face
export (safetensors), ``torch.save`` and ``torch.distributed.checkpoint`` shards, the tokenizer copy, the
trainer and data-loader state, the run record and the checksums. Each case fills a real, small tmpfs (mounted
in a private mount namespace with ``unshare -m``; skipped where the host does not allow it), and one real run
fills it in the middle of its second save."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_overrides


def _in_small_tmpfs(mount: Path, size: str, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with a fresh tmpfs of ``size`` mounted on ``mount``, in a mount namespace of its own
    (the mount disappears with the process)."""
    mount.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o size={size} tmpfs "{mount}" && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def can_mount(tmp_path_factory: pytest.TempPathFactory) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command: a small file system cannot be mounted here")
    probe = _in_small_tmpfs(tmp_path_factory.mktemp("probe"), "1m", ["true"], 30)
    if probe.returncode != 0:
        pytest.skip(f"mounting a tmpfs in a private mount namespace is not permitted here: {probe.stderr.strip()}")


STAGES = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import torch
    import torch.distributed.checkpoint as dcp
    from omegaconf import OmegaConf
    from safetensors.torch import save_file
    from transformers import AutoTokenizer
    from rlcore.checkpoint import CheckpointError, CheckpointManager, RunIdentity, verify_checkpoint
    from rlcore.checkpoint.manager import write_trainer_state
    from rlcore.config.schema import TrainerConfig

    root = Path(sys.argv[1]) / "ckpt"
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
    config = TrainerConfig(default_local_dir=str(root))
    manager = CheckpointManager(config, RunIdentity.new("/runs/full-disk"))

    def fill(folder):
        stats = os.statvfs(folder)
        fd = os.open(folder / "filler.bin", os.O_CREAT | os.O_WRONLY)
        os.posix_fallocate(fd, 0, stats.f_bavail * stats.f_frsize)
        os.close(fd)

    weights = {"w": torch.randn(64, 64)}
    state = {"global_step": 2, "data": {"epoch": 1, "position": 3, "sampler": list(range(5000))}}
    stages = {
        "hf_export": lambda f: save_file(weights, str(f / "model.safetensors")),
        "torch_save": lambda f: torch.save(weights, f / "extra_state_world_size_1_rank_0.pt"),
        "dcp_shards": lambda f: dcp.save(weights, checkpoint_id=str(f / "model")),
        "tokenizer": lambda f: tokenizer.save_pretrained(f / "huggingface"),
        "trainer_and_loader_state": lambda f: write_trainer_state(f, state),
        "run_record": lambda f: None,  # the manager writes run.json after the parts
        "checksums": lambda f: None,  # ... and checksums.json last (a manager without a run: no run.json)
    }
    manager.save(1, lambda f: save_file(weights, str(f / "model.safetensors")))
    results = {}
    for name, write in stages.items():
        saver = CheckpointManager(config) if name == "checksums" else manager
        try:
            saver.save(2, lambda f: (fill(f), write(f)))
            results[name] = "saved"
        except CheckpointError as exc:
            results[name] = str(exc)
        verify_checkpoint(root / "global_step_1")
        results[name + ":kept"] = sorted(p.name for p in root.iterdir()) + [(root / "latest_checkpointed_iteration.txt").read_text()]
    print(json.dumps(results))
    """
)


def test_a_full_disk_in_each_part_of_a_save_is_named(can_mount: None, tmp_path: Path, tiny_model_dir: Path) -> None:
    mount = tmp_path / "mnt"
    proc = _in_small_tmpfs(mount, "4m", [sys.executable, "-c", STAGES, str(mount), str(tiny_model_dir)], 300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    last_files = {
        "dcp_shards": "model/__0_0.distcp",
        "trainer_and_loader_state": "trainer_state.json",
        "run_record": "run.json",
        "checksums": "checksums.json",
    }
    for stage in ("hf_export", "torch_save", "dcp_shards", "tokenizer", "trainer_and_loader_state", *last_files):
        message = results[stage]
        assert message.startswith(
            f"cannot save the checkpoint of step 2 in {mount / 'ckpt'} (trainer.default_local_dir): the disk is full"
        ), (stage, message)
        assert f"the previous checkpoint {mount / 'ckpt' / 'global_step_1'} is intact" in message, stage
        assert "\n" not in message, stage
        if stage in last_files:
            assert f"the last file written was {last_files[stage]};" in message, (stage, message)
        assert results[stage + ":kept"] == ["global_step_1", "latest_checkpointed_iteration.txt", "1"], stage


def test_a_run_whose_disk_fills_during_the_model_export_stops_with_one_line_and_a_summary(
    can_mount: None, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The tiny model's first checkpoint takes about 3.5 MB; in 5.3 MB the second runs out of space in the
    Hugging Face export (after the actor's sharded state)."""
    mount = tmp_path / "mnt"
    task = make_tiny_task(tmp_path / "task")
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"trainer.default_local_dir={mount / 'ckpt'}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    ]
    proc = _in_small_tmpfs(mount, "5300k", [sys.executable, "-m", "rlcore", "run", *args], 600)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(
        f"error: cannot save the checkpoint of step 2 in {mount / 'ckpt'} (trainer.default_local_dir): the disk is full"
    )
    assert "huggingface" in error and "SafetensorError" in error
    assert f"the previous checkpoint {mount / 'ckpt' / 'global_step_1'} is intact" in error
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed: " + error.removeprefix("error: ")


FILE_SIZE_STAGES = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    import torch
    import torch.distributed.checkpoint as dcp
    from omegaconf import OmegaConf
    from safetensors.torch import save_file
    from rlcore.checkpoint import CheckpointError, CheckpointManager, RunIdentity, verify_checkpoint
    from rlcore.checkpoint.manager import write_trainer_state
    from rlcore.config.schema import TrainerConfig

    root = Path(sys.argv[1]) / "ckpt"
    config = TrainerConfig(default_local_dir=str(root))
    manager = CheckpointManager(config, RunIdentity.new("/runs/file-size"))
    manager.save(1, lambda f: save_file({"w": torch.randn(8, 8)}, str(f / "model.safetensors")))
    weights = {"w": torch.randn(256, 256)}  # 256 KiB, past the 64 KiB limit
    stages = {
        "hf_export": lambda f: save_file(weights, str(f / "model.safetensors")),
        "torch_save": lambda f: torch.save(weights, f / "extra_state_world_size_1_rank_0.pt"),
        "dcp_shards": lambda f: dcp.save(weights, checkpoint_id=str(f / "model")),
        "trainer_state": lambda f: write_trainer_state(f, {"global_step": 2, "sampler": list(range(20000))}),
    }
    results = {"limit": resource.getrlimit(resource.RLIMIT_FSIZE)[0]}
    for name, write in stages.items():
        try:
            manager.save(2, write)
            results[name] = "saved"
        except CheckpointError as exc:
            results[name] = str(exc)
        verify_checkpoint(root / "global_step_1")
        results[name + ":kept"] = sorted(p.name for p in root.iterdir())
    print(json.dumps(results))
    """
)


def test_a_file_over_the_file_size_limit_in_each_part_of_a_save_is_named(tmp_path: Path) -> None:
    """``ulimit -f 64`` (RLIMIT_FSIZE, 64 KiB): Python ignores SIGXFSZ, so each writer's file stops at the
    limit with EFBIG, which safetensors reports as "os error 27", ``torch.save`` and ``torch.distributed.checkpoint``
    only as "unexpected pos" (the file at the limit tells), and a plain write as ``OSError(EFBIG)``."""
    proc = subprocess.run(
        ["bash", "-c", 'ulimit -f 64 && exec "$@"', "bash", sys.executable, "-c", FILE_SIZE_STAGES, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr  # not killed by SIGXFSZ
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["limit"] == 64 * 1024
    root = tmp_path / "ckpt"
    for stage in ("hf_export", "torch_save", "dcp_shards", "trainer_state"):
        message = results[stage]
        assert message.startswith(
            f"cannot save the checkpoint of step 2 in {root} (trainer.default_local_dir): the file-size limit was "
            "hit: no file may exceed 65536 bytes (RLIMIT_FSIZE, set with ulimit -f)"
        ), (stage, message)
        assert f"the previous checkpoint {root / 'global_step_1'} is intact" in message, stage
        assert "\n" not in message, stage
        assert results[stage + ":kept"] == ["global_step_1", "latest_checkpointed_iteration.txt"], stage


REPORT_ON_A_FULL_DISK = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from omegaconf import OmegaConf
    from rlcore import load_plugins
    from rlcore.config.schema import TrainerConfig
    from rlcore.presets import PRESETS_FILE
    from rlcore.run import _summarise
    from rlcore.run_context import RunContext

    run_dir = Path(sys.argv[1]) / "runs" / "run-1"
    run_dir.mkdir(parents=True)
    rows = [{"step": s, "critic/score/mean": s / 4, "response_length/mean": 8.0} for s in range(1, 5)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\\n" for row in rows))
    (run_dir / PRESETS_FILE).write_text("[]")
    stats = os.statvfs(run_dir)
    fd = os.open(run_dir / "filler.bin", os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(fd, 0, stats.f_bavail * stats.f_frsize - 8192)  # room for summary.json, not for a plot
    os.close(fd)
    config = OmegaConf.create({"trainer": {"save_freq": -1}})
    _summarise(TrainerConfig(save_freq=-1), RunContext(config, run_dir), load_plugins(), {"critic/score/mean": 1.0}, 12.0, "completed")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["last"] == {"critic/score/mean": 1.0}, summary
    assert (run_dir / "metrics.jsonl").read_text() == "".join(json.dumps(row) + "\\n" for row in rows)
    print("summarised; summary.json and metrics.jsonl kept")
    """
)


def test_a_full_disk_while_writing_the_report_is_one_line_and_keeps_the_summary(
    can_mount: None, tmp_path: Path
) -> None:
    """The end of a run on a disk with room for ``summary.json`` but not for the plots: one line says the
    report was not written and why; the summary and the metrics stay; ``rlcore report`` says the same."""
    mount = tmp_path / "mnt"
    proc = _in_small_tmpfs(mount, "1m", [sys.executable, "-c", REPORT_ON_A_FULL_DISK, str(mount)], 120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip().endswith("summarised; summary.json and metrics.jsonl kept")
    run_dir = mount / "runs" / "run-1"
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("report:")]
    assert line.startswith(f"report:        not written: cannot write the report into {run_dir / 'report'}: ")
    assert "the disk is full" in line
    (curve,) = [line for line in proc.stdout.splitlines() if line.startswith("reward curve:")]
    assert "not drawn: cannot write" in curve and "No space left on device" in curve

    script = (
        REPORT_ON_A_FULL_DISK.split("config = OmegaConf")[0]
        + "from rlcore.cli import cli\nload_plugins().add_commands(cli)\ncli(['report', str(run_dir)])\n"
    )
    again = _in_small_tmpfs(mount, "1m", [sys.executable, "-c", script, str(mount)], 120)
    assert again.returncode == 2, again.stdout + again.stderr
    assert (
        again.stderr.strip() == f"error: cannot write the report into {run_dir / 'report'}: " + line.split(": ", 3)[3]
    )
