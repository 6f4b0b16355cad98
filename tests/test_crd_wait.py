"""The wait for the Ray operator's CRD, against a small fake Kubernetes API server on loopback."""

from __future__ import annotations

import base64
import json
import time

import dill
import pytest
from pulumi.dynamic.dynamic import serialize_provider

from infra.crd_wait import RAY_CLUSTER_CRD, CrdEstablishedProvider, CrdNotReadyError, wait_for_crd
from tests.support.fake_jobs_api import FakeHttpServer

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{RAY_CLUSTER_CRD}"


class FakeApiServer(FakeHttpServer):
    """Answers 404 for the CRD `missing_for` times, then `final_status` with the CRD."""

    def __init__(self, missing_for: int = 0, final_status: int = 200, established: bool = True):
        def answer(method: str, path: str) -> tuple[int, bytes]:
            if path != CRD_PATH or len(self.requests) <= missing_for:
                body: dict = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
                return 404, json.dumps(body).encode()
            if final_status != 200:
                return final_status, json.dumps({"kind": "Status", "status": "Failure", "code": final_status}).encode()
            condition = {"type": "Established", "status": "True" if established else "False"}
            crd = {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": RAY_CLUSTER_CRD},
                "spec": {
                    "group": "ray.io",
                    "names": {"kind": "RayCluster", "plural": "rayclusters"},
                    "scope": "Namespaced",
                    "versions": [],
                },
                "status": {"conditions": [condition]},
            }
            return 200, json.dumps(crd).encode()

        super().__init__(answer, content_type="application/json")

    @property
    def kubeconfig(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.address}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }


def test_returns_once_the_crd_appears():
    with FakeApiServer(missing_for=3) as api:
        wait_for_crd(api.kubeconfig, RAY_CLUSTER_CRD, timeout_seconds=10, poll_seconds=0.05)
    assert len(api.requests) == 4


def test_times_out_with_what_to_check_and_to_rerun():
    with FakeApiServer(missing_for=10_000) as api:
        started = time.monotonic()
        with pytest.raises(CrdNotReadyError) as caught:
            wait_for_crd(api.kubeconfig, RAY_CLUSTER_CRD, timeout_seconds=0.5, poll_seconds=0.05)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "rayclusters.ray.io was not Established" in message
    assert "the CRD does not exist yet" in message
    assert "Ray operator add-on" in message and "run `pulumi up` again" in message


def test_an_unestablished_crd_is_not_ready():
    with FakeApiServer(established=False) as api:
        with pytest.raises(CrdNotReadyError, match="exists but is not Established"):
            wait_for_crd(api.kubeconfig, RAY_CLUSTER_CRD, timeout_seconds=0.3, poll_seconds=0.05)


def test_forbidden_fails_at_once_naming_the_permission():
    with FakeApiServer(final_status=403) as api:
        with pytest.raises(CrdNotReadyError, match=r"HTTP 403.*roles/container"):
            wait_for_crd(api.kubeconfig, RAY_CLUSTER_CRD, timeout_seconds=30, poll_seconds=0.05)
    assert len(api.requests) == 1


def test_unreachable_server_times_out_without_hanging():
    config = FakeApiServer().kubeconfig  # never started: nothing listens on that port
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    started = time.monotonic()
    with pytest.raises(CrdNotReadyError, match="did not answer"):
        wait_for_crd(config, RAY_CLUSTER_CRD, timeout_seconds=0.5, poll_seconds=0.05)
    assert time.monotonic() - started < 15


def test_provider_create_waits_and_uses_the_crd_name_as_id(monkeypatch):
    monkeypatch.setattr("infra.crd_wait.POLL_SECONDS", 0.05)
    with FakeApiServer(missing_for=1) as api:
        result = CrdEstablishedProvider().create(
            {"kubeconfig": api.kubeconfig, "crd_name": RAY_CLUSTER_CRD, "timeout_seconds": 10}
        )
    assert result.id == RAY_CLUSTER_CRD


def test_diff_replaces_only_for_a_new_cluster_or_crd():
    provider = CrdEstablishedProvider()
    olds = {"kubeconfig": {"a": 1}, "crd_name": RAY_CLUSTER_CRD, "timeout_seconds": 900}
    assert not provider.diff("id", olds, {**olds, "timeout_seconds": 60}).changes
    assert provider.diff("id", olds, {**olds, "kubeconfig": {"a": 2}}).replaces == ["kubeconfig"]


def test_provider_is_pickled_by_reference():
    """Pulumi stores the provider in state with dill: a reference survives code changes."""
    serialized = base64.b64decode(serialize_provider(CrdEstablishedProvider()))
    assert b"infra.crd_wait" in serialized and b"CrdEstablishedProvider" in serialized
    assert isinstance(dill.loads(serialized), CrdEstablishedProvider)
    assert len(serialized) < 200


def test_the_clusters_ca_never_lands_in_a_file(tmp_path, monkeypatch):
    """The kubernetes client's loader writes `certificate-authority-data` to a temporary file it
    removes only when the process exits: the CA goes to the client in memory instead."""
    import base64
    import ssl
    import tempfile

    from tests.support.fake_jobs_api import self_signed_certificate

    cert, key = self_signed_certificate(tmp_path)
    watched = tmp_path / "tmp"
    watched.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(watched))
    api = FakeApiServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    api.server.socket = context.wrap_socket(api.server.socket, server_side=True)
    with api:
        kubeconfig = api.kubeconfig
        cluster = kubeconfig["clusters"][0]["cluster"]
        cluster["server"] = cluster["server"].replace("http://", "https://")
        cluster["certificate-authority-data"] = base64.b64encode(cert.read_bytes()).decode()
        wait_for_crd(kubeconfig, RAY_CLUSTER_CRD, timeout_seconds=10, poll_seconds=0.05)
    assert list(watched.iterdir()) == []
    assert "certificate-authority-data" in cluster  # the caller's kubeconfig is left as it was


def test_ca_apart_takes_the_ca_out_of_a_copy():
    from domain.gcp.kubeconfig import ca_apart, gke_kubeconfig

    original = gke_kubeconfig("c", "10.0.0.1", "LS0tQ0EtLS0=")  # base64 of "---CA---"
    stripped, ca = ca_apart(original)
    assert ca == "---CA---" and "certificate-authority-data" not in stripped["clusters"][0]["cluster"]
    assert original["clusters"][0]["cluster"]["certificate-authority-data"] == "LS0tQ0EtLS0="
    assert ca_apart(stripped) == (stripped, None)
