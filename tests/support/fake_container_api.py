"""What gcloud itself sends to GKE: the real `gcloud container node-pools create`, pointed at a fake
Container API on 127.0.0.1, with the request body it sends recorded.

gcloud reads `CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER` for the Container API's base URL, takes a
bearer token from `--access-token-file` (no login, no metadata server), and runs from a throwaway
`CLOUDSDK_CONFIG` directory, so the capture needs no account, no network and leaves nothing
behind. The fake answers the create with a finished Operation and the node pool by its name, which
is all gcloud reads before it exits; what matters is the recorded body, the Container API's own
JSON (`nodePool.autoscaling.totalMaxNodeCount`, `nodePool.config.flexStart`, ...).

With `--enable-image-streaming` gcloud first asks the Service Usage API whether the Container File
System API is enabled in the project (and only warns when it is not): the same fake answers that
too (`CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE`), as enabled, and records which services gcloud
asked about.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# gcloud's own start-up (Python, ~1 s here) plus one request and two polls.
GCLOUD_TIMEOUT_SECONDS = 120


def gcloud_path() -> str | None:
    return shutil.which("gcloud")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any  # the decoded JSON body, or None


class FakeContainerApi:
    """A Container API v1 on 127.0.0.1 that accepts node-pool creates and records every request."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                outer.requests.append(Request(self.command, self.path, json.loads(raw) if raw else None))
                payload = json.dumps(outer._answer_for(self.command, self.path)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def _answer_for(method: str, path: str) -> dict[str, Any]:
        route = path.split("?", 1)[0]
        if "/services/" in route:
            # Service Usage's `services.get`: every service asked about is enabled.
            return {"name": route.strip("/").removeprefix("v1/"), "state": "ENABLED"}
        if "/operations/" in route or method == "POST":
            # A create answers with its Operation; gcloud polls it until DONE.
            return {"name": "operation-1", "status": "DONE", "operationType": "CREATE_NODE_POOL"}
        # The node pool gcloud reads back to print it.
        return {"name": route.rstrip("/").rsplit("/", 1)[-1], "status": "RUNNING"}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self) -> FakeContainerApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def gcloud_node_pool_create(
    work_dir: Path, flags: list[str], *, services_checked: list[str] | None = None
) -> dict[str, Any]:
    """Runs `gcloud container node-pools create <flags>` against a fake Container API and returns
    the `nodePool` object of the create request it sent (Container API JSON names). The services
    gcloud asked Service Usage about first are appended to `services_checked`."""
    gcloud = gcloud_path()
    if gcloud is None:
        raise RuntimeError("gcloud is not installed")
    config_dir = work_dir / "gcloud-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    token_file = work_dir / "access-token"
    token_file.write_text("fake-token-for-a-loopback-endpoint\n")
    with FakeContainerApi() as api:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(work_dir),
            "CLOUDSDK_CONFIG": str(config_dir),
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER": api.endpoint,
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_SERVICEUSAGE": api.endpoint,
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
            "CLOUDSDK_CORE_CHECK_GCE_METADATA": "0",
        }
        done = subprocess.run(
            [gcloud, "container", "node-pools", "create", *flags, f"--access-token-file={token_file}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=GCLOUD_TIMEOUT_SECONDS,
            check=False,
        )
        creates = [r for r in api.requests if r.method == "POST" and "/nodePools" in r.path]
        if services_checked is not None:
            services_checked += [
                r.path.split("?", 1)[0].rsplit("/", 1)[-1] for r in api.requests if "/services/" in r.path
            ]
    if len(creates) != 1:
        raise AssertionError(
            f"gcloud sent {len(creates)} node-pool creates (exit {done.returncode}); stderr:\n{done.stderr}"
        )
    body = creates[0].body
    if not isinstance(body, dict) or not isinstance(body.get("nodePool"), dict):
        raise AssertionError(f"gcloud's create request has no nodePool object: {body!r}")
    return body["nodePool"]
