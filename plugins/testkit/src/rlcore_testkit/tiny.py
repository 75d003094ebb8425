"""Build tiny causal LMs (dense Qwen2; mixture-of-experts Qwen3-MoE and Qwen2-MoE) and a locally trained
byte-level BPE tokenizer.

Nothing is downloaded. The tokenizer is trained with Qwen2's normaliser and pre-tokenizer (transformers
rebuilds a ``Qwen2Tokenizer`` from vocab + merges when ``config.json`` says ``model_type=qwen2``, so any
other split would change the ids after a save/load round trip). ``head_dim`` is 32 because vLLM's CPU
attention rejects smaller heads.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
_WORDS = (
    "the a an of to and in is was for on that with as it by at from this be are have question answer "
    "number total apples oranges each more less how many sum what john mary bought sold gave has had left "
    "cost dollars step first then so therefore think output final after"
).split()


def default_corpus(n: int = 400, seed: int = 0) -> list[str]:
    """A small synthetic English + arithmetic corpus for training the tokenizer."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 15)))
        lines.append(f"{words}. {a} + {b} = {a + b}. #### {a + b}")
    return lines


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 512):
    """Train a byte-level BPE tokenizer with a ChatML template; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus if corpus is not None else default_corpus()), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        padding_side="left",
        additional_special_tokens=["<|im_start|>", "<|endoftext|>"],
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def padded_vocab_size(tokenizer) -> int:
    """The embedding rows a tiny model gets for ``tokenizer``: its length rounded up to a multiple of 64."""
    return max(64, -(-len(tokenizer) // 64) * 64)


def build_model(
    tokenizer,
    *,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    tie_word_embeddings: bool = True,
    max_position_embeddings: int = 2048,
    seed: int = 0,
):
    """A randomly initialised ``Qwen2ForCausalLM`` sized for ``tokenizer`` (vocab rounded up to 64)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=padded_vocab_size(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,  # type: ignore[call-arg]  # accepted at run time, not in the stubs
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def make_tiny_model_dir(
    path: str | Path, *, corpus: Iterable[str] | None = None, seed: int = 0, **model_kwargs
) -> Path:
    """Write a tiny model + tokenizer to ``path`` (loadable with ``AutoModelForCausalLM``/``AutoTokenizer``)."""
    path = Path(path)
    tokenizer = build_tokenizer(corpus)
    model = build_model(tokenizer, seed=seed, **model_kwargs)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_tiny_lora_adapter(model_dir: str | Path, path: str | Path, *, rank: int = 4, seed: int = 0) -> Path:
    """Write a peft LoRA adapter of ``rank`` on every linear layer of the model at ``model_dir`` to ``path``
    (``adapter_config.json`` and its weights), both LoRA matrices random (``init_lora_weights=False``) so that
    the adapted model differs from the base one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(str(path))
    return Path(path)


def add_mtp_layer(model_dir: str | Path, seed: int = 0) -> Path:
    """Make the tiny Qwen2 at ``model_dir`` a tiny MiMo (in place): one multi-token-prediction layer with MiMo's
    weight names (``model.mtp_layers.0.*``: ``token_layernorm``, ``hidden_layernorm``, ``input_proj`` over
    ``[hidden; embedding]``, a Qwen2 decoder layer and ``final_layernorm``; small random weights, norms near 1),
    ``num_nextn_predict_layers: 1`` and ``architectures: [MiMoForCausalLM]`` in its config (vLLM serves it as MiMo
    and drafts with the layer; transformers still loads it as Qwen2, without the layer)."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    path = Path(model_dir)
    config = json.loads((path / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    config["architectures"] = ["MiMoForCausalLM"]
    (path / "config.json").write_text(json.dumps(config, indent=2))
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    queries, keys = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes = {
        "token_layernorm.weight": (hidden,),
        "hidden_layernorm.weight": (hidden,),
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "final_layernorm.weight": (hidden,),
        "input_proj.weight": (hidden, 2 * hidden),
        "self_attn.q_proj.weight": (queries, hidden),
        "self_attn.q_proj.bias": (queries,),
        "self_attn.k_proj.weight": (keys, hidden),
        "self_attn.k_proj.bias": (keys,),
        "self_attn.v_proj.weight": (keys, hidden),
        "self_attn.v_proj.bias": (keys,),
        "self_attn.o_proj.weight": (hidden, queries),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }
    generator = torch.Generator().manual_seed(seed)
    state = load_file(str(path / "model.safetensors"))
    for name, shape in shapes.items():
        base = 1.0 if name.endswith("layernorm.weight") else 0.0
        state[f"model.mtp_layers.0.{name}"] = base + 0.05 * torch.randn(shape, generator=generator)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


#: the mixture-of-experts families :func:`build_moe_model` builds: Qwen3-MoE (routed experts only, per-head
#: query/key norms) and Qwen2-MoE (routed experts plus a gated shared expert)
MOE_FAMILIES: tuple[str, ...] = ("qwen3_moe", "qwen2_moe")


def build_moe_model(
    tokenizer,
    *,
    family: str = "qwen3_moe",
    hidden_size: int = 64,
    moe_intermediate_size: int = 32,
    shared_expert_intermediate_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    num_experts: int = 8,
    top_k: int = 2,
    norm_topk_prob: bool = True,
    router_aux_loss_coef: float = 0.001,
    tie_word_embeddings: bool = True,
    max_position_embeddings: int = 2048,
    seed: int = 0,
):
    """A randomly initialised mixture-of-experts causal LM of ``family`` (:data:`MOE_FAMILIES`) sized for
    ``tokenizer``: every decoder layer is sparse, with ``num_experts`` experts of which each token uses
    ``top_k``. Qwen2-MoE layers also have a shared expert of ``shared_expert_intermediate_size``."""
    import torch
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    if family not in MOE_FAMILIES:
        raise ValueError(f"family={family!r}: choose one of {', '.join(MOE_FAMILIES)}")
    torch.manual_seed(seed)
    common: dict[str, Any] = dict(
        vocab_size=padded_vocab_size(tokenizer),
        head_dim=hidden_size // num_heads,
        hidden_size=hidden_size,
        intermediate_size=moe_intermediate_size,
        moe_intermediate_size=moe_intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        norm_topk_prob=norm_topk_prob,
        router_aux_loss_coef=router_aux_loss_coef,
        decoder_sparse_step=1,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model: Qwen3MoeForCausalLM | Qwen2MoeForCausalLM
    if family == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**common))
    else:
        shared = shared_expert_intermediate_size
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(**common, shared_expert_intermediate_size=shared))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def make_tiny_moe_model_dir(
    path: str | Path, *, corpus: Iterable[str] | None = None, seed: int = 0, **model_kwargs
) -> Path:
    """Write a tiny mixture-of-experts model (:func:`build_moe_model`; by default Qwen3-MoE, 2 layers, 8
    experts, top-2) and its tokenizer to ``path``, loadable with ``AutoModelForCausalLM``/``AutoTokenizer``."""
    path = Path(path)
    tokenizer = build_tokenizer(corpus)
    model = build_moe_model(tokenizer, seed=seed, **model_kwargs)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_tiny_reward_model_dir(
    path: str | Path, *, corpus: Iterable[str] | None = None, chat_template: str | None = None, seed: int = 0
) -> Path:
    """Write a tiny ``Qwen2ForSequenceClassification`` reward model (one label, random score head) and its
    tokenizer to ``path``. ``corpus`` trains another tokenizer than the policy's; ``chat_template`` replaces
    the ChatML one."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    path = Path(path)
    tokenizer = build_tokenizer(corpus)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    config = build_model(tokenizer, seed=seed).config
    config.num_labels = 1
    torch.manual_seed(seed + 1)
    model = Qwen2ForSequenceClassification(config)
    torch.nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
