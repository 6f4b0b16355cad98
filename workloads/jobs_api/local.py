"""A Ray head's Jobs API reached directly at its dashboard URL (a head on this machine, or any
address the operator gives). Its Ray token is found the way Ray finds it (`RAY_AUTH_TOKEN`,
`RAY_AUTH_TOKEN_PATH`, `~/.ray/auth_token`) and sent only to a server that has answered as a Ray
dashboard asking for one."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import requests

from workloads.jobs_api.errors import REQUEST_TIMEOUT_SECONDS, first_line
from workloads.jobs_api.target import ClusterCheck

# Answered without a token. Until a server has answered it, it is not known to be Ray, and no
# token found in the environment is sent to it.
AUTHENTICATION_MODE_PATH = "/api/authentication_mode"


def local_ray_token() -> str | None:
    """The Ray token for a head reached directly, found where Ray itself looks for it."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    candidate = Path(path) if path else Path.home() / ".ray" / "auth_token"
    try:
        token = candidate.read_text().strip()
    except OSError:
        return None
    return token or None


def authentication_mode_of(response: requests.Response) -> str | None:
    """The mode a Ray dashboard's answer to AUTHENTICATION_MODE_PATH says; None for any other."""
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    mode = body.get("authentication_mode") if isinstance(body, dict) else None
    return mode if isinstance(mode, str) else None


def _asks_for_a_token(address: str) -> bool:
    """Whether the server at `address` has answered as a Ray dashboard that wants a token."""
    try:
        response = requests.get(f"{address.rstrip('/')}{AUTHENTICATION_MODE_PATH}", timeout=REQUEST_TIMEOUT_SECONDS)
    except requests.RequestException:
        return False  # the call that follows meets the same silence and says so
    return authentication_mode_of(response) == "token"


def _is_loopback(address: str) -> bool:
    host = urlparse(address).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LocalHead:
    """A `JobsTarget`: the dashboard at `address`, with Ray's own token if it asks for one."""

    def __init__(self, address: str):
        self._address = address.rstrip("/")

    @property
    def address(self) -> str:
        return self._address

    def describe(self) -> str:
        return self.address

    def cluster_name(self) -> str:
        return f"the Ray head at {self.address}"

    def how_to_reach(self) -> str:
        return (
            "start the head again (`python -m workloads.smoke` starts one for you) or set "
            "`address` to a reachable Ray dashboard URL"
        )

    def how_to_authorize(self) -> str:
        return (
            "give the head's Ray token the way Ray reads it (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
        )

    def headers(self) -> dict[str, str]:
        token = local_ray_token() if _asks_for_a_token(self.address) else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def verify(self) -> str | bool:
        return True

    def cluster_check(self) -> ClusterCheck:
        """The heads this project starts (and `ray start --head --block`) take every job process
        down with them, so a loopback port that refuses connections is a head that is gone, with
        its jobs. Anything else is not proof."""
        if not _is_loopback(self.address):
            return ClusterCheck(False, f"{self.address} is not on this machine, so its silence proves nothing")
        url = urlparse(self.address)
        try:
            socket.create_connection((url.hostname, url.port or 80), timeout=5).close()
        except ConnectionRefusedError:
            return ClusterCheck(True, f"nothing listens at {self.address} any more: the local head is gone")
        except OSError as error:
            return ClusterCheck(False, f"{self.address} did not answer ({first_line(error)})")
        # Something accepts connections: whether it answers HTTP is the rest of the evidence.
        try:
            requests.get(f"{self.address}/api/version", timeout=5)
        except OSError as error:
            return ClusterCheck(False, f"{self.address} did not answer ({first_line(error)})")
        return ClusterCheck(False, f"a server still answers at {self.address}")

    def shares_files(self) -> bool:
        # A head on this machine runs its jobs here; a head elsewhere keeps its runs there.
        return _is_loopback(self.address)

    def close(self) -> None:
        pass  # nothing held
