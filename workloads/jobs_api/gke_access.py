"""Reaching a GKE cluster as the operator, like kubectl: the exec-form kubeconfig the infra stack
exports (`domain.gcp.kubeconfig`) runs `gke-gcloud-auth-plugin` for a short-lived token of the
operator's own Google login, for the Kubernetes API and (through google-auth) the GKE API. The
cluster's CA is held in memory (see `CaBundle`): no token, credential or CA file is left behind,
and none is ever an input, an output or a log line."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from domain.gcp.kubeconfig import AUTH_PLUGIN, ca_apart, gke_kubeconfig
from workloads.jobs_api.errors import REQUEST_TIMEOUT_SECONDS, ErrorKind, JobsApiError, NoAnswer, first_line, within


@dataclass(frozen=True)
class GkeTarget:
    """Where the head service is, as the infra stack exports it (no secrets)."""

    endpoint: str
    ca_certificate: str  # base64 PEM, as GKE reports it
    namespace: str
    service: str
    port: int
    cluster_id: str | None = None  # projects/P/locations/L/clusters/N: asked when the head is silent
    auth_secret: str | None = None  # the Secret KubeRay keeps the Ray token in (RAY_AUTH_TOKEN_KEY)

    @property
    def server(self) -> str:
        return f"https://{self.endpoint}"

    @property
    def proxy_url(self) -> str:
        return f"{self.server}/api/v1/namespaces/{self.namespace}/services/{self.service}:{self.port}/proxy"

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """The exec-form kubeconfig the infra stack exports as `kubeconfig`, built by the same
        function from the same endpoint and CA (so no job input changes)."""
        return gke_kubeconfig(self.cluster_id or self.endpoint, self.endpoint, self.ca_certificate)

    @classmethod
    def from_inputs(cls, values: Mapping[str, Any]) -> GkeTarget:
        return cls(
            endpoint=str(values["endpoint"]),
            ca_certificate=str(values["ca_certificate"]),
            namespace=str(values["namespace"]),
            service=str(values["service"]),
            port=int(values["port"]),
            cluster_id=values.get("cluster_id") or None,
            auth_secret=values.get("auth_secret") or None,
        )

    def as_inputs(self) -> dict[str, Any]:
        """The target as a RayJob's `gke` input holds it (from_inputs' inverse): without the
        fields it has no value for."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def kube_configuration(target: GkeTarget) -> Any:
    """A `kubernetes.client.Configuration` for the target's cluster, with a fresh token: loading
    the exec-form kubeconfig runs gke-gcloud-auth-plugin.

    The CA goes to the client in memory (`ca_cert_data`), not through the loader: kubernetes
    37.0.2's loader writes `certificate-authority-data` to a `mkstemp` file that it removes only
    when the interpreter exits. The loader also swallows a failing plugin (it logs the error and
    loads no token), so a missing token is a CREDENTIALS error here."""
    from kubernetes import client, config

    kubeconfig, ca_pem = ca_apart(target.kubeconfig)
    if shutil.which(AUTH_PLUGIN) is None:
        raise JobsApiError(
            ErrorKind.CREDENTIALS,
            f"{AUTH_PLUGIN} is not installed; install it with `gcloud components install {AUTH_PLUGIN}` "
            "and log in with `gcloud auth login`",
        )
    configuration = client.Configuration()
    try:
        within(
            REQUEST_TIMEOUT_SECONDS,
            AUTH_PLUGIN,
            lambda: config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration),
        )
        loaded = True
    except NoAnswer:
        loaded = False
    except Exception as error:  # whatever the loader raised, in its thread
        raise JobsApiError(ErrorKind.CREDENTIALS, f"the kubeconfig could not be loaded: {first_line(error)}") from None
    if not loaded or not configuration.api_key.get("BearerToken"):
        raise JobsApiError(
            ErrorKind.CREDENTIALS,
            f"{AUTH_PLUGIN} gave no token; your gcloud login may have expired: run `gcloud auth login`",
        )
    configuration.ca_cert_data = ca_pem
    return configuration


def bearer_token(configuration: Any) -> str:
    """The token the exec plugin gave (the loader keeps it as the whole `Bearer <token>` value)."""
    return str(configuration.get_api_key_with_prefix("BearerToken")).removeprefix("Bearer ")


def operator_session(target: GkeTarget) -> Any:
    """A session that sends the operator's Google access token: the one gke-gcloud-auth-plugin
    gives for the cluster (it has no refresh, so a 401 is an answer, not a retry). Raises
    JobsApiError (CREDENTIALS) without one."""
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.credentials import Credentials

    return AuthorizedSession(Credentials(bearer_token(kube_configuration(target))), refresh_status_codes=())


class CaBundle:
    """The cluster's CA as a path, for the Ray SDK and `requests`, which take a CA bundle only as
    a path. Where the OS has anonymous memory files (Linux: memfd_create), the path is
    /proc/self/fd/N of one: no directory lists it and it is gone once closed or the process ends,
    however it ends. Elsewhere it is a file in a private temporary directory, removed by `close()`
    or, for an object never closed, when it is collected or the interpreter exits."""

    def __init__(self, pem: bytes):
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("gke-ca", os.MFD_CLOEXEC)
            self._release: weakref.finalize[..., CaBundle] = weakref.finalize(self, os.close, fd)
            with os.fdopen(os.dup(fd), "wb") as file:
                file.write(pem)
            self.path = f"/proc/self/fd/{fd}"
            if os.path.isfile(self.path):
                return
            self._release()  # no /proc to name it by (some containers): the file below instead
        directory = tempfile.mkdtemp(prefix="gke-ca-")
        self.path = os.path.join(directory, "ca.pem")
        Path(self.path).write_bytes(pem)
        self._release = weakref.finalize(self, _remove_tree, directory)

    def close(self) -> None:
        self._release()


def _remove_tree(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
