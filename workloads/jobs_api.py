"""Reaching a Ray cluster's Jobs API: directly (a local head), or on GKE through the Kubernetes
API server's service proxy, authenticated like kubectl with the operator's own Google login.

The Jobs API runs arbitrary commands, so on GKE it is never exposed: the head service stays
ClusterIP and requests go `https://<endpoint>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy`
with a short-lived token from `gke-gcloud-auth-plugin`, checked against the cluster's CA.
Neither the token nor any credential is ever an input, an output or a log line.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping

# Tokens from the auth plugin live an hour: mint a new client well before that.
TOKEN_REFRESH_SECONDS = 30 * 60
REACH_TIMEOUT_SECONDS = 10


class JobsApiUnreachable(RuntimeError):
    pass


@dataclass(frozen=True)
class GkeTarget:
    """Where the head service is, as the infra stack exports it (no secrets)."""

    endpoint: str
    ca_certificate: str  # base64 PEM, as GKE reports it
    namespace: str
    service: str
    port: int

    @property
    def proxy_url(self) -> str:
        return (
            f"https://{self.endpoint}/api/v1/namespaces/{self.namespace}/services/"
            f"{self.service}:{self.port}/proxy"
        )

    @classmethod
    def from_inputs(cls, values: Mapping[str, Any]) -> "GkeTarget":
        return cls(
            endpoint=str(values["endpoint"]),
            ca_certificate=str(values["ca_certificate"]),
            namespace=str(values["namespace"]),
            service=str(values["service"]),
            port=int(values["port"]),
        )


def _gke_token() -> str:
    """A fresh access token from gke-gcloud-auth-plugin (the exec plugin kubectl uses)."""
    try:
        completed = subprocess.run(
            ["gke-gcloud-auth-plugin"], capture_output=True, text=True, timeout=60, check=True
        )
    except FileNotFoundError:
        raise JobsApiUnreachable(
            "gke-gcloud-auth-plugin is not installed; install it with "
            "`gcloud components install gke-gcloud-auth-plugin` and log in with `gcloud auth login`"
        ) from None
    except subprocess.CalledProcessError as error:
        raise JobsApiUnreachable(
            f"gke-gcloud-auth-plugin failed ({error.returncode}); run `gcloud auth login` first"
        ) from None
    return json.loads(completed.stdout)["status"]["token"]


class JobsApi:
    """Hands out a JobSubmissionClient for one target, re-authenticating when due."""

    def __init__(self, address: str | None = None, gke: Mapping[str, Any] | None = None):
        if (address is None) == (gke is None):
            raise ValueError("give exactly one of address (a Ray dashboard URL) or gke (an infra stack's cluster)")
        self.gke = GkeTarget.from_inputs(gke) if gke is not None else None
        self.address = address.rstrip("/") if address else self.gke.proxy_url  # type: ignore[union-attr]
        self._client = None
        self._minted_at = 0.0
        self._ca_file: str | None = None

    def describe(self) -> str:
        if self.gke is None:
            return self.address
        return f"service {self.gke.service}:{self.gke.port} in namespace {self.gke.namespace} via {self.gke.endpoint}"

    def how_to_reach(self) -> str:
        if self.gke is None:
            return (
                "start a local head (`python -m workloads.smoke` starts one for you) or set "
                "`address` to a reachable Ray dashboard URL"
            )
        return (
            "check that the infra stack is up (`pulumi stack output -s <infra stack>`), that "
            "`kubectl get svc -n <namespace>` lists the head service from this machine, and that "
            "your gcloud account may use the cluster"
        )

    def _auth(self) -> tuple[dict[str, str], str | bool]:
        if self.gke is None:
            return {}, True
        if self._ca_file is None:
            with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as ca:
                ca.write(base64.b64decode(self.gke.ca_certificate))
                self._ca_file = ca.name
        return {"Authorization": f"Bearer {_gke_token()}"}, self._ca_file

    def check_reachable(self) -> None:
        """Fails within REACH_TIMEOUT_SECONDS, naming the address, instead of hanging."""
        headers, verify = self._auth()
        request = urllib.request.Request(f"{self.address}/api/version", headers=headers)
        context = None
        if isinstance(verify, str):
            import ssl

            context = ssl.create_default_context(cafile=verify)
        try:
            with urllib.request.urlopen(request, timeout=REACH_TIMEOUT_SECONDS, context=context) as response:
                response.read()
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise JobsApiUnreachable(
                f"cannot reach the Ray Jobs API at {self.describe()} ({reason}); {self.how_to_reach()}"
            ) from None

    def client(self):
        """A JobSubmissionClient, re-created when the GKE token is due for renewal."""
        from ray.job_submission import JobSubmissionClient

        if self._client is None or time.monotonic() - self._minted_at > TOKEN_REFRESH_SECONDS:
            headers, verify = self._auth()
            try:
                self._client = JobSubmissionClient(self.address, headers=headers or None, verify=verify)
            except ConnectionError as error:
                raise JobsApiUnreachable(
                    f"cannot reach the Ray Jobs API at {self.describe()} ({error}); {self.how_to_reach()}"
                ) from None
            self._minted_at = time.monotonic()
        return self._client
