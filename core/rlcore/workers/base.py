"""What the actor and critic workers share: the rank's process group and device, the backend's engines,
and worker checkpoints (manifest, per-rank extra state, the engine's sharded state)."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from rlcore.api.batch import Batch
from rlcore.api.training import (
    EngineRequest,
    EngineRole,
    ParallelLayout,
    TrainingBackend,
    TrainingEngine,
)
from rlcore.config.keys import select
from rlcore.config.schema import ModelConfig, Sections
from rlcore.config.sections.actor import OptimConfig
from rlcore.config.sections.update import ENGINE_CONTENTS
from rlcore.errors import RLCoreError
from rlcore.modelkit.distributed import init_process_group, resolve_device, rng_state, seed_everything, set_rng_state
from rlcore.plugins import run_profiler

#: the roles whose engines train, with an optimizer built from ``{section}.optim``
TRAINED_ROLES: tuple[EngineRole, ...] = ("actor", "critic")
#: the file (written by rank 0) that records a worker checkpoint's world size and contents
CHECKPOINT_MANIFEST = "checkpoint.json"

logger = logging.getLogger(__name__)


def extra_state_name(world_size: int, rank: int) -> str:
    """The file name of one rank's extra checkpoint state (LR schedule, generators, RNG states)."""
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def cpu_batch(batch: Batch) -> Batch:
    """A shallow copy of ``batch`` whose tensors are normal (not inference-mode) CPU tensors.

    A rollout's outputs are created under ``torch.inference_mode``; autograd refuses them, so they are
    cloned once here rather than by every engine.
    """
    tensors = {key: (t.clone() if t.is_inference() else t).cpu() for key, t in batch.tensors.items()}
    return Batch(tensors, dict(batch.non_tensors), dict(batch.meta))


class WorkerBase:
    """Process group, device and seeding for one rank; subclasses add their engines and methods.

    The constructor validates the config (:meth:`configure`) and then initialises ``torch.distributed``
    when nobody has (gloo on CPU, nccl on CUDA); :meth:`shutdown` closes the engines and destroys the
    group again if this worker created it. Engines are built by ``init_model``.
    """

    #: roles this worker class accepts
    ROLES: ClassVar[tuple[str, ...]] = ()
    #: the model sections this worker loads, whose ``use_shm`` it honours (:mod:`rlcore.modelkit.shm`)
    MODEL_SECTIONS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: DictConfig, role: str, rank: int = 0, world_size: int = 1) -> None:
        """Validate ``role`` and the config, then initialise the process group and seed.

        Nothing is initialised when the config is invalid, so a failed constructor leaves no process group
        behind.
        """
        if role not in self.ROLES:
            raise RLCoreError(f"{type(self).__name__} has no role {role!r}; expected one of {', '.join(self.ROLES)}")
        #: the shared-memory copies this worker loads from (``model.use_shm``), released by :meth:`shutdown`
        self.staged: list[str] = []
        try:
            self._init(self._stage_in_shm(config), role, rank, world_size)
        except BaseException:
            self._release_staged()
            raise

    def _stage_in_shm(self, config: DictConfig) -> DictConfig:
        """``config`` with the ``path`` and ``tokenizer_path`` of every :attr:`MODEL_SECTIONS` section that
        sets ``use_shm`` pointing at their copies in shared memory (made once per node); else ``config``."""
        from rlcore.modelkit import shm

        models = {section: ModelConfig.from_mapping(select(config, section, {})) for section in self.MODEL_SECTIONS}
        asked = {section: model for section, model in models.items() if model.use_shm is True}
        if not asked:
            return config
        config = copy.deepcopy(config)
        for section, model in asked.items():
            for name, source in (("path", model.path), ("tokenizer_path", model.tokenizer_path)):
                if source:
                    staged = shm.stage(str(source), f"{section}.use_shm")
                    self.staged.append(staged)
                    OmegaConf.update(config, f"{section}.{name}", staged)
        return config

    def _release_staged(self) -> None:
        """Release this worker's shared-memory copies (removed once no process of the node uses them)."""
        from rlcore.modelkit import shm

        for staged in self.staged:
            shm.release(staged)
        self.staged = []

    def _init(self, config: DictConfig, role: str, rank: int, world_size: int) -> None:
        """The constructor's work once the models are staged: sections, device, :meth:`configure`, the
        process group and the seed."""
        self.config = config
        #: the typed sections of ``config``, built once per worker (:class:`rlcore.config.schema.Sections`)
        self.sections = Sections.from_tree(config)
        self.role = role
        self.rank = rank
        self.world_size = world_size
        self.device = resolve_device(self.sections.trainer.device, rank)
        self._owns_process_group = False
        self.engines: list[TrainingEngine] = []
        #: this rank's side of the run's profiler (:mod:`rlcore.api.profiling`; a no-op when profiling is off)
        self.profiler = run_profiler(config).worker_profiler(rank, self.device, role)
        self.configure()
        timeout = float(self.sections.actor_rollout_ref.nccl_timeout)
        self._owns_process_group = init_process_group(rank, world_size, self.device, timeout)
        seed_everything(int(self.sections.trainer.seed))

    def configure(self) -> None:
        """Read and validate this worker's config sections; runs before any distributed set-up."""
        raise NotImplementedError

    def _backend(self, role: EngineRole, section: str) -> TrainingBackend:
        """The training backend of ``role``: ``{section}.strategy`` (the reference model's is the actor's
        backend, under any of its names: the dry run rejects another), resolved through this process's plugin
        registry."""
        from rlcore.plugins import get_component

        key = f"{section}.strategy"
        backend = get_component("training_backend", select(self.config, key))
        if not callable(getattr(backend, "create_engine", None)):
            raise RLCoreError(
                f"{key}={select(self.config, key)!r}: this training_backend has no create_engine(); backends "
                "supply training engines (see docs/writing-an-engine.md)"
            )
        return backend

    def _check_engine_config(self, role: EngineRole, section: str, model_section: str) -> None:
        """Let the backend of ``role`` reject settings it cannot run, before anything is initialised."""
        self._backend(role, section).check_config(self.config, role, section, model_section)

    def engine_request(
        self,
        role: EngineRole,
        section: str,
        model_section: str,
        *,
        config: DictConfig | None = None,
        share_with: TrainingEngine | None = None,
    ) -> EngineRequest:
        """What this rank asks the backend of ``role`` to build from ``config`` (default: the worker's): the
        typed model section at ``model_section`` and, for a trained role, the typed ``{section}.optim``."""
        config = self.config if config is None else config
        optim = OptimConfig.from_mapping(select(config, f"{section}.optim")) if role in TRAINED_ROLES else None
        return EngineRequest(
            role=role,
            config=config,
            section=section,
            model_section=model_section,
            device=self.device,
            rank=self.rank,
            world_size=self.world_size,
            model=ModelConfig.from_mapping(select(config, model_section)),
            optim=optim,
            share_with=share_with,
        )

    def _create_engine(
        self, role: EngineRole, section: str, model_section: str, share_with: TrainingEngine | None = None
    ) -> TrainingEngine:
        """Build the engine for ``role`` with its backend (see :meth:`_backend`)."""
        request = self.engine_request(role, section, model_section, share_with=share_with)
        engine = self._backend(role, section).create_engine(request)
        self.engines.append(engine)
        return engine

    def parallel_layout(self) -> ParallelLayout:
        """How the worker group cuts batches for this rank: its first engine's layout (every rank its own
        data-parallel rank before ``init_model``)."""
        return self.engines[0].layout if self.engines else ParallelLayout(self.rank, self.world_size)

    def start_profile(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        """Begin profiling ``step`` on this rank when ``plan`` chooses it (the payload of the run's profiler plugin)."""
        self.profiler.start(step, kind, plan)

    def stop_profile(self) -> list[str]:
        """End the step's profile and write its files; the paths written on this rank."""
        return self.profiler.stop()

    def finish_profile(self) -> bool | None:
        """After the run's last profiled step, once every rank has written its files: run
        ``global_profiler.finish_hook_cmd`` when it selects this rank; whether it succeeded (None: not run)."""
        return self.profiler.finish()

    def shutdown(self) -> None:
        """Close the engines, then destroy the process group if this worker created it (idempotent)."""
        for engine in reversed(self.engines):
            engine.close()
        self.engines = []
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_process_group = False
        self._release_staged()

    def _barrier(self) -> None:
        """Wait for every rank (a no-op for one rank)."""
        if self.world_size > 1:
            dist.barrier()

    def _save_state(
        self, directory: Path, engine: TrainingEngine, extra: Mapping[str, Any], contents: Iterable[str]
    ) -> None:
        """Write ``engine``'s sharded state plus this rank's extra state into ``directory``. Collective.

        Layout: what the engine writes for ``model`` and ``optimizer`` (an optimizer without state yet is
        not saved, because materialising its state would change the training that follows);
        ``extra_state_world_size_<W>_rank_<r>.pt`` with ``extra``, the engine's own state and the RNG
        states; and ``checkpoint.json`` (rank 0) with the world size and what was saved.
        """
        contents = set(contents)
        directory.mkdir(parents=True, exist_ok=True)
        has_optimizer_state = engine.has_optimizer_state()
        parts = contents & set(ENGINE_CONTENTS)
        if not has_optimizer_state:
            parts.discard("optimizer")
        if parts:
            engine.save(directory, parts)
        if "extra" in contents:
            state = {**extra, "engine": engine.state_dict(), "rng": rng_state()}
            torch.save(state, directory / extra_state_name(self.world_size, self.rank))
        if self.rank == 0:
            manifest = {
                "world_size": self.world_size,
                "contents": sorted(contents & {*ENGINE_CONTENTS, "extra"}),
                "optimizer_state": has_optimizer_state,
            }
            (directory / CHECKPOINT_MANIFEST).write_text(json.dumps(manifest, indent=2))
        self._barrier()

    def _load_state(
        self, directory: Path, engine: TrainingEngine, contents: Iterable[str], key: str
    ) -> dict[str, Any] | None:
        """Load what :meth:`_save_state` wrote into ``engine``; restore this rank's RNG states and the
        engine's own state, and return the rest of the extra state (None when ``extra`` is not loaded).

        ``key`` is the config key of ``contents`` (``<section>.checkpoint.load_contents``), named when the
        checkpoint lacks a part it asks for. A checkpoint from another world size loads (engines reshard);
        its per-rank RNG and generator states then cannot match one to one, which is logged.
        """
        contents = set(contents)
        if not directory.is_dir():
            raise RLCoreError(f"no checkpoint at {directory}: the directory does not exist")
        manifest_file = directory / CHECKPOINT_MANIFEST
        if not manifest_file.is_file():
            raise RLCoreError(f"{directory} is not a complete checkpoint: it has no {CHECKPOINT_MANIFEST}")
        manifest = json.loads(manifest_file.read_text())
        missing = sorted(contents & {*ENGINE_CONTENTS, "extra"} - set(manifest["contents"]))
        if missing:
            raise RLCoreError(
                f"checkpoint {directory} has no {', '.join(missing)} but {key} asks for it "
                f"(saved: {', '.join(manifest['contents']) or 'nothing'})"
            )
        parts = contents & set(ENGINE_CONTENTS)
        if "optimizer" in parts and not manifest["optimizer_state"]:
            parts.discard("optimizer")
            engine.reset_optimizer_state()
        if parts:
            engine.load(directory, parts)
        if "extra" not in contents:
            return None
        saved_world_size = int(manifest["world_size"])
        if saved_world_size != self.world_size and self.rank == 0:
            logger.warning(
                "checkpoint %s was saved by %d ranks and is loaded by %d: model and optimizer are resharded, "
                "but the per-rank RNG and generator states come from rank r mod %d, so sampling will not "
                "repeat the interrupted run exactly",
                directory,
                saved_world_size,
                self.world_size,
                saved_world_size,
            )
        file = directory / extra_state_name(saved_world_size, self.rank % saved_world_size)
        if not file.is_file():
            raise RLCoreError(f"checkpoint {directory} has no {file.name} ({key} asks for the extra state)")
        extra = torch.load(file, map_location="cpu", weights_only=True)
        set_rng_state(extra.pop("rng"))
        engine.load_state_dict(extra.pop("engine"))
        return extra
