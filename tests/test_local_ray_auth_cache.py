"""Ray reads RAY_AUTH_MODE and the token once per process; LocalRayHead.client_environment()
refreshes both caches through Ray's native module, for want of a public way (Ray 2.60). Against a
stand-in dashboard, what a JobSubmissionClient sends once the environment has changed: this fails
if Ray moves or changes what the refresh calls, or if the refresh stops taking effect."""

from __future__ import annotations

import json
import os

import ray
from ray.job_submission import JobSubmissionClient

from tests.support.fake_jobs_api import FakeHttpServer
from workloads.local_ray.auth import refresh_ray_auth_caches, set_environ

AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


def version_answer(method: str, path: str) -> tuple[int, bytes]:
    return 200, json.dumps({"version": "4", "ray_version": ray.__version__, "ray_commit": "0"}).encode()


def test_a_client_sends_the_token_the_environment_names_after_a_refresh(tmp_path):
    tokens = {name: tmp_path / name for name in ("first", "second")}
    for name, path in tokens.items():
        path.write_text(f"{name}-token")
    saved = {name: os.environ.get(name) for name in AUTH_VARIABLES}
    try:
        with FakeHttpServer(version_answer, content_type="application/json") as dashboard:
            for name, path in tokens.items():
                set_environ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path), "RAY_AUTH_TOKEN": None})
                refresh_ray_auth_caches()
                sent = len(dashboard.headers)
                JobSubmissionClient(dashboard.address)
                assert dashboard.headers[sent:], "the client asked nothing"
                # Without the refresh: no token at all (the mode read as disabled), or the first one again.
                assert {h.get("authorization") for h in dashboard.headers[sent:]} == {f"Bearer {name}-token"}
    finally:
        set_environ(saved)
        refresh_ray_auth_caches()
