"""Fake HTTP services on 127.0.0.1 for the job path: a Ray Jobs API that misbehaves (every
request answered with one fixed status and body: 503, 401, a 500 with a traceback, ...), and
the base they share with the fake GKE API."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TRACEBACK_500 = (
    "Traceback (most recent call last):\n"
    '  File "job_head.py", line 591, in get_job_logs\n'
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 6: invalid start byte\n"
)

# (method, path) -> (status, body)
Answer = Callable[[str, str], tuple[int, bytes]]


class FakeHttpServer:
    """Answers every request with `answer(method, path)` and records what it was asked."""

    def __init__(self, answer: Answer, content_type: str = "text/plain"):
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                outer.requests.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body = answer(self.command, self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeJobsApi(FakeHttpServer):
    def __init__(self, status: int, body: str = ""):
        super().__init__(lambda _method, _path: (status, body.encode()))
