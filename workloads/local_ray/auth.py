"""Ray's token authentication from a client's side: this process's RAY_AUTH_* variables and Ray's
caches of them, and whether a dashboard answers a request (with the token, if given)."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Mapping


def dashboard_answers(address: str, timeout: float = 2.0, headers: Mapping[str, str] | None = None) -> bool:
    """Whether the dashboard at `address` answers /api/version with 200. Under token auth that
    path needs the token (without one Ray lets through only the index page, the health checks,
    /api/authentication_mode, /api/authenticate and static files: ray/dashboard/
    http_server_head.py): pass `headers` (LocalRayHead.auth_headers), or a head that wants a
    token answers 401 (403 for a wrong one) and this returns False."""
    request = urllib.request.Request(f"{address}/api/version", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def set_environ(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def refresh_ray_auth_caches() -> None:
    """Makes this process's Ray client see the current RAY_AUTH_* variables. Ray reads them
    once (RayConfig, and AuthenticationTokenLoader caches the token); ray.init() refreshes them
    the same way when it turns token auth on (ray/_private/authentication/
    authentication_token_setup.py). Nothing to do until Ray's native module is loaded.

    Ray has no public way to do this (2.60), so this reaches into its native module;
    tests/test_local_ray_auth_cache.py fails if Ray moves or changes these two."""
    if "ray._raylet" not in sys.modules:
        return
    # ray/_raylet.pyi, Ray's stub for its compiled module, declares only the ID classes.
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
