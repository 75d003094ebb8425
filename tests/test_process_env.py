"""What a run sets in its own process before training: DeepSpeed kept quiet, and torch's CPU threads within
the cores the process may use (a cgroup CPU quota counts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.process_env import cpu_quota, quiet_third_party, usable_cpus


def test_cpu_quota_reads_cgroup_v2_and_v1(tmp_path: Path) -> None:
    v2 = tmp_path / "cpu.max"
    v1 = (tmp_path / "cfs_quota_us", tmp_path / "cfs_period_us")
    missing = (tmp_path / "none-a", tmp_path / "none-b")
    assert cpu_quota(v2, missing) is None  # no cgroup files at all
    v2.write_text("max 100000\n")
    assert cpu_quota(v2, missing) is None
    v2.write_text("1600000 100000\n")
    assert cpu_quota(v2, missing) == 16
    v2.write_text("150000 100000\n")
    assert cpu_quota(v2, missing) == 2  # 1.5 cores: rounded up
    v2.write_text("garbage\n")
    assert cpu_quota(v2, missing) is None
    v1[0].write_text("-1\n")
    v1[1].write_text("100000\n")
    assert cpu_quota(tmp_path / "no-v2", v1) is None
    v1[0].write_text("400000\n")
    assert cpu_quota(tmp_path / "no-v2", v1) == 4


def test_usable_cpus_is_at_most_the_affinity() -> None:
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_cpu_threads_setting_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer.cpu_threads`` sets torch's threads; without it, a torch about to use more threads than the
    process may run on is brought down to that, unless ``OMP_NUM_THREADS`` is set (then it stands). In this
    process (``set_cpu_threads`` reads the variable when called); torch's setting is given back."""
    import torch

    from rlcore.process_env import set_cpu_threads

    previous = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(64)
        assert set_cpu_threads(None) == usable_cpus() == torch.get_num_threads()
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(64)
        assert set_cpu_threads(None) == 64
        assert set_cpu_threads(3) == 3 == torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)


def test_cpu_threads_must_be_a_positive_integer() -> None:
    from omegaconf import OmegaConf

    from rlcore.config import ConfigError
    from rlcore.process_env import cpu_threads_setting

    assert cpu_threads_setting(OmegaConf.create({"trainer": {"cpu_threads": None}})) is None
    assert cpu_threads_setting(OmegaConf.create({"trainer": {"cpu_threads": 2}})) == 2
    for bad in (0, -1, 1.5, "two"):
        with pytest.raises(ConfigError, match="trainer.cpu_threads must be a positive integer"):
            cpu_threads_setting(OmegaConf.create({"trainer": {"cpu_threads": bad}}))


def test_saving_a_model_prints_no_deepspeed_notice(tmp_path: Path) -> None:
    """transformers' ``save_pretrained`` imports DeepSpeed when it is installed; with the accelerator named
    (what :func:`quiet_third_party` does for ``trainer.device=cpu``), DeepSpeed prints nothing."""
    pytest.importorskip("deepspeed")
    script = (
        "import sys\n"
        "from rlcore.process_env import quiet_third_party\n"
        "if sys.argv[1] == 'quiet': quiet_third_party('cpu')\n"
        "from rlcore_testkit.tiny import build_model, build_tokenizer\n"
        f"build_model(build_tokenizer()).save_pretrained({str(tmp_path / 'm')!r})\n"
        "import deepspeed  # noqa: F401  (it was imported: the check is meaningful)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS_")}
    for mode, noisy in (("default", True), ("quiet", False)):
        out = subprocess.run([sys.executable, "-c", script, mode], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        assert ("Setting accelerator to CPU" in out.stdout + out.stderr) == noisy, (mode, out.stdout[-500:])


def test_quiet_third_party_names_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    quiet_third_party("cuda")
    assert os.environ["DS_ACCELERATOR"] == "cuda"
    monkeypatch.delenv("DS_ACCELERATOR")
    quiet_third_party("cpu")
    assert os.environ["DS_ACCELERATOR"] == "cpu"
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")  # the user's setting is kept
    quiet_third_party("cpu")
    assert os.environ["DS_ACCELERATOR"] == "xpu"
