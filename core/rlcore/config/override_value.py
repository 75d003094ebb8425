"""The value of a ``key=value`` override: YAML, with two readings of Hydra's (:func:`read_value`).

A number in exponent form is a float (YAML 1.1 reads ``1e-6`` as text). A mapping written without spaces,
``key={x:1,y:2}``, is read as Hydra reads it, ``{'x': 1, 'y': 2}``: YAML reads ``{'x:1': None, 'y:2': None}`` (a
plain scalar may hold a ``:`` not followed by a space) and cannot read Hydra's escaped braces (``\\{*\\}``). verl's
scripts write such values, e.g. ``fsdp_plan.apply_modules={model.visual.blocks.\\{*\\}:{},lm_head:{}}``.
:func:`hydra_flow` reads them: a key runs to its first unescaped ``:``; a value is a nested ``{...}`` or ``[...]``, a
quoted string, or text up to the next ``,``, ``}`` or ``]`` parsed as YAML (kept as text when it holds an escape);
``\\{``, ``\\}``, ``\\[``, ``\\]``, ``\\,``, ``\\:``, ``\\ `` and ``\\\\`` stand for the character. Torch-free.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

#: a float in exponent form, which YAML 1.1 reads as a string
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

#: the characters a backslash escapes in a key or an unquoted value
_ESCAPED = "{}[],:\\ "


class HydraMappingError(ValueError):
    """A mapping that cannot be read unambiguously; the message says where."""


def read_value(raw: str) -> Any:
    """The override value ``raw`` (stripped): YAML, a float in exponent form, a flow mapping or list YAML misreads
    (or cannot read) the Hydra way;
    :class:`HydraMappingError` (a ``yaml.YAMLError`` when it is not a mapping) when it cannot be read."""
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        if not raw.startswith(("{", "[")):
            raise
        return hydra_flow(raw)
    if _needs_hydra_reading(raw, value):
        return hydra_flow(raw)
    return _float(value)


def _float(value: Any) -> Any:
    """``value``, a float where it is text in exponent form."""
    return float(value) if isinstance(value, str) and _FLOAT.match(value) else value


def _needs_hydra_reading(raw: str, value: Any) -> bool:
    """Whether the command-line value ``raw`` (YAML read it as ``value``) is a flow mapping or list YAML misread:
    some key in it (at any depth) holds a ``:`` and no value."""
    return raw.startswith(("{", "[")) and _misread(value)


def _misread(value: Any) -> bool:
    """Whether a mapping in ``value`` has a ``k:v`` key YAML read with no value."""
    if isinstance(value, dict):
        return any((v is None and ":" in str(k)) or _misread(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_misread(v) for v in value)
    return False


def hydra_flow(raw: str) -> Any:
    """The flow mapping or list ``raw`` read the Hydra way (module docstring); :class:`HydraMappingError` when it
    cannot be read unambiguously (unbalanced brackets, an empty or repeated key, a ``:`` in an unquoted value)."""
    reader = _Reader(raw)
    value = reader.mapping() if raw.startswith("{") else reader.sequence()
    if reader.pos != len(raw):
        raise HydraMappingError(f"unexpected {raw[reader.pos :]!r} after the closing {raw[reader.pos - 1]!r}")
    return value


def _scalar(text: str) -> Any:
    """An unquoted value as Hydra reads it: YAML's number, boolean or null, else the text itself."""
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text
    return text if isinstance(value, (dict, list)) else _float(value)


class _Reader:
    """A cursor over the text of one value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            found = repr(self._peek()) if self._peek() else "the end"
            raise HydraMappingError(f"expected {char!r} at character {self.pos + 1}, found {found}")
        self.pos += 1

    def mapping(self) -> dict[str, Any]:
        """``{key:value,...}`` from the cursor."""
        self._expect("{")
        result: dict[str, Any] = {}
        if self._peek() == "}":
            self.pos += 1
            return result
        while True:
            key = self._text(stop=":}", what="key").strip()
            if not key:
                raise HydraMappingError(f"an empty key at character {self.pos + 1}")
            if key in result:
                raise HydraMappingError(f"the key {key!r} is given twice")
            self._expect(":")
            result[key] = self._value("}")
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("}")
            return result

    def sequence(self) -> list[Any]:
        """``[value,...]`` from the cursor."""
        self._expect("[")
        result: list[Any] = []
        if self._peek() == "]":
            self.pos += 1
            return result
        while True:
            result.append(self._value("]"))
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("]")
            return result

    def _value(self, closing: str) -> Any:
        """One value before ``,`` or ``closing``."""
        while self._peek() == " ":
            self.pos += 1
        if self._peek() == "{":
            value: Any = self.mapping()
        elif self._peek() == "[":
            value = self.sequence()
        elif self._peek() in ("'", '"'):
            quote = self._peek()
            end = self.text.find(quote, self.pos + 1)
            if end < 0:
                raise HydraMappingError(f"the quote at character {self.pos + 1} is not closed")
            value = self.text[self.pos + 1 : end]
            self.pos = end + 1
        else:
            start = self.pos
            scalar = self._text(stop=f",{closing}:", what="value").strip()
            if self._peek() == ":":
                raise HydraMappingError(f"a ':' in the value {scalar!r} (quote it, or escape it as '\\:')")
            value = scalar if "\\" in self.text[start : self.pos] else _scalar(scalar)
        while self._peek() == " ":
            self.pos += 1
        return value

    def _text(self, stop: str, what: str) -> str:
        """Text up to an unescaped character of ``stop``, escapes undone; a bracket inside it is an error."""
        out = []
        while self._peek() and self._peek() not in stop:
            char = self._peek()
            if char == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in _ESCAPED:
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if char in "{}[]":
                raise HydraMappingError(f"an unescaped {char!r} in a {what} at character {self.pos + 1}")
            out.append(char)
            self.pos += 1
        return "".join(out)
