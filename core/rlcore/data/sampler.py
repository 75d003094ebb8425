"""Custom training samplers (verl's ``data.sampler.{class_path, class_name}``), curriculum samplers included.

A sampler class is constructed as ``cls(data_source=dataset, data_config=config.data)`` and must be a
:class:`torch.utils.data.Sampler` over the dataset's row numbers, the contract of verl's ``create_rl_sampler``.
Subclass :class:`AbstractSampler` or, to be told about every training step, :class:`AbstractCurriculumSampler`:
the trainer calls its ``update(batch)`` after each step with the step's batch (rewards, advantages, the
``index`` of each row), and the loader draws the next batch's rows from the sampler's iterator only then, so
the curriculum takes effect from the next batch on.

``class_path`` is ``pkg://dotted.module`` (or ``pkg://dotted/module``), ``file://path.py`` or a plain path to
a ``.py`` file, as in verl. Exact resume: the checkpoint keeps the sampler's ``state_dict()`` when it has one
(restored with ``load_state_dict``), and the loader's epoch and position; a sampler without a state replays
the epoch's iterator and skips the rows already handed out.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from collections.abc import Sized
from typing import TYPE_CHECKING, Any

from torch.utils.data import Sampler

from rlcore.data import DataError
from rlcore.data.custom import load_from_file

if TYPE_CHECKING:
    from rlcore.config.sections.data import SamplerConfig

__all__ = [
    "SAMPLER_KEY",
    "AbstractCurriculumSampler",
    "AbstractSampler",
    "build_sampler",
    "describe_sampler",
    "load_sampler_class",
    "update_curriculum",
]

SAMPLER_KEY = "data.sampler"
PKG_PREFIX = "pkg://"
FILE_PREFIX = "file://"


class AbstractSampler(Sampler[int]):
    """A custom sampler: built with the dataset and the ``data`` config section, iterates row numbers."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any) -> None:
        """Keep what the sampler needs from ``data_source`` (the training dataset) and ``data_config``."""


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler that learns from training: ``update(batch)`` is called after every training step."""

    @abstractmethod
    def update(self, batch: Any) -> None:
        """Take the finished step's :class:`rlcore.api.batch.Batch` into account for the rows drawn next."""


def load_sampler_class(section: SamplerConfig) -> type | None:
    """The class the ``data.sampler`` section's ``class_path``/``class_name`` name (None when no class_path is
    set); errors name the keys: a module that cannot be imported, a missing class, a class that is not a torch
    Sampler."""
    path, name = section.class_path or None, section.class_name or None
    if path is None:
        return None
    where = f"{SAMPLER_KEY}.class_path={path!r}"
    if name is None:
        raise DataError(f"{where} is set but {SAMPLER_KEY}.class_name is not")
    if path.startswith(PKG_PREFIX):
        module_name = path[len(PKG_PREFIX) :].replace("/", ".")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # ImportError or anything the module raises while importing
            raise DataError(f"{where}: importing module {module_name!r} raised {type(exc).__name__}: {exc}") from exc
        if not hasattr(module, name):
            raise DataError(f"{where}: module {module_name!r} defines no {name!r} ({SAMPLER_KEY}.class_name)")
        cls = getattr(module, name)
    else:
        file = path[len(FILE_PREFIX) :] if path.startswith(FILE_PREFIX) else path
        cls = load_from_file(
            file, name, what=SAMPLER_KEY, error_cls=DataError, path_key="class_path", name_key="class_name"
        )
    if not isinstance(cls, type) or not issubclass(cls, Sampler):
        raise DataError(
            f"{SAMPLER_KEY}.class_name={name!r} in {path!r} is not a torch.utils.data.Sampler subclass; derive it "
            "from rlcore.data.sampler.AbstractSampler (or AbstractCurriculumSampler)"
        )
    return cls


def build_sampler(section: SamplerConfig, data_config: Any, dataset: Sized) -> Sampler[int] | None:
    """The custom sampler of the run over ``dataset`` (None without ``data.sampler.class_path``; ``section`` is
    the ``data.sampler`` section), built as ``cls(data_source=dataset, data_config=data_config)`` with the run
    config's ``data`` node; a constructor error or a sampler without ``len()`` names the class."""
    cls = load_sampler_class(section)
    if cls is None:
        return None
    try:
        sampler = cls(data_source=dataset, data_config=data_config)
    except Exception as exc:
        raise DataError(
            f"{SAMPLER_KEY}.class_name={cls.__name__}: cls(data_source=dataset, data_config=data) raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        len(sampler)  # type: ignore[arg-type]  # probing whether the user's sampler has a len()
    except TypeError as exc:
        raise DataError(
            f"{SAMPLER_KEY}.class_name={cls.__name__}: the sampler has no len() (the rows of one epoch), which "
            "the loader needs to count the epoch's batches"
        ) from exc
    return sampler


def update_curriculum(sampler: Any, batch: Any) -> None:
    """After a training step: a curriculum sampler's ``update(batch)`` with the step's batch (others: nothing)."""
    if isinstance(sampler, AbstractCurriculumSampler):
        sampler.update(batch)


def describe_sampler(section: SamplerConfig) -> str | None:
    """The run plan's line for the ``data.sampler`` section (None when unset): the class is imported and
    checked, and the line says whether it is a curriculum sampler."""
    cls = load_sampler_class(section)
    if cls is None:
        return None
    kind = (
        "curriculum sampler: update(batch) after every step"
        if issubclass(cls, AbstractCurriculumSampler)
        else "sampler"
    )
    return f"data.sampler: {cls.__module__}.{cls.__qualname__} ({kind})"
