"""A Ray head faked on 127.0.0.1 whose jobs have already ended with a given log, and the log
lines the job-log tests feed it: a run's events and its MaxText step lines."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from domain.training.job_events import event_line
from tests.support.fake_jobs_api import SHUTDOWN_POLL_SECONDS
from tests.support.ray_job_harness import STEP


def good_events() -> list[str]:
    return [
        event_line("attempt", time=1000.0, workers=1),
        *(event_line("step", time=1010.0 + step, step=step, seconds=0.5) for step in range(3)),
    ]


def steps_log() -> list[str]:
    return [STEP.format(step=step, tokens=100.0 * (step + 1), loss=3.0 - step) for step in range(3)]


class FakeRayHead:
    """A Ray head's Jobs API and log endpoint on 127.0.0.1. Every job submitted to it has already
    ended with `status` and `message`, having printed `log` (bytes); the log endpoint answers
    `lines=N` with the last N lines, as Ray's state API does."""

    def __init__(
        self,
        log: bytes,
        status: str = "SUCCEEDED",
        message: str = "Job finished successfully.",
        agentless_submissions: int = 0,
    ):
        """`agentless_submissions`: how many submissions are answered as Ray answers while the
        head's job agent has not registered (500, "No available agent ..."), before one is taken."""
        self.log, self.status, self.message = log, status, message
        self.agentless_submissions = agentless_submissions
        self.submissions = 0
        self.jobs: dict[str, dict] = {}
        self.log_requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if parts == ["api", "version"]:
                    return self._send(
                        200, json.dumps({"ray_version": "2.60.0", "version": "4", "ray_commit": "x"}).encode()
                    )
                if parts == ["api", "jobs"]:
                    return self._send(200, json.dumps(list(outer.jobs.values())).encode())
                if parts == ["api", "v0", "logs", "file"]:
                    query = {key: values[0] for key, values in parse_qs(url.query).items()}
                    outer.log_requests.append(query)
                    return self._send(200, outer.tail(int(query["lines"])))
                job = outer.jobs.get(parts[2]) if parts[:2] == ["api", "jobs"] and len(parts) == 3 else None
                return self._send(200, json.dumps(job).encode()) if job else self._send(404, b"no such job")

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.submissions += 1
                if outer.submissions <= outer.agentless_submissions:
                    return self._send(500, b"No available agent to submit job, please try again later.")
                job_id = request["submission_id"]
                now = int(time.time() * 1000)
                outer.jobs[job_id] = {
                    "type": "SUBMISSION",
                    "submission_id": job_id,
                    "entrypoint": request["entrypoint"],
                    "status": outer.status,
                    "message": outer.message,
                    "start_time": now - 60_000,
                    "end_time": now,
                    "driver_node_id": "node-1",
                }
                self._send(200, json.dumps({"submission_id": job_id, "job_id": None}).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # serve_forever looks for shutdown() every poll_interval (0.5 s by default): each fake's exit
        # waited that long, in every test that starts one (issue 33).
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
        )

    def tail(self, lines: int) -> bytes:
        if lines < 0:
            return self.log
        kept = self.log.splitlines(keepends=True)[-lines:]
        return b"".join(kept)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeRayHead:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def text(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()
