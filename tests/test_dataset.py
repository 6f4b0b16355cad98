"""The data settings: what they become in MaxText's keys, and each refusal, before anything is
submitted (the settings, the job's resolution, and the files as the local stack sees them)."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from domain.config.stack_outputs import ClusterOutputs
from domain.config.workload_settings import WorkloadSettingsError
from domain.training.data_files import PARQUET_TAIL_BYTES, check_data_files, keep_record
from domain.training.dataset import (
    DATA_RECORD,
    GRAIN,
    Dataset,
    coverage,
    data_record,
    vocab_problem,
)
from domain.training.dataset_manifest import MANIFEST_NAME, PassTokens, chunks, pass_tokens, token_lengths
from domain.training.job import JobError, resolve_job
from tests.support.cli_settings import workload_settings
from tests.support.corpus import SHARD, corpus_manifest, shard_files
from tests.support.trainer_env import trainer_python
from tests.support.workloads_program import INFRA_OUTPUTS
from workloads import job_resolution
from workloads.infra_outputs import read_infra_outputs

LOCAL = {"address": "http://127.0.0.1:8265", "preset": "tiny-cpu"}


def grain(files: str, **changes) -> Dataset:
    return Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=0, packing=True, files=files, **changes)


def test_the_data_settings_become_maxtexts_grain_keys_and_patterns_under_the_dataset_root():
    settings = workload_settings(
        {**LOCAL, "datasetFiles": "c4/data-*.array_record", "shuffleSeed": "7", "packing": "false", "epochs": "2"}
    )
    dataset = settings.dataset("/dataset")
    assert dataset is not None and dataset.files == "/dataset/c4/data-*.array_record"
    assert dataset.maxtext_overrides() == {
        "dataset_type": "grain",
        "tokenizer_type": "tiktoken",
        "data_shuffle_seed": "7",
        "packing": "false",
        "grain_train_files": "/dataset/c4/data-*.array_record",
        "grain_file_type": "arrayrecord",
        "num_epoch": "2",
    }
    assert dataset.tokenizer_path("/site/maxtext") == "/site/maxtext/assets/tokenizers/tokenizer_llama3.tiktoken"
    assert workload_settings(LOCAL).dataset("/dataset") is None  # synthetic


REFUSED = {
    "unknown-suffix": ({"datasetFiles": "c4/*.jsonl"}, "names neither ArrayRecord (.array_record) nor Parquet"),
    "url": ({"datasetFiles": "gs://b/c4/*.parquet"}, "is a URL; give a pattern relative to the project root"),
    "eval-without-interval": (
        {"datasetFiles": "a/*.parquet", "evalFiles": "e/*.parquet"},
        "set evalFiles and evalInterval together",
    ),
    "unknown-tokenizer": ({"datasetFiles": "a/*.parquet", "tokenizer": "llama9"}, "is neither a tokenizer MaxText"),
    "epochs-without-files": ({"epochs": "2"}, "epochs = 2 does nothing on this stack"),
    "seed-on-synthetic": ({"shuffleSeed": "3"}, "shuffleSeed = 3 does nothing on this stack"),
    "both-sources": (
        {"datasetFiles": "a/*.parquet", "huggingFaceDataset": "allenai/c4"},
        "set one of datasetFiles",
    ),
    "hf-elastic": ({"huggingFaceDataset": "allenai/c4", "elastic": "true"}, "starts again from its beginning"),
    "data-key-in-overrides": (
        {"maxtextOverrides": json.dumps({"grain_train_files": "x"})},
        "maxtextOverrides sets grain_train_files, which the data settings own",
    ),
}


@pytest.mark.parametrize("settings, problem", REFUSED.values(), ids=REFUSED.keys())
def test_each_bad_data_setting_is_refused_naming_it(settings, problem):
    with pytest.raises(WorkloadSettingsError) as refused:
        workload_settings({**LOCAL, **settings}, stack="local")
    assert any(problem in line for line in refused.value.problems), refused.value.problems


def test_a_hugging_face_stream_on_the_elastic_trainer_is_accepted_once_acknowledged():
    settings = workload_settings(
        {**LOCAL, "huggingFaceDataset": "allenai/c4", "elastic": "true", "huggingFaceNotResumable": "true"}
    )
    assert settings.dataset("/x") is not None and not settings.dataset("/x").resumable


def test_an_elastic_grain_job_that_could_shrink_is_refused_naming_the_setting_that_makes_it_safe():
    dataset = grain("/d/*.array_record")
    with pytest.raises(JobError) as refused:
        resolve_job("llama3-8b", run_name="r", checkpoint_root="/ckpt", elastic=True, min_slices=1, dataset=dataset)
    assert "set minSlices = 2" in refused.value.problems[0]
    job = resolve_job("llama3-8b", run_name="r", checkpoint_root="/ckpt", elastic=True, min_slices=2, dataset=dataset)
    assert job.maxtext_overrides["grain_train_files"] == "/d/*.array_record"


def test_a_tokenizer_larger_than_the_model_is_refused():
    assert vocab_problem("llama3", 128256, 128256) is None
    assert "set maxtextOverrides.vocab_size to at least 128256" in vocab_problem("llama3", 128256, 256)


HUNDREDS = ((100, 60),)  # the corpus: 60 documents of 100 tokens


@pytest.mark.parametrize(
    "documents, tokens, lengths, truncation, packing, epochs, steps, batch, verdict",
    [
        # Trimmed and unpacked, a document is one sequence: exact, and a part batch is a step.
        (50, None, None, True, False, None, 10, 5, "fits"),
        (49, None, None, True, False, None, 10, 5, "fits"),  # 9 batches of 5 and one of 4
        (45, None, None, True, False, None, 10, 5, "refused"),
        (45, None, None, True, False, 2, 10, 5, "fits"),
        # Packed: no more sequences than documents, no fewer than the kept tokens fill. The
        # issue's corpus, 50 steps of 1 sequence of 128: refused before as "fill at most 48
        # sequences" while the pipeline gives 60; between 47 and 60 it may run out: a warning.
        (60, 6000, HUNDREDS, True, True, None, 50, 1, "warned"),
        (60, 6000, HUNDREDS, True, True, None, 47, 1, "fits"),
        (60, 6000, HUNDREDS, True, True, None, 61, 1, "refused"),
        (60, None, None, True, True, None, 50, 1, "warned"),  # no token count: at least one
        # Without truncation a document is chunks of max_target_length: exact with each
        # document's tokens (two chunks of 100 tokens here), bounded by documents + tokens / 128
        # without them.
        (60, 6000, HUNDREDS, False, False, None, 60, 1, "fits"),
        (60, 6000, HUNDREDS, False, False, None, 61, 1, "refused"),
        (60, 6000, None, False, False, None, 106, 1, "warned"),  # at most 60 + 46
        (60, 6000, None, False, False, None, 107, 1, "refused"),
        (60, None, None, False, True, None, 10_000, 1, "warned"),  # nothing bounds the chunks
    ],
)
def test_a_corpus_is_refused_only_when_it_cannot_feed_the_run_and_warned_of_when_it_may_not(
    documents, tokens, lengths, truncation, packing, epochs, steps, batch, verdict
):
    problem, warning = coverage(
        documents=documents,
        steps=steps,
        global_batch=batch,
        max_target_length=128,
        tokens=tokens,
        lengths=lengths,
        truncation=truncation,
        packing=packing,
        epochs=epochs,
        files="d/*",
    )
    assert {"fits": (None, None), "refused": (problem, None), "warned": (None, warning)}[verdict] == (problem, warning)
    if problem is not None:
        assert problem.startswith(f"datasetFiles = 'd/*' is too small for the run: its {documents} documents give ")
        sequences = "sequences" if batch > 1 else "sequence"
        assert f"but the run takes {steps} steps of {batch} {sequences}; set epochs to at least " in problem
    if warning is not None:
        assert warning.startswith("datasetFiles = 'd/*' may run out before the run ends: packed into sequences of 128")
        assert "the job saves at the last step the data held and fails saying so" in warning


def test_a_pass_keeps_each_document_up_to_the_sequence_and_cuts_it_without_truncation():
    lengths = token_lengths([100, 300, 129, 128, 100])
    assert lengths == ((100, 2), (128, 1), (129, 1), (300, 1))
    assert pass_tokens(lengths, max_target_length=128, truncation=True) == PassTokens(
        kept=100 + 100 + 128 + 128 + 128, truncated=1 + 172, documents_truncated=2
    )
    assert pass_tokens(lengths, max_target_length=128, truncation=False) == PassTokens(757, 0, 0)
    assert chunks(lengths, 128) == 1 + 1 + 1 + 2 + 3


def test_a_manifest_whose_records_hold_their_text_elsewhere_is_refused(tmp_path):
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / SHARD).write_bytes(b"x")
    (directory / MANIFEST_NAME).write_text(dataclasses.replace(corpus_manifest(3, 300), text_feature="body").to_json())
    [problem] = check(grain(str(directory / SHARD)), tmp_path / "run", steps=1).problems
    assert "its manifest says the records' text is in 'body', and MaxText reads 'text'" in problem


def test_the_tokens_truncation_drops_are_a_warning_naming_the_fix(tmp_path):
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / SHARD).write_bytes(b"x")
    manifest = dataclasses.replace(corpus_manifest(3, 300), token_lengths=((50, 2), (200, 1)))
    (directory / MANIFEST_NAME).write_text(manifest.to_json())
    checked = check(grain(str(directory / SHARD)), tmp_path / "run", steps=1)
    assert checked.problems == [] and checked.pass_tokens == PassTokens(kept=164, truncated=136, documents_truncated=1)
    [warning] = checked.warnings
    assert "1 documents are longer than max_target_length 64" in warning
    assert "each pass trains 164 of the corpus's tokens and drops 136 (45.3%" in warning
    assert "set maxtextOverrides.use_truncation to false (the smoke run's --set use_truncation=false" in warning
    untrimmed = check(
        grain(str(directory / SHARD)),
        tmp_path / "run2",
        steps=1,
        overrides={"max_target_length": "64", "use_truncation": "false"},
    )
    assert untrimmed.warnings == [] and untrimmed.pass_tokens == PassTokens(
        kept=300, truncated=0, documents_truncated=0
    )


def write_corpus(directory, documents=50, tokens=3000):
    directory.mkdir()
    (directory / SHARD).write_bytes(b"x")
    (directory / MANIFEST_NAME).write_text(corpus_manifest(documents, tokens).to_json())


def check(dataset, run_directory, **changes):
    arguments = {
        "run_name": "r",
        "run_directory": str(run_directory),
        "overrides": {"per_device_batch_size": "1", "max_target_length": "64"},
        "steps": 6,
        "global_batch": 1,
        "model_vocab": 128256,
    }
    return check_data_files(dataset, **{**arguments, **changes})


def test_the_files_the_manifest_and_the_runs_earlier_data_are_checked(tmp_path):
    write_corpus(tmp_path / "c")
    dataset = grain(str(tmp_path / "c" / "data-*.array_record"))
    checked = check(dataset, tmp_path / "run")
    assert checked.problems == [] and checked.files == 1 and checked.manifest.content_hash == "sha256:abc"

    missing = check(grain(str(tmp_path / "nowhere" / "*.array_record")), tmp_path / "run")
    assert "datasetFiles matches no file" in missing.problems[0]

    short = check(dataset, tmp_path / "run", steps=100)  # 50 documents: at most 50 sequences
    assert "set epochs to at least 2" in short.problems[0]

    keep_record(str(tmp_path / "run"), checked.record)
    assert (tmp_path / "run" / DATA_RECORD).is_file()
    assert check(dataset, tmp_path / "run").problems == []
    reseeded = Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=1, packing=True, files=dataset.files)
    [changed] = check(reseeded, tmp_path / "run").problems
    assert "shuffle_seed: 0 -> 1" in changed and "start a new run" in changed
    bigger = check(dataset, tmp_path / "run", overrides={"per_device_batch_size": "2", "max_target_length": "64"})
    assert "per_device_batch_size: '1' -> '2'" in bigger.problems[0]


def prepared(directory, count=3, copied=None, documents=60):
    """A corpus of `count` shards and their manifest, with only the shards numbered in `copied`
    (all by default) copied beside the manifest."""
    files = shard_files(count)
    directory.mkdir()
    for index, (name, data) in enumerate(files.items()):
        if copied is None or index in copied:
            (directory / name).write_bytes(data)
    (directory / MANIFEST_NAME).write_text(corpus_manifest(documents, None, files=files).to_json())
    return files


def test_the_files_matched_are_exactly_the_manifests_shards(tmp_path):
    """A shard not copied or not matched trains on part of the corpus while the coverage check
    and dataset_hash speak for all of it: refused, naming the shards (before: trained)."""
    prepared(tmp_path / "c", copied={0, 2})
    two = check(grain(str(tmp_path / "c" / "data-*-of-00003.array_record")), tmp_path / "run")
    assert two.problems[0].startswith(
        f"datasetFiles = '{tmp_path}/c/data-*-of-00003.array_record' matches 2 of the 3 shards its manifest lists "
        "(not matched: data-00001-of-00003.array_record)"
    )
    assert "match them all (data-*-of-00003.array_record)" in two.problems[0]
    assert two.manifest is None and two.record.content_hash is None  # its hash is not of these files
    one = check(grain(str(tmp_path / "c" / "data-00000-of-00003.array_record")), tmp_path / "run")
    assert "matches 1 of the 3 shards" in one.problems[0]
    assert "not matched: data-00001-of-00003.array_record, data-00002-of-00003.array_record)" in one.problems[0]
    whole = tmp_path / "whole"
    prepared(whole)
    assert check(grain(str(whole / "data-*.array_record")), tmp_path / "run2").problems == []


def test_a_file_beside_the_shards_or_a_changed_shard_is_refused(tmp_path):
    files = prepared(tmp_path / "c")
    (tmp_path / "c" / "data-00009-of-00010.array_record").write_bytes(b"another corpus")
    extra = check(grain(str(tmp_path / "c" / "data-*.array_record")), tmp_path / "run")
    assert extra.problems == [
        f"datasetFiles = '{tmp_path}/c/data-*.array_record' matches files its manifest does not list "
        "(data-00009-of-00010.array_record): they are not part of the prepared corpus; match only its shards "
        "(data-*-of-00003.array_record), or prepare the corpus again with them"
    ]
    first = tmp_path / "c" / "data-00000-of-00003.array_record"
    first.write_bytes(files[first.name] + b"!")
    changed = check(grain(str(tmp_path / "c" / "data-*-of-00003.array_record")), tmp_path / "run")
    assert changed.problems == [
        f"shard {first} is {len(files[first.name]) + 1} bytes, where its manifest says {len(files[first.name])}: it "
        "changed since the corpus was prepared; copy it again from the prepared corpus, or prepare the corpus again"
    ]


@pytest.mark.parametrize("empty", ["part-1.parquet", "data-00000-of-00001.array_record"])
def test_an_empty_file_is_refused_naming_it(tmp_path, empty):
    """A 0-byte file failed the job at its first batch, 50 s after submitting, naming no file."""
    (tmp_path / "part-0.parquet").write_bytes(parquet_bytes(text=["a document"]))
    (tmp_path / empty).write_bytes(b"")
    pattern = str(tmp_path / ("*.parquet" if empty.endswith(".parquet") else "*.array_record"))
    problems = check(grain(pattern), tmp_path / "run").problems
    assert problems == [
        f"datasetFiles = {pattern!r} matches an empty file, {tmp_path / empty} (0 bytes): MaxText cannot read it and "
        "the job would fail at its first batch; remove it, or narrow the pattern to the files that hold the data"
    ]


# In the trainer environment, as the job's driver checks the files before any worker starts: an
# ArrayRecord file of Examples with the given feature, a text file named as one, and an
# ArrayRecord file whose records are not Examples; each checked alone, its problems printed.
ARRAY_RECORDS = r"""
import json, sys
from pathlib import Path
from array_record.python.array_record_module import ArrayRecordWriter
from maxtext.input_pipeline.protos import example_pb2
from domain.training.data_files import check_data_files
from domain.training.dataset import GRAIN, Dataset
work = Path(sys.argv[1])
def records(name, records):
    writer = ArrayRecordWriter(str(work / name / "data.array_record"), "group_size:1")
    for record in records:
        writer.write(record)
    writer.close()
def example(feature):
    example = example_pb2.Example()
    example.features.feature[feature].bytes_list.value.append(b"a document")
    return example.SerializeToString()
for name in ("text", "body", "renamed", "not-examples"):
    (work / name).mkdir()
records("text", [example("text")] * 3)
records("body", [example("body")] * 3)
(work / "renamed" / "data.array_record").write_text("a document, not an ArrayRecord file\n" * 100)
records("not-examples", [b"\xff\xff\xff"])
problems = {
    name: check_data_files(
        Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=0, packing=True, files=str(work / name / "*.array_record")),
        run_name="r", run_directory=str(work / "run"), overrides={}, steps=None, global_batch=None, model_vocab=None,
    ).problems
    for name in ("text", "body", "renamed", "not-examples")
}
print(json.dumps(problems))
"""


def test_each_array_record_file_is_read_for_the_text_feature_before_any_worker_starts(tmp_path):
    """An ArrayRecord file without MaxText's `text` feature, or a file that is not one, failed the
    job 50 s after submitting, naming no file, and in ArrayRecord's words ("should be at least
    64KB big", false of 22 KB shards that train); the job's driver reads each file's first record
    before any worker starts (issue 32). The program before submit cannot: ArrayRecord's reader is
    in the trainer environment only."""
    done = trainer_python("-c", ARRAY_RECORDS, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    problems = json.loads(done.stdout.splitlines()[-1])
    assert problems["text"] == []
    [body] = problems["body"]
    assert body == (
        f"datasetFiles = '{tmp_path}/body/*.array_record' matches {tmp_path}/body/data.array_record, whose records "
        "have no 'text' feature (its first has: body): MaxText reads each document's text from 'text'; prepare the "
        "corpus with `python -m trainer.prepare_data FILES --text-column NAME --output DIR`"
    )
    [renamed] = problems["renamed"]
    assert (
        f"matches {tmp_path}/renamed/data.array_record, which MaxText cannot read (it is not an ArrayRecord file)"
        in renamed
    )
    assert "64KB" not in renamed
    [not_examples] = problems["not-examples"]
    assert "its first record is not an Example (MaxText's record of features)" in not_examples
    # Here, without ArrayRecord's reader, the files are left to the driver: nothing is refused.
    assert check(grain(str(tmp_path / "body" / "*.array_record")), tmp_path / "run").problems == []


def parquet_bytes(**columns: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def test_each_parquet_file_is_read_for_the_text_column_before_submit(tmp_path):
    """A Parquet file without MaxText's `text` column, or a file that is not Parquet, failed the
    job 50 s after submitting, naming no file (issue 32); its footer says so before."""
    (tmp_path / "part-0.parquet").write_bytes(parquet_bytes(text=["a document"] * 10))
    assert check(grain(str(tmp_path / "*.parquet")), tmp_path / "run").problems == []
    (tmp_path / "part-1.parquet").write_bytes(parquet_bytes(body=["x"], title=["y"]))
    (tmp_path / "part-2.parquet").write_bytes(b"text,comma,separated\n" * 10)
    pattern = str(tmp_path / "*.parquet")
    assert check(grain(pattern), tmp_path / "run").problems == [
        f"datasetFiles = {pattern!r} matches {tmp_path / 'part-1.parquet'}, which has no 'text' column (its columns: "
        "body, title): MaxText reads each document's text from 'text'; rename the column, or prepare the files with "
        "`python -m trainer.prepare_data FILES --text-column NAME --output DIR`",
        f"datasetFiles = {pattern!r} matches {tmp_path / 'part-2.parquet'}, which is not a Parquet file (no Parquet "
        "footer): MaxText would fail reading it; remove it, or narrow the pattern to the Parquet files",
    ]


def test_a_parquet_footer_longer_than_one_read_is_read_whole(tmp_path):
    wide = parquet_bytes(text=["t"], **{f"column_{index:04d}": ["v"] for index in range(800)})
    (tmp_path / "wide.parquet").write_bytes(wide)
    assert int.from_bytes(wide[-8:-4], "little") > PARQUET_TAIL_BYTES
    assert check(grain(str(tmp_path / "*.parquet")), tmp_path / "run").problems == []


def test_the_data_record_names_what_a_resume_must_keep():
    record = data_record(grain("/d/*.parquet"), {"per_device_batch_size": "4", "max_target_length": "4096"}, "h")
    assert (record.tokenizer, record.shuffle_seed, record.per_device_batch_size, record.content_hash) == (
        "llama3",
        0,
        "4",
        "h",
    )


CLUSTER = {**INFRA_OUTPUTS, "capacity": ["on-demand"]}


def cluster(**outputs: object) -> ClusterOutputs:
    return read_infra_outputs("infra", {**CLUSTER, **outputs})


ON_INFRA = {"infraStack": "organization/maxtext-tpu-infra/dev"}


def test_files_on_gke_need_the_infra_stacks_dataset_bucket():
    settings = workload_settings({**ON_INFRA, "datasetFiles": "c4/data-*.array_record"})
    with pytest.raises(JobError) as refused:
        job_resolution.resolve_for_cluster(settings, cluster())
    assert "mounts no dataset bucket (no datasetRoot output); set datasetBucket" in refused.value.problems[0]


def test_a_hugging_face_stream_on_spot_capacity_needs_the_acknowledgement():
    settings = workload_settings({**ON_INFRA, "huggingFaceDataset": "allenai/c4"})
    with pytest.raises(JobError) as refused:
        job_resolution.resolve_for_cluster(settings, cluster(capacity=["spot", "on-demand"]))
    assert "on the infra stack's spot capacity" in refused.value.problems[0]
    assert "huggingFaceNotResumable true" in refused.value.problems[0]
