"""The modules a plugin may import: rlcore's declared public API.

Everything a plugin needs from the core is in one of these modules; everything else (the registry, the
controller, the generic workers, the built-in implementations) may change in any release.
``tests/test_boundaries.py`` checks that every bundled plugin and the plugin template import nothing else
from rlcore, and ``docs/publishing.md`` explains the compatibility promise.
"""

from __future__ import annotations

#: public modules; an entry ending in ``.*`` makes every submodule of that package public too
PUBLIC_MODULES: tuple[str, ...] = (
    "rlcore",  # hookimpl, hookspec, get_component, load_plugins, __version__
    "rlcore.errors",  # RLCoreError
    "rlcore.api.batch",  # Batch
    "rlcore.api.specs",  # the capability specs a component is registered with (spec=...)
    "rlcore.api.components",  # the protocol of every component kind
    "rlcore.algos",  # the algorithm math: losses, advantages' building blocks, KL, metrics
    "rlcore.config",  # load_config, ConfigError
    "rlcore.config.router_replay",  # replay_mode, REPLAY_MODES: verl's router_replay keys, for engines
    "rlcore.config.keys",  # select, positive_int
    "rlcore.dtypes",  # parse_dtype
    "rlcore.reward",  # RewardResult, RewardError, NaiveRewardManager
    "rlcore.sandbox",  # run_python: model-written code under limits, for tools and code rewards
    "rlcore.agents",  # Tool, Interaction, AgentLoop, Trajectory, ToolCall, audit_batch: multi-turn components
    "rlcore.api.rollout",  # the RolloutEngine protocol
    "rlcore.rollout.sampling",  # SamplingParams, ROLLOUT_KEY
    "rlcore.rollout.token_engine",  # TokenListEngine, Completion: a base for token-id rollout engines
    "rlcore.rollout.buckets",  # weight_buckets: a weight sync in buckets of bounded size
    "rlcore.api.training",  # the TrainingEngine / TrainingBackend contract
    "rlcore.modelkit.optim",  # AdamW and verl's learning-rate schedule, for engines
    "rlcore.modelkit.distributed",  # device, process group, seeding and RNG state, for engines
    "rlcore.api.extensions",  # StepExtension: a plugin's worker group, step stage and actor loss term
    "rlcore.workers.base",  # WorkerBase: the rank set-up and engines of an algorithm's own worker (PRIME's PRM)
    "rlcore.config.batch_sizes",  # UpdateBatchSizes and the batch arithmetic, for such workers
    "rlcore.config.schema",  # the typed config sections (Sections.from_tree) the batch arithmetic takes
    "rlcore.workers.micro_batches",  # plan_micro_batches, for such workers
    "rlcore.workers.ppo_loop",  # ppo_update: the mini/micro-batch update loop, for such workers
    "rlcore.modelkit.hf_models",  # loading, value model, log-probs and values of transformers models
    "rlcore.modelkit.packing",  # sequence packing (use_remove_padding)
    "rlcore.modelkit.prefix_grouper",  # the shared-prompt forward (actor.use_prefix_grouper): grouper_key
    "rlcore.modelkit.sequence_parallel",  # Ulysses sequence parallelism
    "rlcore.modelkit.kernels",  # the use_liger / use_torch_compile switches
    "rlcore.modelkit.vlm",  # vision-language models: loader class, images and mrope positions, vision tower
    "rlcore.modelkit.moe",  # mixture-of-experts routers: load-balancing loss, expert load, routing record/replay
    "rlcore.modelkit.token_ids",  # log-probs at given token ids and the top-k (GATHER_IDS, forward(top_k=...))
    "rlcore.profiling.rollout",  # rollout engines that trace their own generation (traces_itself)
    "rlcore.profiling.torch_options",  # the roles' profiler.tool_config.torch sections, read and checked
    "rlcore.processors",  # load_processor: a model's multimodal processor (also without torchvision)
    "rlcore.modelkit.activation_offload",  # enable_activation_offload: saved activations in host memory
    "rlcore.tracking.external",  # ExternalTracker and the tracker helpers
    # what rlcore-plugin-tasks (the bundled tasks) and rlcore-plugin-sft (`rlcore sft`) use from the core
    "rlcore.reward.ground_truth",  # ground_truth_as_text: a scorer's ground truth as text
    "rlcore.agents.render",  # ChatRenderer: a conversation rendered token for token as the agent loop does
    "rlcore.agents.audit",  # mask_spans: the assistant spans of a rendered conversation (SFT loss mask)
    "rlcore.algos.functional",  # agg_loss: the loss aggregation modes (SFT loss)
    "rlcore.algos.metrics",  # compute_throughput_metrics (SFT loop)
    "rlcore.api.groups",  # WorkerGroup: the protocol of a group of workers (SFT loop)
    "rlcore.checkpoint",  # checkpoint folders, run identity, save/resume (SFT loop)
    "rlcore.checkpoint.fingerprint",  # run fingerprints and the resume_allow_changes check
    "rlcore.checkpoint.lock",  # lock_checkpoint_folder: one run per checkpoint folder
    "rlcore.config.compose",  # Source, config_file: config sources merged in order
    "rlcore.config.loader",  # flatten/nest, overrides, known keys, preset_fragment
    "rlcore.config.output_paths",  # output paths made absolute and shown
    "rlcore.config.problems",  # ConfigError, Problems: every config problem reported at once
    "rlcore.config.ranges",  # OPTIM_RANGES, range_problems: the optimizer keys' checks
    "rlcore.controller.resume",  # unfinished_checkpoint
    "rlcore.controller.worker_group",  # make_worker_group: start a plugin's worker group
    "rlcore.controller.worker_spec",  # WorkerSpec: a worker class by "module:attr"
    "rlcore.data",  # DataError
    "rlcore.data.collate",  # collate_rows
    "rlcore.data.files",  # normalize_files: data.train_files / val_files as paths
    "rlcore.data.loader",  # PromptLoader: the epoch/shuffle/resume-aware loader
    "rlcore.data.rl_dataset",  # row reading and the tokenizer checks shared by the datasets
    "rlcore.graceful_stop",  # StopRequest: SIGINT/SIGTERM as a clean stop at the next step
    "rlcore.model_check",  # check_model_paths: model folders checked before workers start
    "rlcore.plugins",  # PluginManager (type) and load_plugins
    "rlcore.process_env",  # CPU threads and third-party log noise, as rlcore run sets them
    "rlcore.run",  # the run directory, the plugins line, prepare_presets: shared by rlcore run and rlcore sft
    "rlcore.run_guard",  # fit_to_the_end: a run's end (status, summary) whatever happens
    "rlcore.tracking.progress",  # ProgressBar
    "rlcore.tracking.report",  # write_report: a run's HTML report
    "rlcore.tracking.sinks",  # build_trackers, read_metrics: metrics.jsonl and the trackers
    "rlcore.tracking.values",  # reduce_metrics
    "rlcore.workers.actor",  # ActorRolloutRefWorker: the SFT worker extends it
    "rlcore.testing.*",  # fixtures, tiny models and the contract suites
)


def is_public(module: str) -> bool:
    """Whether a plugin may import ``module`` (see :data:`PUBLIC_MODULES`)."""
    for entry in PUBLIC_MODULES:
        if entry.endswith(".*"):
            package = entry[:-2]
            if module == package or module.startswith(package + "."):
                return True
        elif module == entry:
            return True
    return False
