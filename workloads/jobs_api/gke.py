"""A Ray head's Jobs API on GKE, through the Kubernetes API server's service proxy.

The Jobs API runs arbitrary commands, so on GKE it is never exposed: the head service stays
ClusterIP and requests go `https://<endpoint>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy`
with the operator's token (`gke_access`). Ray's own token (token authentication is on for every
cluster we start) is read from the Secret KubeRay generated and travels in `X-Ray-Authorization`,
the header Ray reads behind proxies: the API server consumes `Authorization`."""

from __future__ import annotations

import base64
import os
from typing import Any

from domain.resources.kuberay import RAY_AUTH_TOKEN_KEY
from workloads.jobs_api.errors import REQUEST_TIMEOUT_SECONDS, ErrorKind, JobsApiError, first_line, kind_of_status
from workloads.jobs_api.gke_access import CaBundle, GkeTarget, bearer_token, kube_configuration, operator_session
from workloads.jobs_api.target import ClusterCheck

# The GKE API, as gcloud reaches it; gcloud's own override variable points both at another
# endpoint (tests point it at a fake one on loopback).
GKE_API_OVERRIDE_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_CONTAINER"
GKE_API_DEFAULT = "https://container.googleapis.com/"
RAY_TOKEN_HEADER = "X-Ray-Authorization"


class GkeHead:
    """A `JobsTarget`: the head service of `target`'s cluster, with the operator's token and the
    cluster's Ray token."""

    def __init__(self, target: GkeTarget):
        self.target = target
        self._ca: CaBundle | None = None

    @property
    def address(self) -> str:
        return self.target.proxy_url

    def describe(self) -> str:
        target = self.target
        return f"service {target.service}:{target.port} in namespace {target.namespace} via {target.endpoint}"

    def cluster_name(self) -> str:
        return f"GKE cluster {self.target.cluster_id or self.target.endpoint}"

    def how_to_reach(self) -> str:
        return (
            "check that the infra stack is up (`pulumi stack output -s <infra stack>`), that "
            "`kubectl get svc -n <namespace>` lists the head service from this machine, and that "
            "your gcloud account may use the cluster"
        )

    def how_to_authorize(self) -> str:
        return (
            "log in again with `gcloud auth login` with an account that may read Secrets and "
            "proxy to Services in the training namespace"
        )

    def headers(self) -> dict[str, str]:
        configuration = kube_configuration(self.target)
        headers = {"Authorization": f"Bearer {bearer_token(configuration)}"}
        ray_token = self._ray_token_from_secret(configuration)
        if ray_token:
            headers[RAY_TOKEN_HEADER] = f"Bearer {ray_token}"
        return headers

    def verify(self) -> str | bool:
        if self._ca is None:
            self._ca = CaBundle(base64.b64decode(self.target.ca_certificate))
        return self._ca.path

    def shares_files(self) -> bool:
        return False  # the run directory is the checkpoint bucket, mounted in the cluster's pods

    def close(self) -> None:
        if self._ca is not None:
            self._ca.close()
            self._ca = None

    def _ray_token_from_secret(self, configuration: Any) -> str | None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        namespace, secret_name = self.target.namespace, self.target.auth_secret
        if secret_name is None:
            return None
        what = f"reading the Ray token from Secret {namespace}/{secret_name}"
        try:
            with client.ApiClient(configuration) as api_client:
                secret = client.CoreV1Api(api_client).read_namespaced_secret(
                    secret_name, namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS
                )
        except ApiException as error:
            if not error.status:  # the client's own failure before any answer (status 0): TLS
                raise JobsApiError(ErrorKind.UNREACHABLE, f"{what} failed: {first_line(error)}") from None
            # No Secret: the RayCluster is not (or no longer) there.
            kind = ErrorKind.UNREACHABLE if error.status == 404 else kind_of_status(error.status)
            raise JobsApiError(kind, f"{what} failed: HTTP {error.status}", error.status) from None
        except (HTTPError, OSError) as error:
            raise JobsApiError(ErrorKind.UNREACHABLE, f"{what} failed: {first_line(error)}") from None
        encoded = (secret.data or {}).get(RAY_AUTH_TOKEN_KEY)
        if not encoded:
            raise JobsApiError(ErrorKind.UNAUTHORIZED, f"{what}: the Secret has no {RAY_AUTH_TOKEN_KEY} key")
        return base64.b64decode(encoded).decode().strip()

    def cluster_check(self) -> ClusterCheck:
        """The GKE API is asked for the cluster; only its 404 counts."""
        cluster_id = self.target.cluster_id
        if cluster_id is None:
            return ClusterCheck(
                False, "the stack does not record the GKE cluster's id (re-run `pulumi up` on the infra stack)"
            )
        try:
            session = operator_session(self.target)
        except JobsApiError as error:
            return ClusterCheck(False, f"the GKE API could not be asked: {error}")
        base = os.environ.get(GKE_API_OVERRIDE_ENV) or GKE_API_DEFAULT
        with session:
            try:
                response = session.get(f"{base.rstrip('/')}/v1/{cluster_id}", timeout=REQUEST_TIMEOUT_SECONDS)
            except OSError as error:
                return ClusterCheck(False, f"the GKE API did not answer ({first_line(error)})")
        if response.status_code == 404:
            return ClusterCheck(True, f"the GKE API says cluster {cluster_id} no longer exists")
        if response.status_code == 200:
            status = response.json().get("status", "unknown")
            return ClusterCheck(False, f"GKE cluster {cluster_id} still exists (status {status})")
        return ClusterCheck(False, f"the GKE API answered HTTP {response.status_code} for {cluster_id}")
