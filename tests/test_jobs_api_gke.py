"""The GKE path to the Jobs API, end to end on loopback: a fake Kubernetes API server (HTTPS with
its own CA, bearer-token auth, the service-proxy URL scheme that consumes `Authorization`, and the
Secret KubeRay keeps the Ray token in) in front of a real Ray head with token authentication, a
fake GKE API for "is the cluster gone?", and a fake gke-gcloud-auth-plugin on PATH."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import ssl
import stat
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.fake_jobs_api import FakeHttpServer
from workloads import ray_job
from workloads.jobs_api import GKE_API_OVERRIDE_ENV, ErrorKind, JobsApi, JobsApiError
from workloads.ray_job import RayJobError, RayJobGuardProvider, RayJobProvider

pytestmark = pytest.mark.slow
TOKEN = "fake-access-token"
AUTH_SECRET = "maxtext-tpu-cluster"
CLUSTER_ID = "projects/p/locations/us-east5-b/clusters/maxtext-tpu"
STEP = "completed step: 0, seconds: 0.1, TFLOP/s/device: 1.0, Tokens/s/device: 10.0, total_weights: 64, loss: 2.5"


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "apiserver.crt", directory / "apiserver.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class FakeApiServer:
    """Forwards `/api/v1/namespaces/NS/services/SVC:PORT/proxy/...` to the Ray head, as the
    Kubernetes API server does, for requests carrying the expected bearer token."""

    def __init__(self, cert: Path, key: Path, namespace: str, service: str, head_port: int, ray_token: str):
        prefix = f"/api/v1/namespaces/{namespace}/services/{service}:{head_port}/proxy"
        secret_path = f"/api/v1/namespaces/{namespace}/secrets/{AUTH_SECRET}"
        self.seen_tokens: list[str] = []
        self.forwarded_headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                outer.seen_tokens.append(self.headers.get("Authorization", ""))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._reply(401, b'{"kind":"Status","code":401}', "application/json")
                if self.path == secret_path:
                    data = {"auth_token": base64.b64encode(ray_token.encode()).decode()}
                    return self._reply(200, json.dumps({"kind": "Secret", "data": data}).encode(), "application/json")
                if not self.path.startswith(prefix):
                    return self._reply(404, b'{"kind":"Status","code":404}', "application/json")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                # As the API server does: `Authorization` authenticated this request and is
                # dropped; every other header goes on to the service.
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in ("authorization", "host", "content-length")
                }
                outer.forwarded_headers.append(headers)
                request = urllib.request.Request(
                    f"http://127.0.0.1:{head_port}{self.path[len(prefix) :]}",
                    data=body,
                    method=self.command,
                    headers=headers,
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        self._reply(response.status, response.read(), response.headers.get("Content-Type"))
                except urllib.error.HTTPError as error:
                    self._reply(error.code, error.read(), error.headers.get("Content-Type"))

            do_GET = do_POST = do_DELETE = _forward

            def _reply(self, status, payload, content_type):
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/octet-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def auth_plugin(tmp_path, monkeypatch):
    """A stand-in for gke-gcloud-auth-plugin: prints an ExecCredential, as the real one does."""
    plugin = tmp_path / "bin" / "gke-gcloud-auth-plugin"
    plugin.parent.mkdir()
    credential = {
        "kind": "ExecCredential",
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "status": {"token": TOKEN, "expirationTimestamp": "2099-01-01T00:00:00Z"},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{plugin.parent}{os.pathsep}{os.environ['PATH']}")
    return plugin


@pytest.fixture
def api_server(tmp_path, local_ray_head, monkeypatch):
    # On GKE the Ray token comes from the cluster's Secret, not from this machine.
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    cert, key = self_signed_certificate(tmp_path)
    ray_token = local_ray_head.token_path.read_text().strip()
    with FakeApiServer(
        cert, key, "training", "maxtext-tpu-cluster-head-svc", local_ray_head.dashboard_port, ray_token
    ) as server:
        server.ca = base64.b64encode(cert.read_bytes()).decode()
        server.ray_token = ray_token
        yield server


def fake_gke_api(exists: bool) -> FakeHttpServer:
    """container.googleapis.com's clusters.get: 200 while the cluster exists, else 404."""

    def answer(_method: str, path: str) -> tuple[int, bytes]:
        if exists and path == f"/v1/{CLUSTER_ID}":
            return 200, json.dumps({"status": "RUNNING"}).encode()
        return 404, json.dumps({"error": {"code": 404}}).encode()

    return FakeHttpServer(answer, content_type="application/json")


@pytest.fixture(params=[True, False], ids=["cluster-exists", "cluster-gone"])
def gke_api(request, monkeypatch):
    with fake_gke_api(exists=request.param) as fake:
        fake.exists = request.param
        monkeypatch.setenv(GKE_API_OVERRIDE_ENV, fake.address + "/")
        yield fake


def gke_target(server, head_port: int, ca: str | None = None) -> dict:
    return {
        "endpoint": server.endpoint,
        "ca_certificate": ca or server.ca,
        "namespace": "training",
        "service": "maxtext-tpu-cluster-head-svc",
        "port": head_port,
        "cluster_id": CLUSTER_ID,
        "auth_secret": AUTH_SECRET,
    }


def ca_files() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("gke-ca-*.pem"))


def test_a_job_runs_through_the_api_server_proxy(api_server, local_ray_head, auth_plugin, monkeypatch, capsys):
    monkeypatch.setattr(ray_job, "POLL_SECONDS", 0.2)
    before = ca_files()
    props = {
        "stack": "gke-test",
        "entrypoint": f"python -c \"print('{STEP}')\"",
        "address": None,
        "gke": gke_target(api_server, local_ray_head.dashboard_port),
        "metadata": {"test": str(id(api_server))},
        "timeout_seconds": 120,
        "total_steps": 1,
    }
    result = RayJobProvider().create(props)
    assert result.outs["status"] == "SUCCEEDED" and result.outs["final_loss"] == 2.5
    assert result.outs["dashboard_url"] is None  # nothing public to point at
    assert set(api_server.seen_tokens) == {f"Bearer {TOKEN}"}
    # The Ray token, read from the Secret, reached the head in the header Ray reads behind proxies.
    assert {h.get("X-Ray-Authorization") for h in api_server.forwarded_headers} == {f"Bearer {api_server.ray_token}"}
    for secret in (TOKEN, api_server.ray_token):  # neither token reaches state or the log lines
        assert secret not in json.dumps(result.outs) and secret not in capsys.readouterr().err
    assert ca_files() == before  # the CA file lived only as long as the call


def test_destroy_fails_when_the_gcloud_login_has_expired(api_server, local_ray_head, tmp_path, monkeypatch, gke_api):
    plugin = tmp_path / "expired" / "gke-gcloud-auth-plugin"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\necho 'ERROR: Reauthentication failed.' >&2\nexit 1\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{plugin.parent}{os.pathsep}{os.environ['PATH']}")
    target = gke_target(api_server, local_ray_head.dashboard_port)
    for delete in (
        lambda: RayJobProvider().delete("pulumi-gke-1", {"gke": target}),
        lambda: RayJobGuardProvider().delete("g", {"job_id": "pulumi-gke-1", "gke": target}),
    ):
        with pytest.raises(RayJobError) as caught:
            delete()
        message = str(caught.value)
        assert "could not confirm that RayJob pulumi-gke-1" in message and "gcloud auth login" in message
        assert f"GKE cluster {CLUSTER_ID} is not known to be gone" in message


def test_destroy_with_the_api_server_unreachable_asks_gke_whether_the_cluster_is_gone(
    api_server, local_ray_head, auth_plugin, gke_api, capsys
):
    from workloads.local_ray import free_port

    target = {**gke_target(api_server, local_ray_head.dashboard_port), "endpoint": f"127.0.0.1:{free_port()}"}
    if gke_api.exists:
        with pytest.raises(RayJobError, match=f"GKE cluster {CLUSTER_ID} still exists"):
            RayJobProvider().delete("pulumi-gke-1", {"gke": target})
    else:
        RayJobProvider().delete("pulumi-gke-1", {"gke": target})
        assert f"the GKE API says cluster {CLUSTER_ID} no longer exists" in capsys.readouterr().err
    assert gke_api.requests == [("GET", f"/v1/{CLUSTER_ID}")]


def test_destroy_through_the_proxy_stops_a_running_job(api_server, local_ray_head, auth_plugin):
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray = JobSubmissionClient(local_ray_head.address, headers=local_ray_head.auth_headers)
    job_id = ray.submit_job(entrypoint="sleep 300")
    deadline = time.monotonic() + 60
    while ray.get_job_status(job_id) != JobStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    RayJobProvider().delete(job_id, {"gke": gke_target(api_server, local_ray_head.dashboard_port)})
    with pytest.raises(RuntimeError, match="404"):
        ray.get_job_status(job_id)


def test_a_missing_service_is_not_a_missing_job(api_server, local_ray_head, auth_plugin):
    target = {**gke_target(api_server, local_ray_head.dashboard_port), "service": "no-such-svc"}
    with JobsApi(gke=target) as api, pytest.raises(JobsApiError) as caught:
        api.call("asking", lambda client: client.get_job_info("x"))
    assert caught.value.kind is ErrorKind.UNREACHABLE


def test_an_untrusted_certificate_is_refused(api_server, local_ray_head, auth_plugin, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca, _ = self_signed_certificate(tmp_path / "other")
    target = gke_target(api_server, local_ray_head.dashboard_port, base64.b64encode(other_ca.read_bytes()).decode())
    with pytest.raises(JobsApiError, match="cannot reach the Ray Jobs API at service maxtext-tpu-cluster-head-svc"):
        JobsApi(gke=target).check_reachable()


def test_a_missing_auth_plugin_says_how_to_install_it(api_server, local_ray_head, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobsApiError, match="gcloud components install gke-gcloud-auth-plugin") as caught:
        JobsApi(gke=gke_target(api_server, local_ray_head.dashboard_port)).check_reachable()
    assert caught.value.kind is ErrorKind.CREDENTIALS
