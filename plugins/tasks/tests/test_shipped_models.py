"""The bundled tasks' starting models ship with rlcore-plugin-tasks (``rlcore_plugin_tasks/data/<task>-base``):
each matches what ``python -m rlcore_plugin_tasks.build_base`` builds — the model's shape, the tokenizer — and
that build still runs (a few steps here); the distribution's wheel carries them."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from rlcore_plugin_tasks.build_base import TASKS, build
from rlcore_plugin_tasks.warm_start import shipped_model_dir

from rlcore.checkpoint.fingerprint import MODEL_SHAPE_KEYS

#: the files a shipped model folder holds (the vision-language one adds its processor's)
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
#: the config entries that must match between the shipped model and a fresh build
SHAPE_KEYS = (*MODEL_SHAPE_KEYS, "max_position_embeddings", "eos_token_id", "pad_token_id")


def text_config(folder: Path) -> dict:
    """The language model's config (a vision-language config nests it under ``text_config``)."""
    config = json.loads((folder / "config.json").read_text())
    return {**config, **config.get("text_config", {})}


@pytest.fixture(scope="module")
def quick_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each task's model built by the script with 2 warm-start steps (shape and tokenizer are those of a full
    build)."""
    out = tmp_path_factory.mktemp("base-models")
    return {task: build(task, out, steps=2) for task in TASKS}


@pytest.mark.parametrize("task", list(TASKS))
def test_shipped_model_matches_the_build_script(task: str, quick_builds: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    module = importlib.import_module(TASKS[task])
    shipped = shipped_model_dir(module.BASE_MODEL)
    built = quick_builds[task]
    assert MODEL_FILES <= {path.name for path in shipped.iterdir()}, sorted(p.name for p in shipped.iterdir())
    assert {path.name for path in shipped.iterdir()} == {path.name for path in built.iterdir()}
    shipped_config, built_config = text_config(shipped), text_config(built)
    assert {k: shipped_config.get(k) for k in SHAPE_KEYS} == {k: built_config.get(k) for k in SHAPE_KEYS}
    if "vision_config" in built_config:
        assert shipped_config["vision_config"] == built_config["vision_config"]
    assert (
        json.loads((shipped / "tokenizer.json").read_text())["model"]
        == json.loads((built / "tokenizer.json").read_text())["model"]
    )  # the same vocabulary and merges
    tokenizer = AutoTokenizer.from_pretrained(shipped)
    assert tokenizer.get_vocab() == module.base_tokenizer().get_vocab()
    size = sum(path.stat().st_size for path in shipped.iterdir())
    assert size < 8e6, f"{shipped}: {size / 1e6:.1f} MB"


def test_the_shipped_models_are_trained_not_random(quick_builds: dict[str, Path]) -> None:
    """The shipped weights are the full warm start's, not a quick build's: they differ."""
    from safetensors.numpy import load_file

    for task in TASKS:
        module = importlib.import_module(TASKS[task])
        shipped = load_file(shipped_model_dir(module.BASE_MODEL) / "model.safetensors")
        quick = load_file(quick_builds[task] / "model.safetensors")
        assert shipped.keys() == quick.keys()
        assert any(abs(shipped[name] - quick[name]).max() > 1e-2 for name in shipped), task


def test_the_wheel_carries_the_shipped_models(tmp_path: Path) -> None:
    """``pip install rlcore-plugin-tasks`` (a wheel, not an editable install) brings every shipped model file."""
    project = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"
    shutil.copytree(project, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests"))
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", tmp_path / "wheel", source],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "rlcore_plugin_tasks/data/arith_tools.yaml" in names
    for task in TASKS:
        folder = shipped_model_dir(importlib.import_module(TASKS[task]).BASE_MODEL)
        for path in folder.iterdir():
            assert f"rlcore_plugin_tasks/data/{folder.name}/{path.name}" in names, path
