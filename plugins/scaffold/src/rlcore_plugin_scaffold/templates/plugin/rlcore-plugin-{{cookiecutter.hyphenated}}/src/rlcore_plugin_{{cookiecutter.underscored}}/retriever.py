"""The document retriever ``{{ cookiecutter.hyphenated }}`` (``retriever: {{ cookiecutter.hyphenated }}`` in the ``search`` tool's config).

What it does: ranks the documents of a small in-memory list by how many of the query's words each contains.
The ``search`` tool (rlcore-plugin-agents) builds it with its ``retriever_config`` and calls
``retrieve(queries, topk)`` on a thread of its own, so a blocking client (a database, an HTTP service) is fine.

What to change: :meth:`WordOverlapRetriever.retrieve` (and what ``__init__`` reads from the config).
``tests/test_retriever.py`` runs rlcore's contract suite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlcore.api import RetrievedDocument, RLCoreError

DOCUMENTS = (
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "The Nile is a river in Africa.",
)


class WordOverlapRetriever:
    """Documents (``config["documents"]``, else :data:`DOCUMENTS`) ranked by the query words they contain."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Read ``documents`` (a list of strings) from the config."""
        documents = (config or {}).get("documents", DOCUMENTS)
        if not isinstance(documents, (list, tuple)) or not all(isinstance(d, str) for d in documents):
            raise RLCoreError("retriever_config.documents must be a list of strings")
        self.documents = list(documents)

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[RetrievedDocument]]:
        """For each query, the ``topk`` documents sharing the most words with it (ties in list order)."""
        results = []
        for query in queries:
            words = set(query.lower().split())
            scored = [(len(words & set(doc.lower().rstrip(".").split())), i) for i, doc in enumerate(self.documents)]
            ranked = sorted(scored, key=lambda item: (-item[0], item[1]))[:topk]
            results.append([RetrievedDocument(self.documents[i], float(score), str(i)) for score, i in ranked])
        return results
