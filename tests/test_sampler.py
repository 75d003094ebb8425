"""``data.sampler.{class_path, class_name}``: verl's custom (curriculum) training samplers.

The loader draws each batch's rows from the sampler, resumes exactly (the sampler's ``state_dict`` or a replay
of the epoch), a curriculum sampler's ``update(batch)`` is called after every step of a real run, and bad
class paths are named in the dry run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from omegaconf import OmegaConf
from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run
from rlcore_testkit.samplers import RandomCurriculumSampler
from torch.utils.data import SequentialSampler

from rlcore.checkpoint import read_trainer_state
from rlcore.cli import cli
from rlcore.config.sections.data import SamplerConfig
from rlcore.data import DataError
from rlcore.data.loader import PromptLoader
from rlcore.data.sampler import build_sampler, load_sampler_class

ROWS = 10


def rows(n: int = ROWS) -> list[dict[str, Any]]:
    return [{"x": torch.tensor([i]), "index": i} for i in range(n)]


def drawn(loader: PromptLoader, batches: int) -> list[list[int]]:
    return [loader.next_batch()["x"][:, 0].tolist() for _ in range(batches)]


def curriculum(seed: int = 7) -> RandomCurriculumSampler:
    return RandomCurriculumSampler(rows(), OmegaConf.create({"seed": seed}))


def perm(seed: int) -> list[int]:
    return torch.randperm(ROWS, generator=torch.Generator().manual_seed(seed)).tolist()


def test_batches_follow_the_sampler_epoch_after_epoch() -> None:
    loader = PromptLoader(rows(), 3, shuffle=True, seed=0, sampler=curriculum())
    assert len(loader) == 3  # 10 rows, batches of 3, the last row of each epoch dropped
    got = drawn(loader, 6)
    assert got[:3] == [perm(7)[0:3], perm(7)[3:6], perm(7)[6:9]]
    assert got[3:] == [perm(8)[0:3], perm(8)[3:6], perm(8)[6:9]]  # the sampler's epoch 1 (seed + 1)
    assert loader.epoch == 1


@pytest.mark.parametrize("taken", [1, 3, 4])  # mid-epoch, at the epoch's end, in the next epoch
@pytest.mark.parametrize("stateful", [True, False])
def test_resume_is_exact(taken: int, stateful: bool) -> None:
    def sampler() -> Any:
        return curriculum() if stateful else SequentialSampler(range(ROWS))

    whole = PromptLoader(rows(), 3, shuffle=True, seed=0, sampler=sampler())
    expected = drawn(whole, 7)
    first = PromptLoader(rows(), 3, shuffle=True, seed=0, sampler=sampler())
    drawn(first, taken)
    state = json.loads(json.dumps(first.state_dict()))  # as the checkpoint stores it
    assert ("sampler" in state) is stateful
    resumed = PromptLoader(rows(), 3, shuffle=True, seed=0, sampler=sampler())
    resumed.load_state_dict(state)
    assert drawn(resumed, 7 - taken) == expected[taken:]


SAMPLER_FILE = """
from rlcore.data.sampler import AbstractSampler
from rlcore_testkit.samplers import RandomCurriculumSampler

NOT_A_SAMPLER = 3

class Plain:
    def __init__(self, data_source, data_config):
        pass

class Broken(AbstractSampler):
    def __init__(self, data_source, data_config):
        raise ValueError("no curriculum for you")

class Endless(AbstractSampler):
    def __init__(self, data_source, data_config):
        pass

    def __iter__(self):
        return iter(range(3))

class Logged(RandomCurriculumSampler):
    def update(self, batch):
        super().update(batch)
        with open({log!r}, "a") as f:
            f.write(" ".join(str(i) for i in sorted(set(batch["index"]))) + "\\n")
"""


@pytest.fixture
def sampler_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_sampler.py"
    path.write_text(SAMPLER_FILE.replace("{log!r}", repr(str(tmp_path / "updates.log"))))
    return path


@pytest.mark.parametrize(
    ("path", "name", "message"),
    [
        ("pkg://no_such_pkg.samplers", "X", "importing module 'no_such_pkg.samplers' raised ModuleNotFoundError"),
        ("pkg://rlcore_testkit.samplers", "Missing", "defines no 'Missing' (data.sampler.class_name)"),
        ("FILE", "NOT_A_SAMPLER", "is not a torch.utils.data.Sampler subclass"),
        ("FILE", "Plain", "is not a torch.utils.data.Sampler subclass"),
        ("file:///no/such/file.py", "X", "data.sampler.class_path='/no/such/file.py': file does not exist"),
        ("FILE", None, "data.sampler.class_name is not"),
    ],
)
def test_bad_sampler_classes_are_named(sampler_file: Path, path: str, name: str | None, message: str) -> None:
    path = str(sampler_file) if path == "FILE" else path
    with pytest.raises(DataError, match="data.sampler") as info:
        load_sampler_class(SamplerConfig(class_path=path, class_name=name))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [("Broken", "data.sampler.class_name=Broken: .*ValueError: no curriculum for you"), ("Endless", "has no len()")],
)
def test_a_failing_constructor_or_a_sampler_without_length_is_named(
    sampler_file: Path, name: str, message: str
) -> None:
    section = SamplerConfig(class_path=f"file://{sampler_file}", class_name=name)
    data = OmegaConf.create({"sampler": {"class_path": section.class_path, "class_name": name}})
    with pytest.raises(DataError, match=message):
        build_sampler(section, data, rows())


def test_dry_run_imports_the_sampler(tmp_path: Path, tiny_model_dir: Path, sampler_file: Path) -> None:
    task = make_tiny_task(tmp_path / "task")
    base = ["run", "--dry-run", *tiny_overrides(tmp_path, tiny_model_dir, task)]
    good = CliRunner().invoke(
        cli,
        [
            *base,
            "data.sampler.class_path=pkg://rlcore_testkit.samplers",
            "data.sampler.class_name=RandomCurriculumSampler",
        ],
    )
    assert good.exit_code == 0, good.output
    assert "data.sampler: rlcore_testkit.samplers.RandomCurriculumSampler (curriculum sampler" in good.output
    bad = CliRunner().invoke(cli, [*base, f"data.sampler.class_path={sampler_file}", "data.sampler.class_name=Plain"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "data.sampler.class_name='Plain'" in bad.output and "not a torch.utils.data.Sampler" in bad.output


def test_a_curriculum_sampler_drives_a_real_run(tmp_path: Path, tiny_model_dir: Path, sampler_file: Path) -> None:
    """Two GRPO steps: each step's prompts are the sampler's next rows, ``update`` sees each step's batch, and
    the checkpoint keeps the sampler's state."""
    task = make_tiny_task(tmp_path / "task")
    tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        f"data.sampler.class_path={sampler_file}",
        "data.sampler.class_name=Logged",
        "data.seed=5",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
    )
    order = torch.randperm(24, generator=torch.Generator().manual_seed(5)).tolist()
    updates = [[int(i) for i in line.split()] for line in (tmp_path / "updates.log").read_text().splitlines()]
    assert updates == [sorted(order[0:4]), sorted(order[4:8])]
    (checkpoint,) = (tmp_path / "ckpt").glob("global_step_2")
    sampler_state = read_trainer_state(checkpoint)["data"]["sampler"]
    assert sampler_state["epoch"] == 0 and sampler_state["yielded"] == 8 and len(sampler_state["updates"]) == 2
