"""A local server that speaks Sandbox Fusion's ``POST /run_code`` API (tests only): it runs the posted Python with
``subprocess`` under the request's ``run_timeout`` and ``memory_limit_MB`` and answers in Sandbox Fusion's format
(``status`` ``Success``/``Failed``, ``run_result`` with ``status`` ``Finished``/``TimeLimitExceeded``,
``return_code``, ``stdout``, ``stderr``).

In a thread of the test (:class:`FusionServer`), or as a process of its own for a real run, whose controller forks
scorer processes that would inherit the pipes of a program the server runs in the same process:
``python tests/sandbox_fusion_server.py LOG`` prints its URL, then appends each request (with the number of
programs running when it started) to the JSON-lines file ``LOG``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: runs argv[2] as the main program with its address space limited to argv[1] bytes (no ``preexec_fn``: forking
#: a threaded process to run Python before exec can deadlock the child)
CONFINED = (
    "import resource, sys\n"
    "limit, code = int(sys.argv[1]), sys.argv[2]\n"
    "del sys.argv[1:]\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})\n"
)


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Sandbox Fusion's answer to one run_code request."""
    limit = str(int(request["memory_limit_MB"]) * 2**20)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CONFINED, limit, request["code"]],
            input=request.get("stdin") or "",
            capture_output=True,
            text=True,
            timeout=float(request["run_timeout"]),
        )
    except subprocess.TimeoutExpired:
        run = {"status": "TimeLimitExceeded", "execution_time": time.monotonic() - start, "return_code": None}
        return {
            "status": "Failed",
            "message": "",
            "compile_result": None,
            "run_result": {**run, "stdout": "", "stderr": ""},
        }
    run = {
        "status": "Finished",
        "execution_time": time.monotonic() - start,
        "return_code": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }
    status = "Success" if done.returncode == 0 else "Failed"
    return {"status": status, "message": "", "compile_result": None, "run_result": run, "files": {}}


class FusionServer(ThreadingHTTPServer):
    """The server on a free port of 127.0.0.1. ``failures`` makes the next requests answer HTTP 500; ``requests``
    (what was posted), ``in_flight`` and ``most_in_flight`` (programs running at once) count what it saw;
    ``log`` (a path) gets each request as a JSON line."""

    daemon_threads = True

    def __init__(self, log: Path | None = None) -> None:
        super().__init__(("127.0.0.1", 0), FusionHandler)
        self.lock = threading.Lock()
        self.log = log
        self.failures = 0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    @property
    def url(self) -> str:
        """The run_code endpoint."""
        return f"http://127.0.0.1:{self.server_address[1]}/run_code"

    def start(self) -> FusionServer:
        """Serve in a daemon thread."""
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


class FusionHandler(BaseHTTPRequestHandler):
    """One request: HTTP 404 off ``/run_code``, 500 while ``failures`` last, else the program's run."""

    server: FusionServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        """Answer a run_code request."""
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(request)
            fail = self.server.failures > 0
            self.server.failures -= fail
        if self.path != "/run_code" or fail:
            self.send_error(404 if self.path != "/run_code" else 500)
            return
        with self.server.lock:  # counted while the program runs: the client holds its slot until it has the answer
            self.server.in_flight += 1
            self.server.most_in_flight = max(self.server.most_in_flight, self.server.in_flight)
            if self.server.log:
                with self.server.log.open("a") as log:
                    log.write(json.dumps({**request, "in_flight": self.server.in_flight}) + "\n")
        try:
            body = json.dumps(run_request(request)).encode()
        finally:
            with self.server.lock:
                self.server.in_flight -= 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


if __name__ == "__main__":
    server = FusionServer(Path(sys.argv[1]))
    print(server.url, flush=True)
    server.serve_forever()
