"""The GKE path to the Jobs API, end to end on loopback: a fake Kubernetes API server (HTTPS with
its own CA, bearer-token auth, the service-proxy URL scheme that consumes `Authorization`, and the
Secret KubeRay keeps the Ray token in) in front of a real Ray head with token authentication (the
slow tests) or a fake one, a fake GKE API for "is the cluster gone?", and a fake
gke-gcloud-auth-plugin on PATH."""

from __future__ import annotations

import base64
import gc
import json
import os
import stat
import tempfile
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from domain.training.run_estimate import RunEstimate
from domain.training.run_scalars import LOSS, MFU, PREDICTED_STEP_SECONDS, Scalar
from tests.support.fake_jobs_api import FakeApiServer, FakeHttpServer, self_signed_certificate
from tests.support.fake_storage import FakeStorage
from tests.support.pages import page_keys
from workloads.bucket_files import STORAGE_API_OVERRIDE_ENV
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import ErrorKind, JobsApiError
from workloads.jobs_api.gke import GKE_API_OVERRIDE_ENV
from workloads.jobs_api.gke_access import GkeTarget
from workloads.ray_job import RayJobGuardProvider, RayJobProvider, report
from workloads.ray_job import wait as job_wait
from workloads.ray_job.bucket_scalars import BucketScalars
from workloads.ray_job.record import CheckpointBucket, RayJobError

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

slow = pytest.mark.slow
TOKEN = "fake-access-token"
AUTH_SECRET = "maxtext-tpu-cluster"
CLUSTER_ID = "projects/p/locations/us-east5-b/clusters/maxtext-tpu"
STEP = "completed step: 0, seconds: 0.1, TFLOP/s/device: 1.0, Tokens/s/device: 10.0, total_weights: 64, loss: 2.5"


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
        cert,
        key,
        "training",
        "maxtext-tpu-cluster-head-svc",
        local_ray_head.dashboard_port,
        ray_token,
        token=TOKEN,
        auth_secret=AUTH_SECRET,
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


# The checkpoint bucket behind the workers' /data (a folder of it, as checkpointBucketUrl may name).
CHECKPOINT_BUCKET = {"mount": "/data", "url": "gs://acme-ckpt/runs"}
JOB_LOG_OBJECTS = "runs/run-1/tensorboard/job-log/"


@pytest.fixture
def storage(monkeypatch):
    """The Cloud Storage JSON API, with the (empty) checkpoint bucket."""
    with FakeStorage({"acme-ckpt": {}}) as server:
        monkeypatch.setenv(STORAGE_API_OVERRIDE_ENV, f"{server.address}/storage/v1/")
        yield server


def gke_job(api_server, head_port: int, test: str) -> dict:
    """A one-step GKE job whose run directory is on the checkpoint bucket's mount."""
    return {
        "stack": "gke-test",
        "entrypoint": f"python -c \"print('{STEP}')\"",
        "address": None,
        "gke": gke_target(api_server, head_port),
        "metadata": {"test": f"{test}-{id(api_server)}"},
        "timeout_seconds": 120,
        "total_steps": 1,
        "checkpoint_dir": "/data/run-1",
        "checkpoint_bucket": CHECKPOINT_BUCKET,
        # Step 0 took 0.1 s at 1 TFLOP/s per device: 0.25 s predicted, 4 TFLOP/s peak.
        "estimate": RunEstimate(step_seconds=0.25, peak_tflops_per_chip=4.0).to_props(),
    }


@slow
def test_a_job_runs_through_the_api_server_proxy(
    api_server, local_ray_head, auth_plugin, storage, monkeypatch, capsys, tmp_path
):
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.2)
    before = ca_files()
    props = gke_job(api_server, local_ray_head.dashboard_port, "runs")
    result = RayJobProvider().create(props)
    assert result.outs["status"] == "SUCCEEDED" and result.outs["final_loss"] == 2.5
    assert result.outs["dashboard_url"] is None  # nothing public to point at
    assert result.outs["tensorboard_dir"] == "/data/run-1/tensorboard"  # where MaxText on TPU writes
    # Its checkpoints are the cluster's: its page is written on the machine that ran pulumi up.
    assert result.outs["report_path"] == str(report.RUN_PAGES / f"{result.id}.html")
    assert page_keys(Path(result.outs["report_path"]))[0]["final_loss"] == "2.5"
    assert set(api_server.seen_tokens) == {f"Bearer {TOKEN}"}
    # The Ray token, read from the Secret, reached the head in the header Ray reads behind proxies.
    assert {h.get("X-Ray-Authorization") for h in api_server.forwarded_headers} == {f"Bearer {api_server.ray_token}"}
    err = capsys.readouterr().err
    for secret in (TOKEN, api_server.ray_token):  # neither token reaches state or the log lines
        assert secret not in json.dumps(result.outs) and secret not in err
    assert ca_files() == before  # the CA file lived only as long as the call
    # The run's scalars, uploaded beside MaxText's logs in the checkpoint bucket, with the
    # operator's token: TensorBoard's own reader lists them.
    [(name, content)] = storage.objects["acme-ckpt"].items()
    assert name.startswith(f"{JOB_LOG_OBJECTS}events.out.tfevents.")
    assert [h["authorization"] for h in storage.headers] == [f"Bearer {TOKEN}"]
    (tmp_path / "job-log").mkdir()
    (tmp_path / "job-log" / name.rsplit("/", 1)[1]).write_bytes(content)
    events = EventAccumulator(str(tmp_path / "job-log"))
    events.Reload()
    assert {LOSS, PREDICTED_STEP_SECONDS, MFU} <= set(events.Tags()["scalars"])
    assert [(event.step, event.value) for event in events.Scalars(LOSS)] == [(0, 2.5)]
    assert [(event.step, event.value) for event in events.Scalars(MFU)] == [(0, 0.25)]
    assert "warning" not in err


@slow
def test_a_refused_upload_of_the_scalars_is_a_warning(api_server, local_ray_head, auth_plugin, storage, capsys):
    storage.refuse = 403
    result = RayJobProvider().create(gke_job(api_server, local_ray_head.dashboard_port, "refused"))
    assert result.outs["status"] == "SUCCEEDED" and result.outs["final_loss"] == 2.5
    assert result.outs["tensorboard_dir"] == "/data/run-1/tensorboard"  # MaxText's logs are still there
    err = capsys.readouterr().err
    [warning] = [line for line in err.splitlines() if "warning:" in line]
    assert "the run's TensorBoard scalars could not be uploaded to gs://acme-ckpt/runs/run-1/tensorboard/job-log" in (
        warning
    )
    assert "HTTP 403" in warning and "caller lacks storage.objects.create" in warning
    assert storage.objects["acme-ckpt"] == {}


@slow
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


@slow
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


@slow
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


@slow
def test_a_missing_service_is_not_a_missing_job(api_server, local_ray_head, auth_plugin):
    target = {**gke_target(api_server, local_ray_head.dashboard_port), "service": "no-such-svc"}
    with JobsApi(gke=GkeTarget.from_inputs(target)) as api, pytest.raises(JobsApiError) as caught:
        api.call("asking", lambda client: client.get_job_info("x"))
    assert caught.value.kind is ErrorKind.UNREACHABLE


@slow
def test_an_untrusted_certificate_is_refused(api_server, local_ray_head, auth_plugin, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca, _ = self_signed_certificate(tmp_path / "other")
    target = gke_target(api_server, local_ray_head.dashboard_port, base64.b64encode(other_ca.read_bytes()).decode())
    with pytest.raises(JobsApiError, match="cannot reach the Ray Jobs API at service maxtext-tpu-cluster-head-svc"):
        JobsApi(gke=GkeTarget.from_inputs(target)).check_reachable()


@slow
def test_a_missing_auth_plugin_says_how_to_install_it(api_server, local_ray_head, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobsApiError, match="gcloud components install gke-gcloud-auth-plugin") as caught:
        JobsApi(gke=GkeTarget.from_inputs(gke_target(api_server, local_ray_head.dashboard_port))).check_reachable()
    assert caught.value.kind is ErrorKind.CREDENTIALS


@pytest.mark.parametrize(
    "bucket, reason",
    [
        (None, "the infra stack exports no checkpointBucketUrl"),
        (CheckpointBucket(mount="/checkpoints", url="gs://acme-ckpt"), "/data/run-1/tensorboard/job-log is on none"),
    ],
)
def test_scalars_with_no_bucket_behind_their_directory_are_a_warning_not_an_upload(bucket, reason):
    target = GkeTarget(endpoint="203.0.113.10", ca_certificate="", namespace="n", service="s", port=8265)
    scalars = BucketScalars("/data/run-1/tensorboard", bucket, target)
    scalars.add([Scalar(LOSS, 0, 2.5)])
    scalars.finish(None)  # asks nothing: no auth plugin is run, no request sent
    assert not scalars.wrote and scalars.problem is not None
    assert scalars.problem.startswith("the run's TensorBoard scalars were not written to the checkpoint bucket")
    assert reason in scalars.problem


# ---------------------------------------------------------------- the same path with a fake head

RAY_TOKEN = "fake-ray-token"


def fake_ray_head() -> FakeHttpServer:
    """A Ray head with no job: its version, and Ray's 404 for any job."""

    def answer(_method: str, path: str) -> tuple[int, bytes]:
        if path == "/api/version":
            return 200, json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "x"}).encode()
        return 404, b"Job does not exist"

    return FakeHttpServer(answer)


@pytest.fixture
def fake_cluster(tmp_path, monkeypatch):
    """The fake API server in front of a fake head; its target's CA, and a fresh empty temporary
    directory as the one `tempfile` (and every library using it) writes to."""
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    (tmp_path / "certificate").mkdir()
    cert, key = self_signed_certificate(tmp_path / "certificate")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with fake_ray_head() as head:
        port = head.server.server_address[1]
        service = "maxtext-tpu-cluster-head-svc"
        with FakeApiServer(
            cert, key, "training", service, port, RAY_TOKEN, token=TOKEN, auth_secret=AUTH_SECRET
        ) as server:
            server.ca = base64.b64encode(cert.read_bytes()).decode()
            server.head = head
            server.scratch = scratch
            server.target = gke_target(server, port)
            yield server


def use_the_gke_path_and_fail(target: dict) -> JobsApi:
    """Every GKE request kind (the Secret, the version check, a Ray SDK call, the node list) on one
    JobsApi, ending in an exception, and the object left open."""
    api = JobsApi(gke=GkeTarget.from_inputs(target))
    api.check_reachable()
    with pytest.raises(JobsApiError) as caught:
        api.call("reading RayJob x", lambda client: client.get_job_info("x"))
    assert caught.value.kind is ErrorKind.NOT_FOUND  # Ray's own 404, through the proxy
    with pytest.raises(JobsApiError):
        api.nodes()  # the fake head has no state API: 404
    return api


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the CA is a memory file only where the OS has them")
def test_the_gke_path_never_writes_a_ca_or_token_file(fake_cluster, auth_plugin):
    api = use_the_gke_path_and_fail(fake_cluster.target)
    # The CA was used (a request was verified against it) and nothing is on disk, even before close.
    assert fake_cluster.forwarded_headers and list(fake_cluster.scratch.iterdir()) == []
    del api
    gc.collect()
    assert list(fake_cluster.scratch.iterdir()) == []


def test_without_memory_files_the_ca_file_goes_with_its_object_even_unclosed(fake_cluster, auth_plugin, monkeypatch):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    api = use_the_gke_path_and_fail(fake_cluster.target)
    [directory] = fake_cluster.scratch.iterdir()  # one private directory holds the CA while in use
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert [path.name for path in directory.iterdir()] == ["ca.pem"]
    del api  # never closed
    gc.collect()
    assert list(fake_cluster.scratch.iterdir()) == []
    with JobsApi(gke=GkeTarget.from_inputs(fake_cluster.target)) as api:  # and closed: gone at the end of the block
        api.check_reachable()
    assert list(fake_cluster.scratch.iterdir()) == []


def test_the_tokens_travel_in_the_headers_each_reader_expects(fake_cluster, auth_plugin, monkeypatch):
    with fake_gke_api(exists=True) as gke:
        monkeypatch.setenv(GKE_API_OVERRIDE_ENV, gke.address + "/")
        with JobsApi(gke=GkeTarget.from_inputs(fake_cluster.target)) as api:
            api.check_reachable()
            check = api.cluster_check()
    assert not check.gone and "still exists (status RUNNING)" in check.evidence
    # The API server saw only the operator's token; the head only Ray's (from the Secret).
    assert set(fake_cluster.seen_tokens) == {f"Bearer {TOKEN}"}
    assert {h.get("X-Ray-Authorization") for h in fake_cluster.forwarded_headers} == {f"Bearer {RAY_TOKEN}"}
    assert [h.get("authorization") for h in gke.headers] == [f"Bearer {TOKEN}"]


def test_a_failing_auth_plugin_is_a_credentials_error(fake_cluster, tmp_path, monkeypatch):
    plugin = tmp_path / "expired" / "gke-gcloud-auth-plugin"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\necho 'ERROR: Reauthentication failed.' >&2\nexit 1\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{plugin.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(JobsApiError, match="gcloud auth login") as caught:
        JobsApi(gke=GkeTarget.from_inputs(fake_cluster.target)).check_reachable()
    assert caught.value.kind is ErrorKind.CREDENTIALS
    assert fake_cluster.seen_tokens == []  # nothing was sent without a token


def test_the_api_servers_refusal_is_unauthorized_by_its_status(fake_cluster, tmp_path, monkeypatch):
    plugin = tmp_path / "other" / "gke-gcloud-auth-plugin"
    plugin.parent.mkdir()
    credential = {"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1beta1"}
    credential["status"] = {"token": "someone-elses-token"}
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{plugin.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(JobsApiError, match=f"Secret training/{AUTH_SECRET} failed: HTTP 401") as caught:
        JobsApi(gke=GkeTarget.from_inputs(fake_cluster.target)).check_reachable()
    assert caught.value.kind is ErrorKind.UNAUTHORIZED


def test_a_missing_secret_means_the_cluster_is_not_there(fake_cluster, auth_plugin):
    target = {**fake_cluster.target, "auth_secret": "no-such-secret"}
    with pytest.raises(JobsApiError, match="no-such-secret failed: HTTP 404") as caught:
        JobsApi(gke=GkeTarget.from_inputs(target)).check_reachable()
    assert caught.value.kind is ErrorKind.UNREACHABLE


# ---------------------------------------------------------------- the Ray SDK's error text


@pytest.mark.parametrize(
    "status, body, kind",
    [
        (404, "Job x does not exist", ErrorKind.NOT_FOUND),
        (404, '{"kind": "Status", "apiVersion": "v1", "reason": "NotFound", "code": 404}', ErrorKind.UNREACHABLE),
        (503, "no endpoints available for service", ErrorKind.SERVER_ERROR),
        (400, "bad request", ErrorKind.REJECTED),
    ],
)
def test_the_installed_ray_sdks_error_text_is_read_for_its_status(status, body, kind, monkeypatch):
    """The one parse of text: `ray_sdk_answer`, against the errors the installed SDK raises. A new
    Ray that words them differently fails here; the pin says which version the parse was read on."""
    import ray
    from ray.job_submission import JobSubmissionClient

    from domain.ray.ray_version import RAY_VERSION
    from workloads.jobs_api.errors import classify, ray_sdk_answer

    assert ray.__version__ == RAY_VERSION == "2.60.0", "re-read Ray's dashboard_sdk.py errors for ray_sdk_answer"
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)

    def answer(_method: str, path: str) -> tuple[int, bytes]:
        if path == "/api/version":
            return 200, json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "x"}).encode()
        return status, body.encode()

    with FakeHttpServer(answer) as fake:
        client = JobSubmissionClient(fake.address)
        with pytest.raises(RuntimeError) as caught:
            client.get_job_info("x")
    assert ray_sdk_answer(caught.value) == (kind, status) == classify(caught.value)


def test_the_installed_ray_sdks_failed_version_check_is_no_jobs_api(monkeypatch):
    from ray.job_submission import JobSubmissionClient

    from workloads.jobs_api.errors import ray_sdk_answer

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with FakeHttpServer(lambda _method, _path: (404, b"")) as fake, pytest.raises(RuntimeError) as caught:
        JobSubmissionClient(fake.address)
    assert ray_sdk_answer(caught.value) == (ErrorKind.UNREACHABLE, 404)
    assert ray_sdk_answer(RuntimeError("something else")) is None
