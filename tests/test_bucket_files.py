"""A GKE job's data files checked in the buckets behind the cluster's mounts, through a fake Cloud
Storage JSON API on loopback (objects list with matchGlob, media download, a refusal)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, unquote, urlparse

import pytest
import requests

from domain.training.data_files import check_data_files
from domain.training.dataset import DATA_RECORD, GRAIN, Dataset
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest, Shard
from domain.training.job import resolve_job
from tests.support.fake_jobs_api import FakeHttpServer
from workloads import job_inputs
from workloads.bucket_files import STORAGE_API_OVERRIDE_ENV, BucketFiles

MOUNTS = {"/dataset": "gs://acme-corpus/corpora", "/data": "gs://acme-ckpt"}


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The JSON API's matchGlob: `**` crosses folders, `*` and `?` do not."""
    text = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    return re.compile(text)


class FakeStorage(FakeHttpServer):
    def __init__(self, objects: dict[str, dict[str, bytes]], refuse: int | None = None):
        self.objects = objects
        self.refuse = refuse
        super().__init__(self.answer, content_type="application/json")

    def answer(self, method: str, path: str) -> tuple[int, bytes]:
        url = urlparse(path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        if self.refuse:
            return self.refuse, json.dumps(
                {"error": {"code": self.refuse, "message": "caller lacks storage.objects.list"}}
            ).encode()
        listing = re.fullmatch(r"/storage/v1/b/([^/]+)/o", url.path)
        media = re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", url.path)
        if listing:
            bucket = self.objects.get(unquote(listing[1]))
            if bucket is None:
                return 404, b'{"error": {"code": 404, "message": "The specified bucket does not exist."}}'
            match = glob_regex(query["matchGlob"])
            names = [name for name in bucket if name.startswith(query.get("prefix", "")) and match.fullmatch(name)]
            return 200, json.dumps({"items": [{"name": name} for name in names]}).encode()
        if media and query.get("alt") == "media":
            content = self.objects.get(unquote(media[1]), {}).get(unquote(media[2]))
            return (
                (200, content)
                if content is not None
                else (404, b'{"error": {"code": 404, "message": "No such object"}}')
            )
        return 400, b"{}"


def manifest(documents: int = 400, tokens: int = 640 * 4096) -> bytes:
    return (
        DatasetManifest(
            format="arrayrecord",
            text_feature="text",
            documents=documents,
            bytes=1,
            content_hash="sha256:c0ffee",
            shards=(Shard("data-00000-of-00001.array_record", documents, 1, "sha256:0"),),
            sources=("c.jsonl",),
            skipped_empty=0,
            tokenizer="llama3",
            tokens=tokens,
        )
        .to_json()
        .encode()
    )


CORPUS = {
    "acme-corpus": {
        "corpora/c4/data-00000-of-00001.array_record": b"x",
        "corpora/c4/nested/data-00000-of-00001.array_record": b"x",
        f"corpora/c4/{MANIFEST_NAME}": manifest(),
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
    short = check_data_files(dataset(), steps=100, **arguments)  # 640 sequences of 4096, 6400 needed
    assert "set epochs to at least 10 " in short.problems[0]
    missing = check_data_files(dataset("/dataset/c5/*.array_record"), steps=1, **arguments)
    assert missing.problems[0].startswith("datasetFiles matches no file: '/dataset/c5/*.array_record'")
    earlier = checked.record.to_json().replace('"shuffle_seed": 0', '"shuffle_seed": 9')
    storage.objects["acme-ckpt"][f"run-1/{DATA_RECORD}"] = earlier.encode()
    [changed] = check_data_files(dataset(), steps=1, **arguments).problems
    assert "shuffle_seed: 9 -> 0" in changed


CLUSTER = {
    "clusterEndpoint": "203.0.113.10",
    "clusterCaCertificate": "Q0VSVA==",
    "namespace": "training",
    "headServiceName": "head-svc",
    "dashboardPort": 8265,
    "checkpointRoot": "/data",
    "checkpointBucketUrl": "gs://acme-ckpt",
    "datasetRoot": "/dataset",
    "datasetUri": "gs://acme-corpus/corpora",
}


def test_a_gke_job_is_refused_before_submission_for_what_the_buckets_hold(storage, monkeypatch):
    monkeypatch.setattr(job_inputs, "operator_session", lambda target: requests.Session())
    job = resolve_job(
        "llama3-8b", run_name="run-1", checkpoint_root="/data", dataset=dataset("/dataset/c5/*.array_record")
    )
    problems, warning = job_inputs.bucket_data_check(job, CLUSTER)
    assert warning is None and problems[0].startswith("datasetFiles matches no file: '/dataset/c5/*.array_record'")
    storage.refuse = 403
    problems, warning = job_inputs.bucket_data_check(job, CLUSTER)
    assert problems == [] and "could not be checked in gs://acme-corpus/corpora" in warning
    assert "HTTP 403" in warning and "the job's driver checks them before the first step" in warning
