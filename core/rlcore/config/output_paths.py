"""The folders and files a run writes, made absolute once at start-up, and shown as the user wrote them.

Relative paths would otherwise follow the process's working directory: user code that calls ``os.chdir``
(a reward function, a tool) would send every later checkpoint, metric and trace somewhere else, outside the
folder's lock and out of reach of the next run's resume. Messages still show a path under the folder the
command started in relative to it (:func:`shown_path`), as the user wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

#: the working directory when the output paths were made absolute (what relative paths meant)
_launch_dir: Path | None = None

#: the keys of ``rlcore run``'s config that name a folder or file the run writes
RUN_OUTPUT_KEYS: tuple[str, ...] = (
    "trainer.default_local_dir",
    "trainer.runs_dir",
    "trainer.rollout_data_dir",
    "trainer.validation_data_dir",
    "ray_kwargs.timeline_json_file",
    "global_profiler.save_path",
)


def make_output_paths_absolute(config: DictConfig, keys: Iterable[str] = RUN_OUTPUT_KEYS) -> None:
    """Replace each of ``keys`` that is set to a relative path (or one starting with ``~``) by the absolute path
    it names now."""
    global _launch_dir
    _launch_dir = Path.cwd()
    for key in keys:
        value = OmegaConf.select(config, key, default=None)
        if value in (None, ""):
            continue
        absolute = str(Path(str(value)).expanduser().absolute())
        if absolute != str(value):
            OmegaConf.update(config, key, absolute, merge=False)


def shown_path(path: str | Path) -> str:
    """``path`` for messages: relative to the folder the command started in when it lies under it (as the user
    wrote it, ``outputs/...``), else as it is."""
    start = _launch_dir or Path.cwd()
    try:
        return str(Path(path).relative_to(start))
    except ValueError:
        return str(path)
