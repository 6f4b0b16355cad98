"""A GKE job's data files checked in the buckets behind the cluster's mounts, through a fake Cloud
Storage JSON API on loopback (objects list with matchGlob, media download, a refusal)."""

from __future__ import annotations

import pytest
import requests

from domain.training.data_files import check_data_files
from domain.training.dataset import DATA_RECORD, GRAIN, Dataset
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest
from domain.training.job import resolve_job
from tests.support.corpus import corpus_manifest
from tests.support.fake_storage import FakeStorage
from tests.support.workloads_program import INFRA_OUTPUTS
from workloads import job_resolution
from workloads.bucket_files import STORAGE_API_OVERRIDE_ENV, BucketFiles
from workloads.infra_outputs import read_infra_outputs

MOUNTS = {"/dataset": "gs://acme-corpus/corpora", "/data": "gs://acme-ckpt"}


CORPUS = {
    "acme-corpus": {
        "corpora/c4/data-00000-of-00001.array_record": b"x",
        "corpora/c4/nested/data-00000-of-00001.array_record": b"x",
        f"corpora/c4/{MANIFEST_NAME}": corpus_manifest(400, 640 * 4096, "sha256:c0ffee").to_json().encode(),
    },
    "acme-ckpt": {},
}


@pytest.fixture
def storage(monkeypatch):
    with FakeStorage({bucket: dict(objects) for bucket, objects in CORPUS.items()}) as server:
        monkeypatch.setenv(STORAGE_API_OVERRIDE_ENV, f"{server.address}/storage/v1/")
        yield server


def test_worker_paths_are_listed_and_read_in_the_buckets_behind_their_mounts(storage):
    files = BucketFiles(MOUNTS, requests.Session())
    assert files.url_of("/dataset/c4/data-*.array_record") == "gs://acme-corpus/corpora/c4/data-*.array_record"
    assert files.count("/dataset/c4/data-*.array_record") == 1  # `*` stays within its folder
    assert files.count("/dataset/c4/other-*.array_record") == 0
    assert DatasetManifest.from_json(files.read_text(f"/dataset/c4/{MANIFEST_NAME}")).documents == 400
    assert files.read_text("/data/run-1/data.json") is None
    ((method, asked),) = [request for request in storage.requests if "matchGlob" in request[1]][:1]
    assert method == "GET" and "prefix=corpora%2Fc4%2Fdata-" in asked
    with pytest.raises(OSError, match=r"/etc/passwd is on none of the cluster's bucket mounts"):
        files.read_text("/etc/passwd")


def test_an_api_refusal_is_an_error_naming_the_object_and_the_reason(monkeypatch):
    with FakeStorage({}, refuse=403) as server:
        monkeypatch.setenv(STORAGE_API_OVERRIDE_ENV, f"{server.address}/storage/v1/")
        files = BucketFiles(MOUNTS, requests.Session())
        with pytest.raises(OSError, match=r"HTTP 403 for gs://acme-corpus/corpora/c4/\*: caller lacks storage"):
            files.count("/dataset/c4/*")


def dataset(files: str = "/dataset/c4/data-*.array_record") -> Dataset:
    return Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=0, packing=True, files=files)


def test_the_checks_read_the_buckets_as_the_driver_reads_the_mounts(storage):
    view = BucketFiles(MOUNTS, requests.Session())
    arguments = {
        "run_name": "run-1",
        "run_directory": "/data/run-1",
        "overrides": {"per_device_batch_size": "4", "max_target_length": "4096"},
        "global_batch": 64,
        "model_vocab": 128256,
        "files": view,
    }
    checked = check_data_files(dataset(), steps=1, **arguments)
    assert checked.problems == [] and checked.manifest.content_hash == "sha256:c0ffee"
    short = check_data_files(dataset(), steps=100, **arguments)  # 400 documents: 400 sequences, 6400 needed
    assert "set epochs to at least 16 " in short.problems[0]
    missing = check_data_files(dataset("/dataset/c5/*.array_record"), steps=1, **arguments)
    assert missing.problems[0].startswith("datasetFiles matches no file: '/dataset/c5/*.array_record'")
    earlier = checked.record.to_json().replace('"shuffle_seed": 0', '"shuffle_seed": 9')
    storage.objects["acme-ckpt"][f"run-1/{DATA_RECORD}"] = earlier.encode()
    [changed] = check_data_files(dataset(), steps=1, **arguments).problems
    assert "shuffle_seed: 9 -> 0" in changed


CLUSTER = read_infra_outputs(
    "infra",
    {
        **INFRA_OUTPUTS,
        "checkpointBucketUrl": "gs://acme-ckpt",
        "datasetRoot": "/dataset",
        "datasetUri": "gs://acme-corpus/corpora",
    },
)


def test_a_gke_job_is_refused_before_submission_for_what_the_buckets_hold(storage, monkeypatch):
    monkeypatch.setattr(job_resolution, "operator_session", lambda target: requests.Session())
    job = resolve_job(
        "llama3-8b", run_name="run-1", checkpoint_root="/data", dataset=dataset("/dataset/c5/*.array_record")
    )
    problems, warning = job_resolution.bucket_data_check(job, CLUSTER)
    assert warning is None and problems[0].startswith("datasetFiles matches no file: '/dataset/c5/*.array_record'")
    storage.refuse = 403
    problems, warning = job_resolution.bucket_data_check(job, CLUSTER)
    assert problems == [] and "could not be checked in gs://acme-corpus/corpora" in warning
    assert "HTTP 403" in warning and "the job's driver checks them before the first step" in warning
