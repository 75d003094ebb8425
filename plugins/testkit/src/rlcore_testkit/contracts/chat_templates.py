"""Real chat templates for multi-turn tests, and tiny tokenizers and models that speak them (no download).

The templates are written from the official ones of Qwen2.5-Instruct, Qwen3 (thinking) and Llama 3.1-Instruct,
with the parts that matter for token masking kept exactly: the system prompt with tools, tool responses
merged into a user turn (Qwen) or an ``ipython`` turn (Llama), Qwen3's ``<think>`` handling of earlier
turns and Llama's trimmed content. :func:`chat_tokenizer` adds each family's special tokens to the locally
trained tiny tokenizer; :func:`tool_chat_model` warm-starts a tiny model on a few hundred calculator
conversations in that format so that sampling produces tool calls (and sometimes malformed ones).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

_QWEN_TOOLS_SYSTEM = (
    '"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with '
    'function signatures within <tools></tools> XML tags:\\n<tools>"'
)
_QWEN_TOOLS_FORMAT = (
    '"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n"'
)
_QWEN_TOOL_CALLS = """
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' + (tool_call.arguments | tojson) + '}\\n</tool_call>' }}
        {%- endfor %}"""
_QWEN_TOOL_RESPONSE = """
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}"""

QWEN25 = (
    """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}
    {{- "\\n\\n" + """
    + _QWEN_TOOLS_SYSTEM
    + """ }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- """
    + _QWEN_TOOLS_FORMAT
    + """ }}
{%- else %}
    {%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"""
    + _QWEN_TOOL_CALLS
    + """
        {{- '<|im_end|>\\n' }}"""
    + _QWEN_TOOL_RESPONSE
    + """
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
)

QWEN3 = (
    """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- """
    + _QWEN_TOOLS_SYSTEM
    + """ }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- """
    + _QWEN_TOOLS_FORMAT
    + """ }}
{%- else %}
    {%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}"""
    + _QWEN_TOOL_CALLS
    + """
        {{- '<|im_end|>\\n' }}"""
    + _QWEN_TOOL_RESPONSE
    + """
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""
)

LLAMA3 = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or message.tool_calls) %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- elif message.tool_calls %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' + (tool_call.arguments | tojson) + '}' }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or (message.content is iterable and message.content is not string) %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""


@dataclass(frozen=True)
class ChatFamily:
    """A chat template with the special tokens its tokenizer needs and its end-of-turn (EOS) token."""

    template: str
    special_tokens: tuple[str, ...]
    eos: str
    bos: str | None = None
    #: added (non-special) tokens: kept by ``decode(skip_special_tokens=True)``, as in the real tokenizers
    added_tokens: tuple[str, ...] = ()


CHAT_FAMILIES: dict[str, ChatFamily] = {
    "qwen2.5": ChatFamily(
        QWEN25, ("<|im_start|>", "<|im_end|>", "<|endoftext|>"), "<|im_end|>", None, ("<tool_call>", "</tool_call>")
    ),
    "qwen3": ChatFamily(
        QWEN3,
        ("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
        "<|im_end|>",
        None,
        ("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"),
    ),
    "llama3": ChatFamily(
        LLAMA3,
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>"),
        "<|eot_id|>",
        "<|begin_of_text|>",
    ),
}


def chat_tokenizer(family: str) -> Any:
    """The tiny locally trained tokenizer with ``family``'s chat template, special tokens, EOS and BOS."""
    from rlcore_testkit.tiny import build_tokenizer, default_corpus

    spec = CHAT_FAMILIES[family]
    corpus = default_corpus() + [json.dumps({"name": "calculator", "arguments": {"expression": "12*34"}})] * 20
    tokenizer = build_tokenizer(corpus)
    tokenizer.add_special_tokens({"additional_special_tokens": list(spec.special_tokens)})
    if spec.added_tokens:
        tokenizer.add_tokens(list(spec.added_tokens))
    tokenizer.eos_token = spec.eos
    if spec.bos:
        tokenizer.bos_token = spec.bos
    tokenizer.chat_template = spec.template
    return tokenizer


def calculator_conversation(rng: random.Random) -> list[dict[str, Any]]:
    """One conversation of the warm-start set: a product, a calculator call (sometimes malformed) and the answer."""
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    call = {"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}
    text = json.dumps(call) if rng.random() > 0.1 else json.dumps(call)[:-2]
    first = f"<tool_call>\n{text}\n</tool_call>" if rng.random() > 0.2 else str(a * b + rng.randint(-9, 9))
    conversation = [{"role": "user", "content": f"{a}*{b}="}, {"role": "assistant", "content": first}]
    if first.startswith("<tool_call>"):
        conversation += [{"role": "tool", "content": str(a * b)}, {"role": "assistant", "content": str(a * b)}]
    return conversation


def tool_chat_model(tokenizer: Any, steps: int = 60, seed: int = 0) -> Any:
    """A tiny causal LM warm-started for ``steps`` steps on :func:`calculator_conversation` text rendered with
    the tokenizer's template, so that it answers briefly, ends turns and calls the calculator."""
    import torch

    from rlcore_testkit.tiny import build_model

    rng = random.Random(seed)
    texts = [tokenizer.apply_chat_template(calculator_conversation(rng), tokenize=False) for _ in range(256)]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    model = build_model(tokenizer, seed=seed, max_position_embeddings=1024)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    pad = tokenizer.pad_token_id
    model.train()
    for step in range(steps):
        rows = [encoded[(step * 16 + i) % len(encoded)] for i in range(16)]
        width = max(map(len, rows))
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model.eval()


_TRAINED: dict[tuple[str, int, int], tuple[Any, Any]] = {}


def tool_chat_pair(family: str, steps: int = 60, seed: int = 0) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of :func:`chat_tokenizer` and :func:`tool_chat_model`, trained once per process
    and shared by every test that asks for the same family and steps; the model is a fresh copy each time."""
    import copy

    key = (family, steps, seed)
    if key not in _TRAINED:
        tokenizer = chat_tokenizer(family)
        _TRAINED[key] = tokenizer, tool_chat_model(tokenizer, steps=steps, seed=seed)
    tokenizer, model = _TRAINED[key]
    return tokenizer, copy.deepcopy(model)
