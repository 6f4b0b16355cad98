"""Waits until the GKE Ray operator add-on has installed the `ray.io/v1` CRDs.

The add-on reconciles asynchronously after the cluster reports ready, so a first `pulumi up`
that creates a RayCluster right away fails with "no matches for kind RayCluster". This dynamic
resource sits between the cluster and the RayCluster and polls the CRD until it is Established,
or fails with a message that says what to check and to re-run.

The provider is stateless and lives in this importable module, so Pulumi pickles it by reference.
It receives a credential-free kubeconfig (exec form); the token is minted at run time.
"""

from __future__ import annotations

import time
from typing import Any

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from domain.gcp.kubeconfig import ca_apart

RAY_CLUSTER_CRD = "rayclusters.ray.io"
DEFAULT_TIMEOUT_SECONDS = 900
POLL_SECONDS = 5.0


class CrdNotReadyError(RuntimeError):
    pass


def _is_established(crd: Any) -> bool:
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def wait_for_crd(
    kubeconfig: dict[str, Any],
    crd_name: str,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> None:
    """Returns once `crd_name` is Established; raises CrdNotReadyError after `timeout_seconds`."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    # The CA in memory: the loader would leave it in a temporary file until the process exits.
    without_ca, ca = ca_apart(kubeconfig)
    configuration = client.Configuration()
    config.load_kube_config_from_dict(without_ca, client_configuration=configuration)
    if ca is not None:
        configuration.ca_cert_data = ca
    api_client = client.ApiClient(configuration)
    api = client.ApiextensionsV1Api(api_client)
    server = api_client.configuration.host
    deadline = time.monotonic() + timeout_seconds
    last_seen = "no answer yet"
    try:
        while True:
            try:
                crd = api.read_custom_resource_definition(crd_name, _request_timeout=10)
                if _is_established(crd):
                    return
                last_seen = "the CRD exists but is not Established yet"
            except ApiException as error:
                if error.status != 404:
                    raise CrdNotReadyError(
                        f"the Kubernetes API at {server} refused to read CRD {crd_name} "
                        f"(HTTP {error.status} {error.reason}); check that your gcloud account "
                        "has roles/container.admin (or container.developer) on the cluster"
                    ) from error
                last_seen = "the CRD does not exist yet"
            except HTTPError as error:
                last_seen = f"the API server did not answer ({error.__class__.__name__})"
            if time.monotonic() >= deadline:
                raise CrdNotReadyError(
                    f"CRD {crd_name} was not Established on {server} within "
                    f"{timeout_seconds:.0f} s ({last_seen}). The GKE Ray operator add-on installs "
                    "it after the cluster is ready: check that the add-on is enabled "
                    "(gcloud container clusters describe CLUSTER --location LOCATION "
                    "--format='value(addonsConfig.rayOperatorConfig)') and run `pulumi up` again."
                )
            time.sleep(poll_seconds)
    finally:
        api_client.close()


class CrdEstablishedProvider(ResourceProvider):
    """Create waits for the CRD; nothing to delete (the add-on owns the CRD)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        wait_for_crd(
            props["kubeconfig"],
            props["crd_name"],
            float(props.get("timeout_seconds") or DEFAULT_TIMEOUT_SECONDS),
            POLL_SECONDS,
        )
        return CreateResult(id_=props["crd_name"], outs=dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # A new cluster (new endpoint) means a new wait; a changed timeout alone does not.
        replaces = [key for key in ("kubeconfig", "crd_name") if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=True)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs=props)


class CrdEstablished(Resource, module="kubernetes", name="CrdEstablished"):
    """`pulumi-python:dynamic/kubernetes:CrdEstablished`: a CRD that other resources wait for."""

    def __init__(
        self,
        name: str,
        kubeconfig: Any,
        crd_name: str = RAY_CLUSTER_CRD,
        timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
        opts: Any = None,
    ):
        super().__init__(
            CrdEstablishedProvider(),
            name,
            {"kubeconfig": kubeconfig, "crd_name": crd_name, "timeout_seconds": timeout_seconds},
            opts,
        )
