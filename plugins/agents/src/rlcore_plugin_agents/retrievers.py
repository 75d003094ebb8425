"""The built-in retrievers (kind ``retriever``) of the ``search`` tool: ``http``, verl's retrieval-service
protocol, and ``bm25``, Okapi BM25 over a local JSON-lines corpus (pure Python, nothing downloaded).

``http`` (``retriever_config``: ``retrieval_service_url``, ``timeout`` seconds, default 30) sends
``POST {"queries": [...], "topk": k, "return_scores": true}`` and reads ``{"result": [[{"document": {"id",
"contents"}, "score"}, ...], ...]}`` (one list per query; without scores, the list items are the documents), as
verl's search tool and Search-R1's retrieval server do. A connection error, a timeout or an HTTP 5xx is tried
again, :data:`ATTEMPTS` times in all; then the error names the URL and the cause.

``bm25`` (``retriever_config``: ``corpus_path``, ``k1`` 1.5, ``b`` 0.75) reads rows ``{"id", "contents"}`` (verl's
wiki corpus layout; ``contents`` is ``"Title"\\ntext``) once, and ranks them by BM25 over lower-cased words;
documents without a query word are left out, ties keep corpus order.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rlcore.api import RetrievedDocument, RLCoreError

__all__ = ["ATTEMPTS", "BM25Retriever", "HttpRetriever"]

#: tries of one retrieval request in all
ATTEMPTS = 3
#: seconds before retry n (times n)
RETRY_DELAY_S = 0.5
_WORD = re.compile(r"\w+")


def _words(text: str) -> list[str]:
    """The lower-cased words of ``text``."""
    return _WORD.findall(text.lower())


def _positive(config: Mapping[str, Any], key: str, default: float) -> float:
    """``config[key]`` as a positive number (``default`` when absent); an :class:`RLCoreError` names the key."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise RLCoreError(f"retriever_config.{key} must be a positive number, got {value!r}")
    return float(value)


class HttpRetriever:
    """verl's retrieval service (``retrieval_service_url``) as a retriever."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Read ``retrieval_service_url`` (an http(s) URL) and ``timeout``."""
        config = config or {}
        url = config.get("retrieval_service_url")
        parts = urlsplit(str(url or ""))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RLCoreError(
                f"retrieval_service_url={url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/retrieve)"
            )
        self.url = str(url)
        self.timeout = _positive(config, "timeout", 30.0)

    def _post(self, payload: bytes) -> Any:
        """The JSON reply to one request; ``(error, retry)`` raised as :class:`_Failed`."""
        request = urllib.request.Request(self.url, data=payload, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - checked above
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise _Failed(f"HTTP {exc.code} {exc.reason}", exc.code >= 500) from None
        except (urllib.error.URLError, OSError) as exc:
            raise _Failed(f"no answer: {getattr(exc, 'reason', exc)}", True) from None
        except ValueError:
            raise _Failed("the reply is not JSON", False) from None

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[RetrievedDocument]]:
        """The service's documents for each query (at most ``topk``, in the service's order)."""
        if not queries:
            return []
        payload = json.dumps({"queries": list(queries), "topk": topk, "return_scores": True}).encode()
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(RETRY_DELAY_S * attempt)
            try:
                reply = self._post(payload)
                break
            except _Failed as exc:
                if not exc.retry or attempt == ATTEMPTS - 1:
                    raise RLCoreError(f"retrieval service {self.url}: {exc} (attempt {attempt + 1})") from None
        results = reply.get("result") if isinstance(reply, dict) else None
        if not isinstance(results, list) or len(results) != len(queries):
            raise RLCoreError(
                f"retrieval service {self.url}: the reply needs 'result', one list per query ({len(queries)}), "
                f"got {str(reply)[:200]!r}"
            )
        return [[_document(item, self.url) for item in found[:topk]] for found in results]


class _Failed(Exception):
    """One failed request: why, and whether another attempt may fare better."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def _document(item: Any, url: str) -> RetrievedDocument:
    """One item of a reply: ``{"document": {...}, "score": s}``, or the document itself."""
    document, score = (
        (item.get("document"), item.get("score", 0.0)) if isinstance(item, dict) and "document" in item else (item, 0.0)
    )
    if isinstance(document, str):
        return RetrievedDocument(document, float(score))
    if not isinstance(document, dict) or not isinstance(document.get("contents"), str):
        raise RLCoreError(f"retrieval service {url}: a document without 'contents': {str(item)[:200]!r}")
    doc_id = document.get("id")
    return RetrievedDocument(document["contents"], float(score), None if doc_id is None else str(doc_id))


class BM25Retriever:
    """Okapi BM25 over the JSON-lines corpus ``corpus_path``."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Read and index the corpus (``corpus_path``) with ``k1`` and ``b``."""
        config = config or {}
        path = config.get("corpus_path")
        if not path or not Path(str(path)).is_file():
            raise RLCoreError(f"retriever_config.corpus_path={path!r} is not a file (a JSON-lines corpus)")
        self.k1 = _positive(config, "k1", 1.5)
        self.b = float(config.get("b", 0.75))
        if not 0.0 <= self.b <= 1.0:
            raise RLCoreError(f"retriever_config.b must be between 0 and 1, got {self.b!r}")
        self.documents: list[RetrievedDocument] = []
        self.counts: list[Counter[str]] = []
        for number, line in enumerate(Path(str(path)).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RLCoreError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("contents"), str):
                raise RLCoreError(f"{path}, line {number}: a row needs 'contents' (a string)")
            self.documents.append(
                RetrievedDocument(row["contents"], 0.0, None if row.get("id") is None else str(row["id"]))
            )
            self.counts.append(Counter(_words(row["contents"])))
        self.lengths = [sum(counts.values()) for counts in self.counts]
        self.average = sum(self.lengths) / len(self.lengths) if self.lengths else 0.0
        frequency: Counter[str] = Counter(word for counts in self.counts for word in counts)
        total = len(self.counts)
        self.idf = {word: math.log(1 + (total - n + 0.5) / (n + 0.5)) for word, n in frequency.items()}

    def score(self, query: str, index: int) -> float:
        """The BM25 score of document ``index`` for ``query``."""
        counts, length = self.counts[index], self.lengths[index]
        norm = self.k1 * (1 - self.b + self.b * length / self.average) if self.average else self.k1
        return sum(
            self.idf[word] * counts[word] * (self.k1 + 1) / (counts[word] + norm)
            for word in set(_words(query))
            if word in counts
        )

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[RetrievedDocument]]:
        """The ``topk`` best documents of each query (those with a query word), best first."""
        results = []
        for query in queries:
            scored = [(self.score(query, i), i) for i in range(len(self.documents))]
            ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))[:topk]
            results.append(
                [RetrievedDocument(self.documents[i].contents, score, self.documents[i].id) for score, i in ranked]
            )
        return results
