"""The ``search`` tool (verl's ``SearchTool``; ``class_name: search`` or ``verl.tools.search_tool.SearchTool``):
the model calls ``search(query_list)`` and reads the documents a retriever (kind ``retriever``) finds.

Its config in the tool YAML takes verl's keys, ``retrieval_service_url``, ``topk`` (default 3), ``timeout``
(seconds per call, the executor's), ``num_workers`` and ``rate_limit`` (retrievals running at once in this tool,
over all trajectories: the smaller of the two; default unbounded), and rlcore's ``retriever`` (a registered
retriever name; default ``http`` with ``retrieval_service_url``, which then goes to the retriever too) and
``retriever_config`` (the retriever's own settings, e.g. ``corpus_path`` of ``bm25``). The reply is verl's:
``{"result": "Doc 1(Title: <first line>) <rest>\\n..."}`` as JSON, the queries' passages joined by ``\\n---\\n``.
A call without a list of strings in ``query_list``, or a retriever that fails, is an error message to the model.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlcore.api import RetrievedDocument, Retriever, RLCoreError, Tool, ToolResult

if TYPE_CHECKING:
    from rlcore.api import Registry

__all__ = ["SearchTool", "passages_text"]


def passages_text(documents: list[RetrievedDocument]) -> str:
    """verl's rendering of one query's documents: ``Doc i(Title: <first line>) <the other lines>``, one a line."""
    lines = []
    for number, document in enumerate(documents, 1):
        title, _, text = document.contents.partition("\n")
        lines.append(f"Doc {number}(Title: {title}) {text}\n")
    return "".join(lines)


def _count(config: Mapping[str, Any], key: str) -> int | None:
    """``config[key]`` as a positive integer, or None when absent; an :class:`RLCoreError` names the key."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RLCoreError(f"search tool: config.{key} must be a positive integer, got {value!r}")
    return value


class SearchTool(Tool):
    """``search(query_list)``: the ``topk`` documents of each query, from the configured retriever."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Searches for relevant information based on the given queries.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query_list": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "A list of fully-formed semantic queries; each gets its own results.",
                    }
                },
                "required": ["query_list"],
            },
        },
    }

    def __init__(self, config: Mapping[str, Any] | None = None, tool_schema: Mapping[str, Any] | None = None):
        """Check the config; the retriever is built by :meth:`bind_registry`, which the tool loader calls next."""
        super().__init__(config, tool_schema)
        self.topk = _count(self.config, "topk") or 3
        bounds = [n for n in (_count(self.config, "num_workers"), _count(self.config, "rate_limit")) if n]
        self._slots = threading.BoundedSemaphore(min(bounds)) if bounds else None
        url = self.config.get("retrieval_service_url")
        self.retriever_name = str(self.config.get("retriever") or ("http" if url else ""))
        retriever_config = self.config.get("retriever_config") or {}
        if not isinstance(retriever_config, Mapping):
            raise RLCoreError(f"search tool: config.retriever_config must be a mapping, got {retriever_config!r}")
        self.retriever_config = dict(retriever_config)
        if self.retriever_name == "http":
            self.retriever_config.setdefault("retrieval_service_url", url)
            self.retriever_config.setdefault("timeout", self.config.get("timeout", 30))
        self.retriever: Retriever | None = None

    def bind_registry(self, registry: Registry) -> None:
        """Build the retriever named by the config from the run's ``registry``."""
        if not self.retriever_name:
            raise RLCoreError(
                "search tool: set config.retriever (a registered retriever) or config.retrieval_service_url"
            )
        if not registry.has("retriever", self.retriever_name):
            known = ", ".join(sorted(registry.names("retriever"))) or "none"
            raise RLCoreError(f"search tool: unknown retriever {self.retriever_name!r} (registered: {known})")
        try:
            self.retriever = registry.load("retriever", self.retriever_name)(self.retriever_config)
        except RLCoreError as exc:
            raise RLCoreError(f"search tool, retriever {self.retriever_name!r}: {exc}") from exc

    def _retrieve(self, queries: list[str]) -> list[list[RetrievedDocument]]:
        """The retriever's answer, within this tool's bound on retrievals at once."""
        if self.retriever is None:
            raise RLCoreError("search tool: no retriever (the tool loader binds the run's registry)")
        if self._slots is None:
            return self.retriever.retrieve(queries, self.topk)
        with self._slots:
            return self.retriever.retrieve(queries, self.topk)

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """The passages of each query as verl renders them, or ``Error: ...``."""
        queries = arguments.get("query_list")
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
            return ToolResult(
                "Error: the argument 'query_list' (a list of strings) is required", metrics={"invalid": 1.0}
            )
        try:
            found = self._retrieve(queries)
        except Exception as exc:  # noqa: BLE001 - the model is told, the run goes on
            return ToolResult(f"Error: search failed: {exc}", metrics={"failed": 1.0})
        text = "\n---\n".join(passages_text(documents) for documents in found)
        return ToolResult(
            json.dumps({"result": text}), metrics={"documents": float(sum(len(documents) for documents in found))}
        )
