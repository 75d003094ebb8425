"""verl's ``trainer.checkpoint_callback_class``: a user class whose ``on_save(path, step)`` is called after every
checkpoint is published; a bad class is an error naming the key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.checkpoint.callback import CheckpointCallback, checkpoint_callback_problems
from rlcore.errors import RLCoreError

KEY = "trainer.checkpoint_callback_class"

#: a callback that records, at each call, the path, the step, and whether the folder was complete by then
RECORDER = """
import json
from pathlib import Path

from rlcore.checkpoint import LATEST_FILE, verify_checkpoint


class Recorder:
    def __init__(self):
        self.calls = 0

    def on_save(self, path, step):
        self.calls += 1
        folder = Path(path)
        latest = (folder.parent / LATEST_FILE).read_text().strip()
        record = {"path": path, "step": step, "calls": self.calls, "complete": verify_checkpoint(folder),
                  "latest": latest}
        with open(folder.parent.parent / "saves.jsonl", "a") as log:
            log.write(json.dumps(record) + "\\n")
"""


def test_on_save_is_called_after_every_published_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two steps saving each: the one instance's on_save gets each global_step_N folder (complete, already the
    latest) and its step, in order; the file form ``file.py:Class`` loads the class."""
    task = make_tiny_task(tmp_path / "task", train_rows=8)
    callbacks = tmp_path / "callbacks.py"
    callbacks.write_text(RECORDER)
    ckpt = tmp_path / "out" / "ckpt"
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        f"trainer.default_local_dir={ckpt}",
        f"{KEY}={callbacks}:Recorder",
    )
    records = [json.loads(line) for line in (tmp_path / "out" / "saves.jsonl").read_text().splitlines()]
    assert records == [
        {"path": str(ckpt / f"global_step_{step}"), "step": step, "calls": step, "complete": True, "latest": str(step)}
        for step in (1, 2)
    ]


def test_a_dotted_class_path_is_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's spelling, package.module.Class, imports the module; on_save gets the path as a string."""
    package = tmp_path / "mycallbacks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "upload.py").write_text(
        "class Upload:\n    seen = []\n    def on_save(self, path, step):\n        Upload.seen.append((path, step))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert checkpoint_callback_problems("mycallbacks.upload.Upload") == []
    callback = CheckpointCallback("mycallbacks.upload.Upload")
    callback.on_save(tmp_path / "global_step_3", 3)
    assert sys.modules["mycallbacks.upload"].Upload.seen == [(str(tmp_path / "global_step_3"), 3)]


@pytest.mark.parametrize(
    ("source", "spec", "message"),
    [
        (None, "nowhere_pkg_xyz.callbacks.Upload", "no module named 'nowhere_pkg_xyz.callbacks'"),
        (None, "Upload", "is not a class path"),
        ("class Other:\n    pass\n", "{file}:Upload", "defines no 'Upload'"),
        ("def broken(:\n", "{file}:Upload", "is not valid Python"),
    ],
)
def test_the_dry_run_names_the_key_for_a_bad_class(tmp_path: Path, source: str | None, spec: str, message: str) -> None:
    """A module that cannot be found, a value that is no class path, a file without the class or a file that does
    not parse: one problem naming the key, without running the file."""
    file = tmp_path / "callbacks.py"
    if source is not None:
        file.write_text(source)
    (problem,) = checkpoint_callback_problems(spec.format(file=file))
    assert problem.startswith(f"{KEY}=") and message in problem


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("Upload = 3\n", "is a int, not a class"),
        ("class Upload:\n    pass\n", "class Upload has no on_save(path, step) method"),
        (
            "class Upload:\n    def __init__(self):\n        raise ValueError('no bucket')\n    def on_save(self, p, s):\n        pass\n",
            "Upload() raised ValueError: no bucket",
        ),
        (
            "import sys\nclass Upload:\n    def __init__(self):\n        sys.exit(2)\n    def on_save(self, p, s):\n        pass\n",
            "tried to end the run: SystemExit(2)",
        ),
    ],
)
def test_loading_a_bad_class_is_an_error_naming_the_key(tmp_path: Path, source: str, message: str) -> None:
    """Not a class, no on_save, a constructor that raises or exits: an error naming the key."""
    file = tmp_path / "callbacks.py"
    file.write_text(source)
    with pytest.raises(RLCoreError, match=KEY) as caught:
        CheckpointCallback(f"{file}:Upload")
    assert message in str(caught.value)


def test_an_on_save_that_raises_names_the_key_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    """An exception from on_save is an error naming the key and the call; the folder it was called for stays."""
    file = tmp_path / "callbacks.py"
    file.write_text("class Upload:\n    def on_save(self, path, step):\n        raise OSError('bucket is gone')\n")
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    callback = CheckpointCallback(f"{file}:Upload")
    with pytest.raises(RLCoreError, match=rf"{KEY} .*on_save\('{folder}', 1\) raised OSError: bucket is gone"):
        callback.on_save(folder, 1)
    assert folder.is_dir()
