"""`python -m trainer.prepare_data`: a corpus (JSONL or Parquet) into ArrayRecord shards of
MaxText's Example records plus a manifest, read back here through MaxText's own ParseFeatures
(domain/training/dataset_manifest.py, trainer/prepare_data.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from domain.training.dataset_manifest import (
    MANIFEST_NAME,
    DatasetManifest,
    content_hash,
    shard_bounds,
    shard_count,
)
from tests.support.fake_storage import FakeStorage
from tests.support.trainer_env import trainer_python

DOCUMENTS = [f"document {index}: " + "é word " * (index % 7) for index in range(300)]

# Reads every shard back in the trainer environment, as MaxText's Grain pipeline parses a record.
READ_BACK = """
import json, sys
from array_record.python.array_record_module import ArrayRecordReader
from maxtext.input_pipeline.input_pipeline_utils import ParseFeatures
manifest = json.load(open(sys.argv[1] + "/manifest.json"))
parse = ParseFeatures(["text"], tokenize=True)
texts = []
for shard in manifest["shards"]:
    reader = ArrayRecordReader(sys.argv[1] + "/" + shard["file"])
    for record in reader.read_all():
        texts.append(parse.map(record)["text"][0].decode("utf-8"))
    reader.close()
print(json.dumps(texts))
"""

WRITE_PARQUET = """
import json, sys
import pyarrow, pyarrow.parquet
texts = json.load(open(sys.argv[1]))
pyarrow.parquet.write_table(pyarrow.table({"id": list(range(len(texts))), "body": texts}), sys.argv[2], row_group_size=64)
"""


def prepare(*args: str) -> subprocess.CompletedProcess[str]:
    return trainer_python("-m", "trainer.prepare_data", *args)


def jsonl_corpus(path: Path, documents: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({"id": index, field: text}) + "\n" for index, text in enumerate(documents)))
    return path


# ---------------------------------------------------------------- the manifest's arithmetic


def test_shards_are_contiguous_and_even_and_never_more_than_the_documents():
    assert shard_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert shard_count(documents=300, total_bytes=8_000) == 1
    assert shard_count(documents=300, total_bytes=300 * 1024 * 1024) == 3  # one per 128 MiB
    assert shard_count(documents=2, total_bytes=10, requested=5) == 2


def test_the_content_hash_is_the_documents_in_order_and_nothing_else():
    assert content_hash(["ab", "c"]) != content_hash(["a", "bc"])  # lengths are part of it
    assert content_hash(["a", "b"]) != content_hash(["b", "a"])
    assert content_hash(DOCUMENTS) == content_hash(list(DOCUMENTS))


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda data: data.pop("shards"), "the manifest has no 'shards'"),
        (lambda data: data.update(documents="300"), "the manifest's 'documents' is not a int"),
        (lambda data: data.update(format="parquet"), "this product reads 'arrayrecord'"),
        (lambda data: data.update(documents=299), "do not add up to its documents"),
        (
            lambda data: data.update(token_lengths=[[20, 300]]),
            "token_lengths do not add up to its documents and tokens",
        ),
        (lambda data: data.update(token_lengths=[[20, 299], [25, 1]]), "token_lengths do not add up"),
        (lambda data: data.update(token_lengths=[[20, "300"]]), "'token_lengths' is not a list of"),
    ],
)
def test_a_manifest_is_read_once_into_a_record_and_a_wrong_one_says_which_field(change, says):
    good = {
        "format": "arrayrecord",
        "text_feature": "text",
        "documents": 300,
        "bytes": 8000,
        "content_hash": content_hash(DOCUMENTS),
        "shards": [{"file": "data-00000-of-00001.array_record", "documents": 300, "bytes": 8000, "sha256": "x"}],
        "sources": ["corpus.jsonl"],
        "skipped_empty": 0,
        "tokenizer": "llama3",
        "tokens": 6004,
        "token_lengths": [[20, 299], [24, 1]],
    }
    manifest = DatasetManifest.from_json(json.dumps(good))
    assert manifest.token_lengths == ((20, 299), (24, 1))
    assert DatasetManifest.from_json(manifest.to_json()) == manifest
    assert manifest.file_pattern == "data-*-of-00001.array_record"
    change(good)
    with pytest.raises(ValueError, match=says):
        DatasetManifest.from_json(json.dumps(good))


# ---------------------------------------------------------------- the command, in the trainer environment


def test_jsonl_becomes_shards_maxtext_reads_back_in_order(tmp_path):
    corpus = jsonl_corpus(tmp_path / "corpus.jsonl", [*DOCUMENTS[:150], "", *DOCUMENTS[150:]])
    done = prepare(str(corpus), "--output", str(tmp_path / "prepared"), "--shards", "3")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    manifest = DatasetManifest.from_json((tmp_path / "prepared" / MANIFEST_NAME).read_text())
    assert (manifest.documents, manifest.skipped_empty, len(manifest.shards)) == (300, 1, 3)
    assert [shard.documents for shard in manifest.shards] == [100, 100, 100]
    assert manifest.bytes == sum(len(text.encode()) for text in DOCUMENTS) == summary["bytes"]
    assert manifest.content_hash == content_hash(DOCUMENTS) == summary["content_hash"]
    # Each document's tokens, by length, adding up to the corpus's.
    assert manifest.token_lengths is not None and manifest.token_lengths == tuple(sorted(manifest.token_lengths))
    assert sum(count for _, count in manifest.token_lengths) == 300
    assert sum(tokens * count for tokens, count in manifest.token_lengths) == manifest.tokens == summary["tokens"]
    assert summary["pattern"] == str(tmp_path / "prepared" / "data-*-of-00003.array_record")
    # Each shard's size and MD5 (as Cloud Storage reports an object's), to check copies against.
    for shard in manifest.shards:
        data = (tmp_path / "prepared" / shard.file).read_bytes()
        assert (shard.file_bytes, shard.md5) == (len(data), base64.b64encode(hashlib.md5(data).digest()).decode())
    read = trainer_python("-c", READ_BACK, str(tmp_path / "prepared"))
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == DOCUMENTS


def test_parquet_of_the_same_documents_has_the_same_content_hash(tmp_path):
    (tmp_path / "texts.json").write_text(json.dumps(DOCUMENTS))
    written = trainer_python("-c", WRITE_PARQUET, str(tmp_path / "texts.json"), str(tmp_path / "corpus.parquet"))
    assert written.returncode == 0, written.stderr
    done = prepare(str(tmp_path / "*.parquet"), "--output", str(tmp_path / "prepared"), "--text-column", "body")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["content_hash"] == content_hash(DOCUMENTS)
    read = trainer_python("-c", READ_BACK, str(tmp_path / "prepared"))
    assert json.loads(read.stdout) == DOCUMENTS


def test_a_second_run_writes_the_same_shards(tmp_path):
    corpus = jsonl_corpus(tmp_path / "corpus.jsonl", DOCUMENTS)
    manifests = []
    for output in ("first", "second"):
        assert prepare(str(corpus), "--output", str(tmp_path / output), "--shards", "2").returncode == 0
        manifests.append(DatasetManifest.from_json((tmp_path / output / MANIFEST_NAME).read_text()))
    assert manifests[0] == manifests[1]


@pytest.mark.parametrize(
    "setup, args, says",
    [
        ("other-field", ["corpus.jsonl"], "corpus.jsonl:1 has no 'text' field (it has: body, id); name the text"),
        ("corpus", ["missing-*.jsonl"], "missing-*.jsonl' matches no file; give JSONL (.jsonl) or Parquet"),
        (
            "corpus",
            ["https://example.com/corpus.jsonl"],
            "is a URL this command cannot read; give local paths or gs://",
        ),
        ("prepared", ["corpus.jsonl"], "already holds a prepared dataset (manifest.json); give an empty directory"),
    ],
)
def test_a_corpus_it_cannot_prepare_is_refused_naming_what_to_do(tmp_path, setup, args, says):
    jsonl_corpus(tmp_path / "corpus.jsonl", DOCUMENTS[:3], field="body" if setup == "other-field" else "text")
    if setup == "prepared":
        assert prepare(str(tmp_path / "corpus.jsonl"), "--output", str(tmp_path / "out")).returncode == 0
    sources = [arg if "://" in arg else str(tmp_path / arg) for arg in args]
    done = prepare(*sources, "--output", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stdout == ""
    assert says in done.stderr


def test_a_corpus_in_a_bucket_is_listed_and_read_object_by_object(tmp_path):
    """`gs://` sources through Google's client library, pointed at a fake Storage API: the same
    shards and content hash as the same documents read locally."""
    lines = "".join(json.dumps({"text": text}) + "\n" for text in DOCUMENTS)
    half = len(lines.splitlines(keepends=True)) // 2
    parts = ["".join(lines.splitlines(keepends=True)[:half]), "".join(lines.splitlines(keepends=True)[half:])]
    objects = {
        "acme-raw": {
            "web/part-0.jsonl": parts[0].encode(),
            "web/part-1.jsonl": parts[1].encode(),
            "web/sub/part-9.jsonl": b'{"text": "not this one"}\n',  # `*` stays within its folder
        }
    }
    with FakeStorage(objects) as storage:
        done = trainer_python(
            "-m",
            "trainer.prepare_data",
            "gs://acme-raw/web/part-*.jsonl",
            "--output",
            str(tmp_path / "prepared"),
            env={"STORAGE_EMULATOR_HOST": storage.address},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["content_hash"] == content_hash(DOCUMENTS)
        manifest = DatasetManifest.from_json((tmp_path / "prepared" / MANIFEST_NAME).read_text())
        assert manifest.sources == ("gs://acme-raw/web/part-0.jsonl", "gs://acme-raw/web/part-1.jsonl")
        missing = trainer_python(
            "-m",
            "trainer.prepare_data",
            "gs://acme-raw/none-*.jsonl",
            "--output",
            str(tmp_path / "other"),
            env={"STORAGE_EMULATOR_HOST": storage.address},
        )
        assert missing.returncode == 2 and "'gs://acme-raw/none-*.jsonl' matches no file" in missing.stderr
