"""The rlcore hook specifications: the complete plugin interface.

A plugin is a module (usually ``<package>.hooks``) with functions decorated by :data:`rlcore.hookimpl`
whose names are the hooks below. The docstrings here are the reference documentation; ``docs/plugins.md``
repeats each signature with an example, and a test keeps the two in step.

Every component hook receives ``register``, a callback with the signature::

    register(name, target, *, description="", aliases=(), replace=False, spec=None)

``target`` is the component itself (a class or callable) or a lazy ``"package.module:attr"`` string that
is imported the first time a run uses the component, so a hooks module never needs to import torch; it
implements its kind's protocol (:mod:`rlcore.api.components`, :mod:`rlcore.api.training`,
:mod:`rlcore.api.rollout`). ``replace=True`` deliberately overrides a component of the same kind and name
registered by another plugin; without it a duplicate is a conflict that names both plugins. ``spec`` declares
the component's capabilities for the four kinds that have them, as that kind's frozen dataclass from
:mod:`rlcore.api.specs` (for example ``spec=AdvantageEstimatorSpec(needs_critic=True)``); without it the
kind's default spec applies (every capability off). A spec of another kind's class, a spec for a kind
without capabilities, or a capability passed as a keyword (``needs_critic=True``) is a registration error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    import click
    from omegaconf import DictConfig

    from rlcore.api.multi_turn import MultiTurn
    from rlcore.api.profiling import Profiler
    from rlcore.registry import Registry
    from rlcore.run_context import RunContext

PROJECT = "rlcore"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[..., None]


@hookspec
def register_training_backends(register: Register) -> None:
    """Register training backends (kind ``training_backend``), selected by ``actor_rollout_ref.actor.strategy``
    (actor and reference) and ``critic.strategy``.

    A backend target implements :class:`rlcore.api.training.TrainingBackend`: ``check_config(config, role,
    section, model_section)`` rejects settings it cannot run before anything starts, and
    ``create_engine(request)`` builds one :class:`rlcore.api.training.TrainingEngine` per model (actor,
    reference, critic) on each rank. rlcore's generic workers (:mod:`rlcore.workers`) do everything else —
    roles, the rollout engine and its weight-sync check, the PPO mini/micro-batch loop, checkpoints — so a
    backend never sees the algorithm: it runs forward passes and back-propagates the losses it is given.
    ``docs/writing-an-engine.md`` walks through one; ``rlcore_testkit.contracts.backend`` checks it.

    Optional capabilities, as ``spec=TrainingBackendSpec(...)`` (:mod:`rlcore.api.specs`):
    ``data_parallel_size``, a function ``(config, section, world_size) -> int`` (defined in the plugin's light
    hooks module) for backends with model parallelism, so that the dry run and the workers split batches over
    data-parallel ranks only; ``sum_pi_squared=True`` when the engine's ``forward`` fills
    ``ModelOutput.sum_pi_squared`` (``with_sum_pi_squared``), without which
    ``actor_rollout_ref.actor.calculate_sum_pi_squared=true`` is refused before the run starts.

    Example::

        @rlcore.hookimpl
        def register_training_backends(register):
            register("fsdp", "rlcore_plugin_fsdp.backend:FSDPBackend",
                     description="PyTorch FSDP2", aliases=("fsdp2",),
                     spec=TrainingBackendSpec(sum_pi_squared=True))
    """


@hookspec
def register_rollout_engines(register: Register) -> None:
    """Register rollout (generation) engines (kind ``rollout_engine``), selected by ``actor_rollout_ref.rollout.name``.

    A target is a class implementing :class:`rlcore.api.rollout.RolloutEngine`:
    ``(model_path, tokenizer, config, *, device, dtype)``, ``config`` an instance of its ``config_class``
    (:class:`rlcore.api.RolloutConfig`, or a subclass adding the plugin's own keys of the section), with
    ``generate(batch, validate=False) -> Batch`` (responses and masks, optionally rollout log-probs),
    ``update_weights(named_tensors)``, ``prompt_log_probs(token_ids)`` (teacher-forced log-probs of a
    probe, compared with the trainer's after every weight sync), ``sleep()``, ``wake()`` and a
    ``weight_version`` counter; optionally ``weight_checksum()`` (an exact check of the served weights),
    ``state_dict()``/``load_state_dict()`` and ``close()`` (stop the engine's own processes at shutdown).
    :class:`rlcore.rollout.token_engine.TokenListEngine` implements all but the engine-specific steps for
    engines that complete token-id prompts.

    Example::

        @rlcore.hookimpl
        def register_rollout_engines(register):
            register("vllm", "rlcore_plugin_vllm.engine:VLLMRolloutEngine", description="vLLM offline engine")
    """


@hookspec
def register_reward_managers(register: Register) -> None:
    """Register reward managers (kind ``reward_manager``), selected by ``reward_model.reward_manager``.

    A target is a class ``(tokenizer, scorer, config)`` whose ``__call__(batch)`` returns a
    :class:`rlcore.reward.RewardResult`: token-level scores ``[B, R]`` with each sample's scalar on its last
    valid response token, plus per-sample extra information and metrics. ``config`` is the typed
    ``reward_model`` section, :class:`rlcore.api.RewardModelConfig` extended with the plugins' sections there
    (:func:`rlcore.api.plugin_section`; a section of your ``config_defaults`` at ``reward_model.<name>`` is
    its field ``<name>``, e.g. DAPO's ``config.overlong_buffer``): read fields, never ``config.get(key, default)``.

    Example::

        @rlcore.hookimpl
        def register_reward_managers(register):
            register("dapo", "rlcore_plugin_dapo.reward:OverlongRewardManager")
    """


@hookspec
def register_reward_scorers(register: Register) -> None:
    """Register reward scorers (kind ``reward_scorer``), looked up by a sample's ``data_source``.

    A target is a callable ``(data_source, solution_str, ground_truth, extra_info=None) -> float | dict``;
    a dict must carry ``"score"``, its other keys are reported as extra information. Use ``aliases`` for
    the several ``data_source`` strings one scorer serves. Optional capabilities, as
    ``spec=RewardScorerSpec(...)``: ``ground_truth="text"`` (the reward manager passes the ground truth as
    text) and ``sandbox=True`` (the scorer executes model-written code and runs in the sandbox).

    Example::

        @rlcore.hookimpl
        def register_reward_scorers(register):
            register("openai/gsm8k", "my_pkg.scorers:gsm8k", aliases=("gsm8k",),
                     spec=RewardScorerSpec(ground_truth="text"))
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register prompt datasets (kind ``dataset``), selected by ``data.dataset``.

    A target is a class ``(files, tokenizer, config, split)`` with ``__len__`` and ``__getitem__``
    returning one row: left-padded ``input_ids``/``attention_mask``/``position_ids`` tensors of length
    ``data.max_prompt_length`` plus the row's python fields (``data_source``, ``reward_model``, ...).

    Example::

        @rlcore.hookimpl
        def register_datasets(register):
            register("my-jsonl", "my_pkg.data:MyDataset")
    """


@hookspec
def register_advantage_estimators(register: Register) -> None:
    """Register advantage estimators (kind ``advantage_estimator``), selected by ``algorithm.adv_estimator``.

    A target is a callable with keyword arguments ``token_level_rewards, response_mask, index, config``
    (``config``: the typed ``algorithm`` section, :class:`rlcore.api.AlgorithmConfig` that is also an instance
    of each plugin's ``config_defaults`` section at ``algorithm``, so ``config.gamma`` and your own
    ``config.my_key`` are both fields: :func:`rlcore.api.plugin_section`) and ``reward_extras`` (the reward function's per-sample extras by name, such as GDPO's reward components;
    accept ``**kwargs`` for what you do not read), plus ``values`` and ``reward_baselines`` when the estimator
    declares it needs them, returning ``(advantages, returns)``, both ``[B, R]``. Declare needs as ``spec=AdvantageEstimatorSpec(...)``
    (:mod:`rlcore.api.specs`) so the controller creates the roles they require and no others:
    ``needs_critic=True``, ``needs_greedy_baseline=True``, ``min_group_size=2`` (checked against
    ``actor_rollout_ref.rollout.n`` before anything loads),
    ``reward_model_worker="my_pkg.worker:MyRewardModelWorker"`` (a reward-model worker group of that class,
    whose ``compute_rm_score(batch)`` sees the rule scores as ``acc``; PRIME's implicit PRM),
    ``batch_keys=frozenset({"rm_scores", "acc"})`` (batch columns passed to the estimator as keyword
    arguments; with ``rm_scores`` among them the reward model's scores are not added to the rule scores; with
    ``sum_pi_squared`` among them the run needs ``actor_rollout_ref.actor.calculate_sum_pi_squared=true``) and
    ``optional_batch_keys=frozenset({"rollout_is_weights"})`` (passed only when the batch has them).

    Example::

        @rlcore.hookimpl
        def register_advantage_estimators(register):
            register("gae", "rlcore_plugin_ppo.gae:compute_gae", spec=AdvantageEstimatorSpec(needs_critic=True))
    """


@hookspec
def register_policy_losses(register: Register) -> None:
    """Register policy losses (kind ``policy_loss``), selected by ``actor_rollout_ref.actor.policy_loss.loss_mode``.

    A target is a callable ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
    rollout_is_weights=None) -> (loss, metrics)`` where ``config`` is the typed actor section
    (:class:`rlcore.api.ActorConfig` that is also an instance of each plugin's ``config_defaults`` section at
    ``actor_rollout_ref.actor``: ``config.clip_ratio``, ``config.loss_scale_factor``, SAPO's ``config.tau_pos``;
    None when a test calls it without one: use the section's defaults) and ``metrics`` a dict of floats such as
    ``actor/pg_clipfrac``.

    Example::

        @rlcore.hookimpl
        def register_policy_losses(register):
            register("gspo", "rlcore_plugin_gspo.loss:gspo_loss")
    """


@hookspec
def register_batch_filters(register: Register) -> None:
    """Register batch filters (kind ``batch_filter``), applied after reward in the order of ``algorithm.batch_filters``.

    A target is a callable ``(batch, config) -> (kept_batch, metrics)``. When a filter leaves fewer
    prompts than ``data.train_batch_size`` the controller may generate more (DAPO dynamic sampling).

    Example::

        @rlcore.hookimpl
        def register_batch_filters(register):
            register("nonzero-std", "rlcore_plugin_dapo.filters:keep_varied_groups")
    """


@hookspec
def register_trackers(register: Register) -> None:
    """Register experiment trackers (kind ``tracker``), selected by the list ``trainer.logger``.

    A target is a class ``(project, experiment, config, run_dir)`` with ``log(metrics, step)`` and
    ``finish()``. A tracker failure is logged once and never stops training.

    Example::

        @rlcore.hookimpl
        def register_trackers(register):
            register("swanlab", "rlcore_plugin_swanlab.tracker:SwanlabTracker")
    """


@hookspec
def register_presets(register: Register) -> None:
    """Register presets (kind ``preset``): named config fragments applied by ``rlcore run --preset NAME``.

    A target is a dict of dotted keys to values, or a callable returning one; it is applied after the
    defaults and before the user's files and overrides. Optional capabilities, as ``spec=PresetSpec(...)``:
    ``prepare="module:attr"`` (a callable ``(config)`` run before a real run, e.g. to build a bundled task's
    assets) and ``task="name"`` (the preset is a bundled task's; the stem of its run's name).

    Example::

        @rlcore.hookimpl
        def register_presets(register):
            register("dapo", {"actor_rollout_ref.actor.clip_ratio_high": 0.28},
                     description="clip-higher, token-mean, dynamic sampling")
    """


@hookspec
def register_tools(register: Register) -> None:
    """Register tools for multi-turn rollouts (kind ``tool``), named by ``class_name`` in the tool YAML at
    ``actor_rollout_ref.rollout.multi_turn.tool_config_path`` (verl's ``tools: [{class_name, config,
    tool_schema}]``; a ``class_name`` that is not a registered name is imported as a dotted path).

    A target is a subclass of :class:`rlcore.agents.Tool`, constructed as ``(config, tool_schema)``, with async
    ``create(instance_id, **create_kwargs)``, ``execute(instance_id, arguments) -> str | ToolResult`` (text,
    optional step reward and metrics) and ``release(instance_id)``; its OpenAI function schema comes from
    the YAML or the class's ``default_schema``. rlcore-plugin-agents' executor times each call out (the config's ``timeout``), cuts
    long responses and turns exceptions into error messages for the model. Register verl's class path as
    an alias so that verl's YAML files load unchanged. ``rlcore_testkit.contracts.agents.ToolContract``
    checks a tool.

    Example::

        @rlcore.hookimpl
        def register_tools(register):
            register("search", "my_pkg.tools:SearchTool", aliases=("verl.tools.search_tool.SearchTool",))
    """


@hookspec
def register_agent_loops(register: Register) -> None:
    """Register agent loops (kind ``agent_loop``), chosen per sample by its ``agent_name`` (a dataset column or
    ``extra_info.agent_name``), else by ``actor_rollout_ref.rollout.agent.default_agent_loop``.

    A target is a class ``(context)`` (an :class:`rlcore.agents.AgentContext`) whose coroutine
    ``run(sample) -> Trajectory`` turns one :class:`rlcore.agents.AgentSample` into a token-in, token-out
    :class:`rlcore.agents.Trajectory`: ``await context.generate(token_ids)`` samples one assistant turn (batched
    with other trajectories' turns), and every other token appended is rendered from the new messages only
    (``context.renderer``) with response mask 0. ``rlcore_testkit.contracts.agents.AgentLoopContract``
    checks a loop, including the mask audit.

    Example::

        @rlcore.hookimpl
        def register_agent_loops(register):
            register("reflect", "my_pkg.loops:ReflectLoop", description="answer, critique, answer again")
    """


@hookspec
def register_interactions(register: Register) -> None:
    """Register interactions (kind ``interaction``): user simulators or environments that answer the assistant
    between turns, named by ``class_name`` in the YAML at ``actor_rollout_ref.rollout.multi_turn.interaction_config_path``
    (verl's ``interaction: [{name, class_name, config}]``).

    A target is a subclass of :class:`rlcore.agents.Interaction`, constructed as ``(config)``, with async
    ``start(instance_id, **interaction_kwargs)``, ``respond(instance_id, messages) -> InteractionTurn`` (the
    reply, an optional reward, ``done`` to end the episode) and ``finish(instance_id)``.

    Example::

        @rlcore.hookimpl
        def register_interactions(register):
            register("judge", "my_pkg.users:JudgeUser")
    """


@hookspec
def register_tool_parsers(register: Register) -> None:
    """Register tool-call parsers (kind ``tool_parser``), selected by ``actor_rollout_ref.rollout.multi_turn.format``.

    A target is a class ``()`` whose ``parse(text) -> list[rlcore.agents.ToolCall]`` reads one assistant
    turn; a call it cannot read is returned with ``error`` set, so the model gets an error message back.

    Example::

        @rlcore.hookimpl
        def register_tool_parsers(register):
            register("llama3_json", "my_pkg.parsers:Llama3JsonParser")
    """


@hookspec
def register_weight_transports(register: Register) -> None:
    """Register weight transports (kind ``weight_transport``), selected by
    ``actor_rollout_ref.rollout.checkpoint_engine.backend`` (verl's checkpoint engine).

    A target is a class implementing :class:`rlcore.api.WeightTransport`: constructed once per run as
    ``(config)``, ``config`` the typed ``checkpoint_engine`` section (:class:`rlcore.api.CheckpointEngineConfig`;
    its arguments are ``config.engine_kwargs[<your name>]``), with a class attribute ``incremental`` (whether a
    send may leave unchanged tensors out), ``send(weights, receiver, bucket_bytes) -> TransportReport`` (move
    the trainer's ``(name, tensor)`` iterator into the :class:`rlcore.api.WeightReceiver` as one update, in
    :class:`rlcore.api.WeightBucket` s of at most ``bucket_bytes``: whole tensors, or, for a receiver whose
    ``partial`` is true, :class:`rlcore.api.SparseDelta` s of the elements changed since its last load; the
    receiver's ``dtype`` is the dtype the engine holds) and ``reset()`` (the next send is a full one). Built-ins: ``naive`` and ``delta`` (:mod:`rlcore.rollout.transport`). The check that the engine
    serves the trainer's weights follows every send; when it fails after a partial send, the worker calls
    ``reset()`` and sends again.

    Example::

        @rlcore.hookimpl
        def register_weight_transports(register):
            register("int8_delta", "my_pkg.transport:Int8DeltaTransport", description="quantised deltas")
    """


@hookspec
def register_retrievers(register: Register) -> None:
    """Register document retrievers (kind ``retriever``), selected by ``retriever`` in the ``search`` tool's config.

    A target is a class ``(config)`` (the tool's ``retriever_config`` mapping) whose
    ``retrieve(queries, topk) -> list[list[rlcore.api.RetrievedDocument]]`` returns, for each query in order,
    at most ``topk`` documents, best first. It may block: the ``search`` tool (rlcore-plugin-agents) calls it on
    a thread of its own under the tool's timeout, and an exception becomes an error message to the model.

    Example::

        @rlcore.hookimpl
        def register_retrievers(register):
            register("wiki_dense", "my_pkg.retrieval:DenseRetriever", description="e5 over a FAISS index")
    """


@hookspec
def register_health_monitors(register: Register) -> None:
    """Register run-health monitors (kind ``health_monitor``), each switched by ``trainer.monitors.<name>.enable``.

    A target is a class implementing :class:`rlcore.api.HealthMonitor`: a class attribute ``config_class``
    (a :class:`rlcore.api.MonitorSettings` subclass: ``enable``, ``action`` — ``warn``, ``checkpoint`` or
    ``stop`` — and the monitor's thresholds, each with its default and a ``#:`` docstring; its ``PATH`` is
    ``"trainer.monitors.<name>"`` and the plugin's ``config_defaults`` returns an instance), ``name``, and
    ``__init__(self, settings)`` taking that section. The controller builds the enabled monitors once per run
    and calls ``check(view) -> Sequence[Finding]`` after every step with a :class:`rlcore.api.HealthView`
    (the step's metrics as written to ``metrics.jsonl``, every step's so far, and decoded responses when the
    spec asks for them); a :class:`rlcore.api.Finding` names the signal, its values in one line and the step the
    condition began at. A monitor that raises is reported, naming it and its plugin, and disabled; the run
    goes on. ``rlcore health RUN_DIR`` replays a run through the same monitors, and
    ``rlcore_testkit.contracts.health.HealthMonitorContract`` checks one.

    Optional capabilities, as ``spec=HealthMonitorSpec(...)`` (:mod:`rlcore.api.specs`): ``reads`` (the
    metric keys or ``fnmatch`` patterns it reads) and ``samples=N`` (decoded responses of each step in
    ``view.samples``; none unless asked, so a monitor that reads metrics only costs nothing extra).

    Example::

        @dataclasses.dataclass(frozen=True)
        class EntropySettings(rlcore.api.MonitorSettings):
            PATH = "trainer.monitors.entropy_floor"
            #: a step whose actor/entropy is below this is a finding
            min_entropy: float = 0.05

        class EntropyFloor:
            config_class = EntropySettings
            name = "entropy_floor"

            def __init__(self, settings):
                self.settings, self.low_since = settings, None

            def check(self, view):
                entropy = view.metrics.get("actor/entropy")
                if entropy is None or entropy >= self.settings.min_entropy:
                    self.low_since = None
                    return []
                if self.low_since is not None:
                    return []  # reported when it began
                self.low_since = view.step
                return [rlcore.api.Finding(self.name, "warning", "actor/entropy",
                                           f"actor/entropy {entropy:.3g} < {self.settings.min_entropy}",
                                           began_at=view.step, step=view.step, values={"actor/entropy": entropy})]

        @rlcore.hookimpl
        def config_defaults():
            return EntropySettings()

        @rlcore.hookimpl
        def register_health_monitors(register):
            register("entropy_floor", "my_pkg.monitors:EntropyFloor",
                     spec=HealthMonitorSpec(reads=("actor/entropy",)))
    """


@hookspec
def config_defaults() -> Any:
    """Return the default values of the config keys this plugin owns: a nested dict, or a typed section.

    A typed section is a frozen dataclass subclassing :class:`rlcore.api.Section` (every field with its
    default, its type and a ``#:`` docstring; ``rlcore.api.config_ref("other.key")`` makes a default that is
    another key's value): return an instance to mount it at its class's ``PATH``, a list of them, or place
    instances as values of the nested dict to mount one section at several keys. Components read it back
    typed with ``Section.from_tree(config, path)`` (every problem naming its key).

    The defaults are merged into rlcore's before any file or override is applied, so the keys become
    known (an override of a key nobody declares is an error) and are printed by ``rlcore config show``.
    Two plugins declaring the same key with different defaults is an error naming both.

    Example::

        @dataclasses.dataclass(frozen=True)
        class GRPOKeys(rlcore.api.Section):
            PATH = "algorithm"
            #: false: Dr. GRPO's unscaled advantages
            norm_adv_by_std_in_grpo: bool = True

        @rlcore.hookimpl
        def config_defaults():
            return GRPOKeys()  # or the dict {"algorithm": {"norm_adv_by_std_in_grpo": True}}
    """
    raise NotImplementedError  # a hookspec: pluggy calls the plugins' implementations, never this body


@hookspec
def on_config_resolved(config: DictConfig) -> None:
    """Called once by ``rlcore run`` (and ``rlcore config show``) after the config is resolved, before it is
    validated and saved.

    Implementations may modify ``config`` in place, for example to translate a verl-style switch into the
    core's mechanism (``algorithm.filter_groups.enable=true`` → add a filter to ``algorithm.batch_filters``).
    Only touch keys your plugin owns or documents.

    Example::

        @rlcore.hookimpl
        def on_config_resolved(config):
            if config.algorithm.filter_groups.enable:
                config.algorithm.batch_filters = [*config.algorithm.batch_filters, "dapo-groups"]
    """


@hookspec
def step_extensions(config: DictConfig) -> list[Any] | None:
    """Return the :class:`rlcore.api.extensions.StepExtension` objects this plugin adds to a run of ``config``
    (a worker group of its own, a stage of the step that adds batch keys, a term of the actor loss), or None
    when the config does not switch the plugin's feature on.

    Called once by ``rlcore run`` before anything starts (the dry run too: an :class:`RLCoreError` it raises is
    reported with the config's other problems) and by each actor worker for its loss, so it must depend on
    ``config`` only. :mod:`rlcore.api.extensions` says when each part runs.

    Example::

        @rlcore.hookimpl
        def step_extensions(config):
            if not config.distillation.enabled:
                return None
            return [StepExtension("teacher", worker="my_pkg.worker:TeacherWorker",
                                  method="compute_teacher_log_prob", loss_term="my_pkg.loss:make_term")]
    """


@hookspec
def profiler(config: DictConfig) -> Profiler | None:
    """Return the run's :class:`rlcore.api.profiling.Profiler` when ``config`` enables this plugin's profiling
    (``global_profiler.tool``), or None. At most one plugin may answer (two answers are an error naming the
    plugins); when the tool is set and no plugin answers, the run stops before it starts with an error naming
    ``rlcore-plugin-profiler``.

    Called once by ``rlcore run`` before anything starts (the dry run too), by the controller and by each
    worker (each makes the answer its process's :func:`rlcore.api.profiling.current_profiler`), so it must
    depend on ``config`` only and be cheap; check the settings in ``plan_lines``.

    Example::

        @rlcore.hookimpl
        def profiler(config):
            if config.global_profiler.tool != "my-tool":
                return None
            from my_pkg.profiler import MyProfiler

            return MyProfiler(config)
    """


@hookspec
def multi_turn(config: DictConfig, registry: Registry) -> MultiTurn | None:
    """Return the run's :class:`rlcore.api.multi_turn.MultiTurn` (multi-turn rollouts through agent loops), or
    None when this plugin does not roll out ``config``. At most one plugin may answer (two answers are an error
    naming the plugins); when none answers, a config that turns multi-turn on (``rollout.multi_turn.enable``, or
    an ``agent.default_agent_loop`` other than ``single_turn``) stops before the run starts with an error
    naming ``rlcore-plugin-agents``, and so does a rollout batch whose samples name an agent loop.

    Called once by ``rlcore run`` before anything starts (the dry run too: it calls the answer's ``check()``)
    and once by the trainer (which keeps the answer's ``runner(tokenizer)``), so it must be cheap; ``registry``
    is the run's, where the agent loops, tools, interactions and tool-call parser are resolved.

    Example::

        @rlcore.hookimpl
        def multi_turn(config, registry):
            from my_pkg.rollouts import MyMultiTurn

            return MyMultiTurn(config, registry)
    """


@hookspec
def plan_lines(config: DictConfig, dry_run: bool) -> list[str] | None:
    """Return the lines ``rlcore run`` (dry run or not) prints about this plugin's part of the resolved
    ``config`` before anything starts (for example the rollout engine's chunks), or None when the config does
    not use the plugin. ``dry_run`` is true for ``rlcore run --dry-run`` of a config that passed every other
    check: lines only a dry run prints (such as the memory plan of ``rlcore-plugin-plan``, which loads the
    model's config) are returned then only, never for a config that is refused anyway. Raise :class:`rlcore.errors.RLCoreError`
    for a setting the plugin cannot run: the run stops before it starts and the message is printed as one of
    its problems.

    Example::

        @rlcore.hookimpl
        def plan_lines(config):
            if config.actor_rollout_ref.rollout.name != "my-engine":
                return None
            return [f"my-engine: {config.actor_rollout_ref.rollout.n} samples per prompt"]
    """


@hookspec
def summary_lines(run_dir: Path, status: str) -> list[str] | None:
    """Return the lines ``rlcore run`` and ``rlcore sft`` print at the end of a run's summary, after the
    ``metrics:`` line, about what this plugin made of the run directory ``run_dir`` (for example the report
    that ``rlcore-plugin-report`` writes there), or None. Called once ``summary.json`` (with the run's
    ``status``) is written, however the run ended, when at least one step was logged. Catch what you can
    foresee (a full disk): an exception fails a completed run after its summary is written.

    Example::

        @rlcore.hookimpl
        def summary_lines(run_dir):
            return [f"steps: {len((run_dir / 'metrics.jsonl').read_text().splitlines())} rows"]
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add sub-commands to the ``rlcore`` command line.

    ``cli`` is the top-level click group; decorate new commands with ``@cli.command()``. Keep imports of
    heavy libraries inside the command function so that ``rlcore --help`` stays fast.

    Example::

        @rlcore.hookimpl
        def register_commands(cli):
            @cli.command()
            def hello():
                "Say hello."
                click.echo("hello")
    """


@hookspec
def on_run_start(run: RunContext) -> None:
    """Called once in the controller after the workers are built and before the first step.

    ``run`` is the :class:`rlcore.run_context.RunContext` (resolved ``config``, ``run_dir``, ``plugins``).

    Example::

        @rlcore.hookimpl
        def on_run_start(run):
            print("starting", run.run_dir)
    """


@hookspec
def on_step_end(run: RunContext, step: int, metrics: dict[str, Any]) -> None:
    """Called in the controller after each training step with that step's metrics (verl's metric names).

    Implementations may add keys to ``metrics``; they are logged after every plugin has run.

    Example::

        @rlcore.hookimpl
        def on_step_end(run, step, metrics):
            metrics["my/score_x2"] = 2 * metrics["critic/score/mean"]
    """


@hookspec
def on_validation_end(run: RunContext, step: int, metrics: dict[str, Any]) -> None:
    """Called in the controller after each validation pass with its ``val-core/...`` and ``val-aux/...`` metrics.

    Example::

        @rlcore.hookimpl
        def on_validation_end(run, step, metrics):
            if metrics.get("val-core/gsm8k/reward/mean@1", 0) > 0.9:
                print("good enough")
    """


@hookspec
def on_checkpoint_saved(run: RunContext, step: int, path: str) -> None:
    """Called in the controller after a checkpoint for ``step`` is complete at ``path``.

    Example::

        @rlcore.hookimpl
        def on_checkpoint_saved(run, step, path):
            upload(path)
    """


@hookspec
def on_run_end(run: RunContext, status: str) -> None:
    """Called once when the run ends; ``status`` is ``"completed"``, ``"failed"`` or ``"interrupted"``.

    Example::

        @rlcore.hookimpl
        def on_run_end(run, status):
            print("run", status)
    """
