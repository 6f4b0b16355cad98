"""The Jobs API client's parts that need no server: the bound on a call (`errors.within`), the
choice of target, and what each target tells the operator. The paths to real and fake heads are
in test_ray_job.py, test_queue_time.py, test_job_log_robustness.py and test_jobs_api_gke.py."""

from __future__ import annotations

import threading

import pytest

from workloads.jobs_api import JobsApi, target_of
from workloads.jobs_api.errors import ErrorKind, NoAnswer, within
from workloads.jobs_api.gke import GkeHead
from workloads.jobs_api.gke_access import GkeTarget
from workloads.jobs_api.local import LocalHead

GKE = {
    "endpoint": "203.0.113.7",
    "ca_certificate": "",
    "namespace": "training",
    "service": "maxtext-tpu-cluster-head-svc",
    "port": 8265,
    "cluster_id": "projects/p/locations/us-east5-b/clusters/maxtext-tpu",
}


def test_within_gives_the_value_or_the_operations_own_error():
    assert within(60, "test", lambda: 42) == 42

    def times_out() -> None:
        raise TimeoutError("the operation's own timeout")

    # The operation's TimeoutError is its answer (classified as unreachable), not `within`'s silence.
    with pytest.raises(TimeoutError, match="the operation's own timeout"):
        within(60, "test", times_out)


def test_within_gives_up_on_an_operation_that_does_not_finish():
    release = threading.Event()
    try:
        with pytest.raises(NoAnswer, match=r"stuck: no answer within 0\.01 s"):
            within(0.01, "stuck", release.wait)
    finally:
        release.set()  # the abandoned thread ends with its operation


def test_the_target_is_the_one_input_given():
    local = target_of("http://127.0.0.1:8265/", None)
    assert isinstance(local, LocalHead) and local.address == "http://127.0.0.1:8265"
    remote = target_of(None, GkeTarget.from_inputs(GKE))
    assert isinstance(remote, GkeHead)
    assert remote.address == (
        "https://203.0.113.7/api/v1/namespaces/training/services/maxtext-tpu-cluster-head-svc:8265/proxy"
    )
    for address, gke in (("http://127.0.0.1:8265", GkeTarget.from_inputs(GKE)), (None, None)):
        with pytest.raises(ValueError, match="give exactly one of address"):
            JobsApi(address, gke)


def test_each_target_says_where_it_is_and_what_to_fix():
    local, remote = JobsApi("http://127.0.0.1:8265"), JobsApi(gke=GkeTarget.from_inputs(GKE))
    assert local.describe() == "http://127.0.0.1:8265"
    assert local.cluster_name() == "the Ray head at http://127.0.0.1:8265"
    assert remote.describe() == "service maxtext-tpu-cluster-head-svc:8265 in namespace training via 203.0.113.7"
    assert remote.cluster_name() == f"GKE cluster {GKE['cluster_id']}"
    assert "RAY_AUTH_TOKEN" in local.fix_for(ErrorKind.UNAUTHORIZED)
    assert "may read Secrets" in remote.fix_for(ErrorKind.UNAUTHORIZED)
    for api in (local, remote):
        assert "gcloud auth login" in api.fix_for(ErrorKind.CREDENTIALS)
        assert api.fix_for(ErrorKind.UNREACHABLE) == api.how_to_reach()
    assert "python -m workloads.smoke" in local.how_to_reach()
    assert "kubectl get svc" in remote.how_to_reach()
