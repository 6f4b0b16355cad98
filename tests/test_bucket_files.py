"""A GKE job's data files checked in the buckets behind the cluster's mounts, through a fake Cloud
Storage JSON API on loopback (objects list with matchGlob, media download, a refusal)."""

from __future__ import annotations

import io
import os

import pytest
import requests

from domain.training.data_files import PARQUET_TAIL_BYTES, MatchedFile, check_data_files
from domain.training.dataset import DATA_RECORD, GRAIN, Dataset
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest, md5_base64
from domain.training.job import resolve_job
from tests.support.corpus import corpus_manifest, shard_files
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
    matched = files.matches("/dataset/c4/data-*.array_record")  # `*` stays within its folder
    assert matched == [MatchedFile("/dataset/c4/data-00000-of-00001.array_record", 1)]
    assert files.md5(matched[0]) == md5_base64(b"x")  # as the listing gave it
    assert files.matches("/dataset/c4/other-*.array_record") == []
    assert DatasetManifest.from_json(files.read_text(f"/dataset/c4/{MANIFEST_NAME}")).documents == 400
    assert files.read_text("/data/run-1/data.json") is None
    ((method, asked),) = [request for request in storage.requests if "matchGlob" in request[1]][:1]
    assert "fields=items%28name%2Csize%2Cmd5Hash%29%2CnextPageToken" in asked
    assert method == "GET" and "prefix=corpora%2Fc4%2Fdata-" in asked
    with pytest.raises(OSError, match=r"/etc/passwd is on none of the cluster's bucket mounts"):
        files.read_text("/etc/passwd")


def test_an_api_refusal_is_an_error_naming_the_object_and_the_reason(monkeypatch):
    with FakeStorage({}, refuse=403) as server:
        monkeypatch.setenv(STORAGE_API_OVERRIDE_ENV, f"{server.address}/storage/v1/")
        files = BucketFiles(MOUNTS, requests.Session())
        with pytest.raises(OSError, match=r"HTTP 403 for gs://acme-corpus/corpora/c4/\*: caller lacks storage"):
            files.matches("/dataset/c4/*")


def test_a_file_is_uploaded_as_the_object_behind_its_worker_path(storage):
    files = BucketFiles(MOUNTS, requests.Session())
    files.upload("/dataset/c4/extra/notes.txt", b"hello")
    assert storage.objects["acme-corpus"]["corpora/c4/extra/notes.txt"] == b"hello"
    assert storage.requests[-1] == (
        "POST",
        "/upload/storage/v1/b/acme-corpus/o?uploadType=media&name=corpora%2Fc4%2Fextra%2Fnotes.txt",
    )
    assert files.read_text("/dataset/c4/extra/notes.txt") == "hello"
    storage.refuse = 403
    with pytest.raises(OSError, match=r"HTTP 403 for gs://acme-ckpt/run-1/x: caller lacks storage.objects.create"):
        files.upload("/data/run-1/x", b"")


def dataset(files: str = "/dataset/c4/data-*.array_record") -> Dataset:
    return Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=0, packing=True, files=files)


def problems_in_buckets(objects: dict[str, bytes], files: str, monkeypatch) -> tuple[list[str], list[dict]]:
    """The data check of a one-step job on `files`, with `objects` in the dataset bucket; and the
    headers of each request the Storage API got."""
    with FakeStorage({"acme-corpus": objects, "acme-ckpt": {}}) as server:
        monkeypatch.setenv(STORAGE_API_OVERRIDE_ENV, f"{server.address}/storage/v1/")
        problems = check_data_files(
            dataset(files),
            run_name="run-1",
            run_directory="/data/run-1",
            overrides={"per_device_batch_size": "1", "max_target_length": "64"},
            steps=1,
            global_batch=1,
            model_vocab=128256,
            files=BucketFiles(MOUNTS, requests.Session()),
        ).problems
    return problems, server.headers


def test_the_shards_in_the_bucket_are_checked_against_the_manifest_by_size_and_md5(monkeypatch):
    """Through the Storage API a shard's MD5 comes with the listing, so a shard of the same size
    but other bytes is caught too; a shard not uploaded is named."""
    files = shard_files(3)
    objects = {f"corpora/c4/{name}": data for name, data in files.items()}
    objects[f"corpora/c4/{MANIFEST_NAME}"] = corpus_manifest(60, None, files=files).to_json().encode()
    first_name, second_name, _ = files
    first, second = f"corpora/c4/{first_name}", f"corpora/c4/{second_name}"
    objects[first] = objects[first][:-1] + b"?"  # same size, other bytes
    del objects[second]
    problems, _ = problems_in_buckets(objects, "/dataset/c4/data-*-of-00003.array_record", monkeypatch)
    assert problems[0].startswith(
        "datasetFiles = '/dataset/c4/data-*-of-00003.array_record' matches 2 of the 3 shards its manifest lists "
        "(not matched: data-00001-of-00003.array_record)"
    )
    assert problems[1] == (
        f"shard /dataset/c4/{first_name} has MD5 {md5_base64(objects[first])}, where its manifest says "
        f"{md5_base64(files[first_name])}: it changed since the corpus was prepared; copy it again from the "
        "prepared corpus, or prepare the corpus again"
    )
    assert len(problems) == 2


def test_a_parquet_object_is_read_for_its_columns_from_its_end_only(monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"body": [os.urandom(500).hex() for _ in range(200)]}), sink)  # 200 KB of rows
    assert len(sink.getvalue()) > 3 * PARQUET_TAIL_BYTES
    objects = {"corpora/raw/part-0.parquet": sink.getvalue()}
    problems, headers = problems_in_buckets(objects, "/dataset/raw/*.parquet", monkeypatch)
    ranges = [asked["range"] for asked in headers if "range" in asked]
    assert problems[0].startswith(
        "datasetFiles = '/dataset/raw/*.parquet' matches /dataset/raw/part-0.parquet, which has no 'text' column "
        "(its columns: body)"
    )
    assert ranges == [f"bytes=-{PARQUET_TAIL_BYTES}"]  # the footer, not the 200 KB of rows


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
    problems, warnings = job_resolution.bucket_data_check(job, CLUSTER)
    assert warnings == [] and problems[0].startswith("datasetFiles matches no file: '/dataset/c5/*.array_record'")
    storage.refuse = 403
    problems, [warning] = job_resolution.bucket_data_check(job, CLUSTER)
    assert problems == [] and "could not be checked in gs://acme-corpus/corpora" in warning
    assert "HTTP 403" in warning and "the job's driver checks them before the first step" in warning
