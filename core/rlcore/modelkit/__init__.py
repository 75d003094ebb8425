"""The model kit the training engines share: Hugging Face ``transformers`` models as rlcore trains them.

Every backend (FSDP, DeepSpeed, Megatron's HF export) and the rollout engines need the same pieces around a
``transformers`` model, and they live here once: loading a policy or value model and computing log-probs,
entropy and values of response tokens (:mod:`~rlcore.modelkit.hf_models`), sequence packing
(:mod:`~rlcore.modelkit.packing`) and its attention without an ``nnz × nnz`` mask
(:mod:`~rlcore.modelkit.packed_attention`), the shared-prompt forward (:mod:`~rlcore.modelkit.prefix_grouper`), Ulysses sequence parallelism (:mod:`~rlcore.modelkit.sequence_parallel`),
the kernel switches and fused log-probs (:mod:`~rlcore.modelkit.kernels`,
:mod:`~rlcore.modelkit.fused_logprobs`), vision-language models (:mod:`~rlcore.modelkit.vlm`), the optimizer
and learning-rate schedule (:mod:`~rlcore.modelkit.optim`), activation offload
(:mod:`~rlcore.modelkit.activation_offload`), and the device, process group, seeding and RNG state of a rank
(:mod:`~rlcore.modelkit.distributed`).

Nothing here knows about roles, workers or the algorithm: :mod:`rlcore.workers` uses the kit, and so do the
backend plugins (these modules are part of the public API, :data:`rlcore.public_api.PUBLIC_MODULES`).
"""
