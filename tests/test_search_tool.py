"""The ``search`` tool and the ``retriever`` kind: BM25 ranking on a tiny corpus, the ``http`` retriever against a
local server speaking verl's retrieval-service protocol, the tool's replies in verl's format, a retriever from a
third-party plugin, the contract suite on both built-ins, and the tool in a real multi-turn training run."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rlcore_plugin_agents.retrievers import BM25Retriever, HttpRetriever
from rlcore_plugin_agents.search_tool import SearchTool
from rlcore_plugin_agents.tools import load_tools
from rlcore_testkit.contracts import RetrieverContract
from rlcore_testkit.contracts.chat_templates import tool_chat_pair
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore import hookimpl, load_plugins
from rlcore.api import RetrievedDocument, RLCoreError, ToolResult

CORPUS = [
    {"id": "paris", "contents": '"Paris"\nParis is the capital of France.'},
    {"id": "berlin", "contents": '"Berlin"\nBerlin is the capital of Germany.'},
    {"id": "nile", "contents": '"Nile"\nThe Nile is a river in Africa.'},
    {"id": "europe", "contents": '"Europe"\nFrance and Germany are countries in Europe.'},
]


def write_corpus(path: Path, rows: list[dict[str, Any]] = CORPUS) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


# ---------------------------------------------------------------------------------------------------- bm25
def test_bm25_ranks_by_the_query_words(corpus: Path) -> None:
    bm25 = BM25Retriever({"corpus_path": str(corpus)})
    (germany, river) = bm25.retrieve(["capital of Germany", "river"], 3)
    assert [doc.id for doc in germany][:2] == ["berlin", "paris"]  # capital+of+germany, then capital+of
    assert "europe" in [doc.id for doc in germany]  # germany alone
    assert [doc.id for doc in river] == ["nile"]  # documents without a query word are left out
    assert [doc.score for doc in germany] == sorted((doc.score for doc in germany), reverse=True)


def test_bm25_scores_are_okapi_bm25(tmp_path: Path) -> None:
    """Two documents; "apple" in one of them, twice: idf = ln(1 + (2 - 1 + 0.5) / (1 + 0.5))."""
    path = write_corpus(tmp_path / "c.jsonl", [{"contents": "apple apple pie"}, {"contents": "banana bread"}])
    (found,) = BM25Retriever({"corpus_path": str(path), "k1": 1.2, "b": 0.5}).retrieve(["apple"], 5)
    idf = math.log(1 + 1.5 / 1.5)
    norm = 1.2 * (1 - 0.5 + 0.5 * 3 / 2.5)
    assert len(found) == 1 and found[0].contents == "apple apple pie"
    assert found[0].score == pytest.approx(idf * 2 * 2.2 / (2 + norm))


@pytest.mark.parametrize(
    ("text", "config", "message"),
    [
        (None, {"corpus_path": "/nowhere.jsonl"}, "retriever_config.corpus_path='/nowhere.jsonl' is not a file"),
        ('{"contents": "a"}\nnot json\n', {}, "line 2: not JSON"),
        ('{"text": "a"}\n', {}, "line 1: a row needs 'contents' (a string)"),
        ('{"contents": "a"}\n', {"b": 2}, "retriever_config.b must be between 0 and 1, got 2.0"),
    ],
)
def test_bm25_names_what_is_wrong(tmp_path: Path, text: str | None, config: dict, message: str) -> None:
    path = tmp_path / "c.jsonl"
    if text is not None:
        path.write_text(text)
    with pytest.raises(RLCoreError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        BM25Retriever({"corpus_path": str(path), **config})


# ---------------------------------------------------------------------------------------------------- http
class RetrievalServer(ThreadingHTTPServer):
    """verl's retrieval service (tests only): ``POST {"queries", "topk", "return_scores"}`` answered with the corpus
    documents sharing a word with each query, ``{"result": [[{"document": {...}, "score": n}, ...], ...]}``;
    ``failures`` makes the next requests answer HTTP 500, ``status`` answers every request with that code."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), RetrievalHandler)
        self.requests: list[dict[str, Any]] = []
        self.failures = 0
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/retrieve"


class RetrievalHandler(BaseHTTPRequestHandler):
    server: RetrievalServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(request)
        if self.server.failures or self.server.status != 200:
            self.server.failures = max(0, self.server.failures - 1)
            self.send_error(500 if self.server.status == 200 else self.server.status)
            return
        result = []
        for query in request["queries"]:
            words = set(query.lower().split())
            hits = [(len(words & set(row["contents"].lower().replace(".", "").split())), row) for row in CORPUS]
            ranked = sorted((hit for hit in hits if hit[0]), key=lambda hit: -hit[0])[: request["topk"]]
            result.append([{"document": row, "score": float(score)} for score, row in ranked])
        body = json.dumps({"result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def service() -> Iterator[RetrievalServer]:
    server = RetrievalServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_http_retriever_speaks_verls_protocol(service: RetrievalServer) -> None:
    found = HttpRetriever({"retrieval_service_url": service.url}).retrieve(["capital of Germany", "river"], 2)
    assert service.requests == [{"queries": ["capital of Germany", "river"], "topk": 2, "return_scores": True}]
    assert [[doc.id for doc in docs] for docs in found] == [["berlin", "paris"], ["nile"]]
    assert found[1][0] == RetrievedDocument('"Nile"\nThe Nile is a river in Africa.', 1.0, "nile")


def test_the_http_retriever_retries_a_500_and_not_a_404(service: RetrievalServer) -> None:
    retriever = HttpRetriever({"retrieval_service_url": service.url})
    service.failures = 1
    assert [doc.id for doc in retriever.retrieve(["river"], 1)[0]] == ["nile"]
    assert len(service.requests) == 2
    service.status = 404
    with pytest.raises(RLCoreError, match=f"retrieval service {service.url}: HTTP 404 Not Found \\(attempt 1\\)"):
        retriever.retrieve(["river"], 1)
    assert len(service.requests) == 3


def test_the_http_retriever_needs_a_url() -> None:
    with pytest.raises(RLCoreError, match="retrieval_service_url='localhost:8000' is not an http"):
        HttpRetriever({"retrieval_service_url": "localhost:8000"})


class TestBM25Contract(RetrieverContract):
    component_name = "bm25"

    @pytest.fixture
    def retriever(self, corpus: Path) -> Any:
        return load_plugins().registry.load("retriever", "bm25")({"corpus_path": str(corpus)})


class TestHttpContract(RetrieverContract):
    component_name = "http"

    @pytest.fixture
    def retriever(self, service: RetrievalServer) -> Any:
        return load_plugins().registry.load("retriever", "http")({"retrieval_service_url": service.url})


# ---------------------------------------------------------------------------------------------------- the tool
def tool_yaml(path: Path, class_name: str, config: dict[str, Any]) -> str:
    path.write_text(json.dumps({"tools": [{"class_name": class_name, "config": config}]}))
    return str(path)


def call(tool: Any, arguments: dict[str, Any]) -> ToolResult:
    return asyncio.run(tool.execute("t0", arguments))


def test_the_search_tool_answers_in_verls_format(tmp_path: Path, corpus: Path, service: RetrievalServer) -> None:
    registry = load_plugins().registry
    local = load_tools(
        tool_yaml(
            tmp_path / "a.yaml", "search", {"retriever": "bm25", "retriever_config": {"corpus_path": str(corpus)}}
        ),
        registry,
    )["search"]
    remote = load_tools(
        tool_yaml(
            tmp_path / "b.yaml", "verl.tools.search_tool.SearchTool", {"retrieval_service_url": service.url, "topk": 1}
        ),
        registry,
    )["search"]
    assert local.openai_schema()["function"]["parameters"]["required"] == ["query_list"]
    answer = call(remote, {"query_list": ["capital of Germany", "river"]})
    assert json.loads(answer.text) == {
        "result": 'Doc 1(Title: "Berlin") Berlin is the capital of Germany.\n\n---\nDoc 1(Title: "Nile") The Nile is a river in Africa.\n'
    }
    assert answer.metrics == {"documents": 2.0} and service.requests[0]["topk"] == 1
    assert json.loads(call(local, {"query_list": ["river"]}).text)["result"].startswith('Doc 1(Title: "Nile")')


def test_the_search_tool_tells_the_model_what_went_wrong(tmp_path: Path, service: RetrievalServer) -> None:
    tool = load_tools(
        tool_yaml(tmp_path / "t.yaml", "search", {"retrieval_service_url": service.url}), load_plugins().registry
    )["search"]
    assert call(tool, {"query": "river"}).text == "Error: the argument 'query_list' (a list of strings) is required"
    service.status = 404
    failed = call(tool, {"query_list": ["river"]})
    assert failed.text.startswith(f"Error: search failed: retrieval service {service.url}: HTTP 404")
    assert failed.metrics == {"failed": 1.0}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "set config.retriever (a registered retriever) or config.retrieval_service_url"),
        ({"retriever": "faiss"}, "unknown retriever 'faiss' (registered: bm25, http"),
        ({"retriever": "bm25"}, "retriever 'bm25': retriever_config.corpus_path=None is not a file"),
        ({"retrieval_service_url": "http://h/retrieve", "topk": 0}, "config.topk must be a positive integer, got 0"),
    ],
)
def test_a_bad_search_config_names_the_entry(tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(RLCoreError) as refused:
        load_tools(tool_yaml(tmp_path / "t.yaml", "search", config), load_plugins().registry)
    assert str(refused.value).startswith(f"{tmp_path / 't.yaml'}: tools[0]: search tool")
    assert message in str(refused.value)


class Capitals:
    """A third party's retriever: the capital of each country named in the query."""

    CAPITALS = {"france": "Paris", "germany": "Berlin"}

    def __init__(self, config: Any = None) -> None:
        self.prefix = (config or {}).get("prefix", "")

    def retrieve(self, queries: Any, topk: int) -> list[list[RetrievedDocument]]:
        return [
            [
                RetrievedDocument(f"{self.prefix}{city}", 1.0)
                for country, city in self.CAPITALS.items()
                if country in q.lower()
            ][:topk]
            for q in queries
        ]


class CapitalsPlugin:
    @hookimpl
    def register_retrievers(self, register: Any) -> None:
        register("capitals", f"{__name__}:Capitals", description="capitals by country")


def test_hook_register_retrievers(registered, tmp_path: Path) -> None:
    """A third party's retriever, registered by its plugin's ``register_retrievers``, serves the search tool."""
    with registered(CapitalsPlugin()) as manager:
        assert ("retriever", "capitals") in {(c.kind, c.name) for c in manager.registry.components()}
        path = tool_yaml(
            tmp_path / "t.yaml", "search", {"retriever": "capitals", "retriever_config": {"prefix": "City\n"}}
        )
        tool = load_tools(path, manager.registry)["search"]
        assert json.loads(call(tool, {"query_list": ["Where is Germany's government?"]}).text) == {
            "result": "Doc 1(Title: City) Berlin\n"
        }


class TestCapitalsContract(RetrieverContract):
    component_name = "capitals"
    example_queries = ("capital of France", "Germany")

    @pytest.fixture
    def retriever(self, registered) -> Iterator[Any]:
        with registered(CapitalsPlugin()) as manager:
            yield manager.registry.load("retriever", "capitals")()


# ---------------------------------------------------------------------------------------------------- a real run
class RecordedSearch(SearchTool):
    """The search tool under the calculator's schema (the tiny tool model calls ``calculator(expression)``), its
    replies appended to the file ``config.record``."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        result = await super().execute(instance_id, {"query_list": [str(arguments.get("expression", ""))]})
        with Path(self.config["record"]).open("a") as record:
            record.write(json.dumps({"arguments": arguments, "text": result.text}) + "\n")
        return result


def test_training_with_the_search_tool(tmp_path: Path) -> None:
    """One GRPO step whose rollouts call the search tool (BM25 over a corpus of products) in the tool agent loop."""
    model = tmp_path / "model"
    tokenizer, policy = tool_chat_pair("qwen2.5")
    policy.save_pretrained(model)
    tokenizer.save_pretrained(model)
    corpus = write_corpus(
        tmp_path / "products.jsonl",
        [{"id": str(a), "contents": f'"{a}"\n{a} times 7 is {a * 7}'} for a in range(10, 100)],
    )
    record = tmp_path / "replies.jsonl"
    tools = tmp_path / "tools.yaml"
    tool_yaml(
        tools,
        f"{__name__}.RecordedSearch",
        {"retriever": "bm25", "retriever_config": {"corpus_path": str(corpus)}, "topk": 2, "record": str(record)},
    )
    task = make_tiny_task(tmp_path / "task")
    rows = [
        {
            "data_source": "tiny/digits",
            "prompt": [{"role": "user", "content": f"{a}*{a + 13}="}],
            "reward_model": {"ground_truth": "0"},
        }
        for a in range(11, 27)
    ]
    pq.write_table(pa.Table.from_pylist(rows), task["train"])  # the products the tool model calls the calculator for
    last, _ = tiny_run(
        tmp_path,
        model,
        task,
        "data.max_prompt_length=128",
        "data.max_response_length=96",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=512",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "data.return_raw_chat=false",
        "actor_rollout_ref.rollout.temperature=0.3",  # the tiny model's calls are well-formed JSON mostly when cool
        "trainer.total_training_steps=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
    )
    assert last["tool/call_rate"] > 0 and last["tool/errors"] == 0
    replies = [json.loads(line) for line in record.read_text().splitlines()]
    assert replies and all(
        set(json.loads(r["text"])) == {"result"} for r in replies if not r["text"].startswith("Error")
    )
    assert any(
        json.loads(r["text"])["result"].startswith("Doc 1(Title: ")
        for r in replies
        if not r["text"].startswith("Error")
    )


class Slow:
    """A retriever that takes 0.2 s and counts the calls running at once (class-wide)."""

    lock = threading.Lock()
    running = 0
    most = 0

    def __init__(self, config: Any = None) -> None:
        pass

    def retrieve(self, queries: Any, topk: int) -> list[list[RetrievedDocument]]:
        with Slow.lock:
            Slow.running += 1
            Slow.most = max(Slow.most, Slow.running)
        time.sleep(0.2)
        with Slow.lock:
            Slow.running -= 1
        return [[RetrievedDocument(q, 1.0)] for q in queries]


class SlowPlugin:
    @hookimpl
    def register_retrievers(self, register: Any) -> None:
        register("slow", f"{__name__}:Slow")


@pytest.mark.parametrize(
    ("config", "most"), [({}, 4), ({"rate_limit": 2}, 2), ({"num_workers": 1, "rate_limit": 3}, 1)]
)
def test_rate_limit_and_num_workers_bound_the_retrievals_at_once(
    registered, tmp_path: Path, config: dict, most: int
) -> None:
    Slow.most = 0
    with registered(SlowPlugin()) as manager:
        tool = load_tools(tool_yaml(tmp_path / "t.yaml", "search", {"retriever": "slow", **config}), manager.registry)[
            "search"
        ]
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: call(tool, {"query_list": [f"q{i}"]}), range(4)))
    assert [json.loads(a.text)["result"] for a in answers] == [f"Doc 1(Title: q{i}) \n" for i in range(4)]
    assert Slow.most == most
