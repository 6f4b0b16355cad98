"""A job's data files as a view of them shows them: the local filesystem (the local stack before
it submits, the trainer's driver on the cluster before the first step) or the buckets behind the
cluster's mounts (the GKE stack before it submits: workloads/bucket_files.py). What the run needs
of the corpus (coverage, vocabulary, the same data as before) is decided in
domain/training/dataset.py; this module looks at the files: the pattern's matches (none empty, each
Parquet file with the text column, exactly the shards a manifest lists), the prepared corpus's
manifest beside them, and the record of the data an earlier run of the run name read. Paths are
the workers' paths in every view.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from domain.setting import as_boolean
from domain.training.dataset import (
    DATA_RECORD,
    MAXTEXT_MAX_TARGET_LENGTH,
    DataRecord,
    Dataset,
    changed_record_problem,
    coverage,
    data_record,
    truncation_warning,
    vocab_problem,
)
from domain.training.dataset_manifest import MANIFEST_NAME, TEXT_FEATURE, DatasetManifest, PassTokens, pass_tokens
from domain.training.job import JobSpec


@dataclass(frozen=True)
class MatchedFile:
    """A file a pattern matches: its path as the workers see it, and its size."""

    path: str
    size: int

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


class FileView(Protocol):
    """The job's files, by the paths its workers open."""

    def matches(self, pattern: str) -> list[MatchedFile]:
        """The files `pattern` matches (a glob: `*` within one path segment), by path."""
        ...

    def md5(self, file: MatchedFile) -> str | None:
        """The file's MD5 as Cloud Storage reports it (base64); None where the view does not know
        it without reading the file."""
        ...

    def read_text(self, path: str) -> str | None:
        """The file's text; None when there is no such file."""
        ...

    def read_tail(self, file: MatchedFile, size: int) -> bytes:
        """The file's last `size` bytes (all of it when it is shorter)."""
        ...

    def record_features(self, file: MatchedFile) -> list[str] | None:
        """The features of an ArrayRecord file's first record, read as MaxText reads it (an
        Example); None where this view cannot read ArrayRecord files. Raises ValueError saying
        why when the file is not one, or its record is not an Example."""
        ...


class LocalFiles:
    """This machine's filesystem."""

    def matches(self, pattern: str) -> list[MatchedFile]:
        return [MatchedFile(path, Path(path).stat().st_size) for path in sorted(glob.glob(pattern))]

    def md5(self, file: MatchedFile) -> str | None:
        # Not read to find out: the trainer's driver checks the files again through the bucket's
        # mount, where hashing a corpus would read all of it. The size stands for it here.
        return None

    def read_text(self, path: str) -> str | None:
        return Path(path).read_text() if Path(path).is_file() else None

    def read_tail(self, file: MatchedFile, size: int) -> bytes:
        with open(file.path, "rb") as opened:
            opened.seek(max(file.size - size, 0))
            return opened.read(size)

    def record_features(self, file: MatchedFile) -> list[str] | None:
        # Only the trainer environment (the job's driver) has ArrayRecord's reader and MaxText's
        # Example; the local stack's program leaves the check to the driver, before any worker.
        try:
            from array_record.python.array_record_module import ArrayRecordReader
            from google.protobuf.message import DecodeError
            from maxtext.input_pipeline.protos import example_pb2
        except ImportError:
            return None
        try:
            reader = ArrayRecordReader(file.path)
            try:
                records = reader.read([0]) if reader.num_records() else []
            finally:
                reader.close()
        except RuntimeError:  # ArrayRecord's reader says only "should be at least 64KB big"
            raise ValueError("it is not an ArrayRecord file") from None
        if not records:
            raise ValueError("it holds no record")
        record = records[0]
        try:
            return list(example_pb2.Example.FromString(record).features.feature)
        except DecodeError:
            raise ValueError("its first record is not an Example (MaxText's record of features)") from None


@dataclass(frozen=True)
class DataCheck:
    problems: list[str]
    record: DataRecord | None  # what this run reads, to keep beside its checkpoints
    manifest: DatasetManifest | None
    files: int
    warnings: list[str] = field(default_factory=list)  # what may go wrong, or is lost, but runs
    # What a pass trains of the corpus's tokens, where its manifest counts each document's.
    pass_tokens: PassTokens | None = None


def _manifest(files: FileView, pattern: str) -> tuple[DatasetManifest | None, str | None]:
    path = str(PurePosixPath(pattern).parent / MANIFEST_NAME)
    try:
        text = files.read_text(path)
        return (DatasetManifest.from_json(text), None) if text is not None else (None, None)
    except (OSError, ValueError) as error:
        return None, f"the manifest {path} beside datasetFiles cannot be read ({error}); prepare the corpus again"


PARQUET_MAGIC = b"PAR1"
# A Parquet file ends with its footer (the schema among it), the footer's length and the magic:
# one read of this many bytes from the end holds most footers whole.
PARQUET_TAIL_BYTES = 64 * 1024


def parquet_columns(view: FileView, file: MatchedFile) -> list[str] | None:
    """The columns of a Parquet file, from its footer alone (the file's last bytes); None when it
    is not a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = view.read_tail(file, min(file.size, PARQUET_TAIL_BYTES))
    if len(tail) < 12 or not tail.endswith(PARQUET_MAGIC):
        return None
    footer = int.from_bytes(tail[-8:-4], "little")
    if footer + 8 > file.size - len(PARQUET_MAGIC):
        return None
    if footer + 8 > len(tail):
        tail = view.read_tail(file, footer + 8)
    try:
        # The footer after a leading magic reads as a file whose row groups are not needed.
        return list(pq.read_schema(pa.BufferReader(PARQUET_MAGIC + tail[-(footer + 8) :])).names)
    except (pa.ArrowException, OSError):
        return None


def format_problems(what: str, pattern: str, matched: list[MatchedFile], view: FileView, column: str) -> list[str]:
    """Each Parquet file a pattern matches is one, with the column MaxText reads the text from."""
    problems = []
    for file in matched:
        if not file.path.endswith(".parquet") or file.size == 0:
            continue
        columns = parquet_columns(view, file)
        if columns is None:
            problems.append(
                f"{what} = {pattern!r} matches {file.path}, which is not a Parquet file (no Parquet footer): MaxText "
                "would fail reading it; remove it, or narrow the pattern to the Parquet files"
            )
        elif column not in columns:
            problems.append(
                f"{what} = {pattern!r} matches {file.path}, which has no {column!r} column (its columns: "
                f"{', '.join(columns) or 'none'}): MaxText reads each document's text from {column!r}; rename the "
                "column, or prepare the files with `python -m trainer.prepare_data FILES --text-column NAME "
                "--output DIR`"
            )
    return problems


def record_problems(what: str, pattern: str, matched: list[MatchedFile], view: FileView, feature: str) -> list[str]:
    """Each ArrayRecord file a pattern matches is one, whose first record has the feature MaxText
    reads the text from (where the view can read records)."""
    return [
        problem
        for file in matched
        if file.path.endswith(".array_record") and file.size > 0
        for problem in _record_problems(what, pattern, file, view, feature)
    ]


def _record_problems(what: str, pattern: str, file: MatchedFile, view: FileView, feature: str) -> list[str]:
    try:
        features = view.record_features(file)
    except (ValueError, OSError) as error:
        return [
            f"{what} = {pattern!r} matches {file.path}, which MaxText cannot read ({error}); remove it, or prepare "
            "the corpus with `python -m trainer.prepare_data FILES --output DIR`"
        ]
    if features is None or feature in features:
        return []
    return [
        f"{what} = {pattern!r} matches {file.path}, whose records have no {feature!r} feature (its first has: "
        f"{', '.join(sorted(features)) or 'none'}): MaxText reads each document's text from {feature!r}; prepare the "
        "corpus with `python -m trainer.prepare_data FILES --text-column NAME --output DIR`"
    ]


def _names(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def shard_problems(pattern: str, manifest: DatasetManifest, matched: list[MatchedFile], view: FileView) -> list[str]:
    """The files `pattern` matches against the shards its manifest lists: every shard and nothing
    else, each of the size and MD5 the manifest recorded (where it did). A corpus with a shard
    missing trains on part of the data while its counts and hash speak for all of it."""
    listed = {shard.file: shard for shard in manifest.shards}
    found = {file.name: file for file in matched}
    missing = sorted(set(listed) - set(found))
    extra = sorted(set(found) - set(listed))
    problems = []
    if missing:
        problems.append(
            f"datasetFiles = {pattern!r} matches {len(set(listed) & set(found))} of the {len(listed)} shards its "
            f"manifest lists (not matched: {_names(missing)}): the job would train on part of the corpus while its "
            f"coverage check and dataset_hash count all of it; put every shard beside the manifest and match them "
            f"all ({manifest.file_pattern}), or prepare the files you have as a corpus of their own "
            "(python -m trainer.prepare_data)"
        )
    if extra:
        problems.append(
            f"datasetFiles = {pattern!r} matches files its manifest does not list ({_names(extra)}): they are not "
            f"part of the prepared corpus; match only its shards ({manifest.file_pattern}), or prepare the corpus "
            "again with them"
        )
    for name in sorted(set(listed) & set(found)):
        shard, file = listed[name], found[name]
        if shard.file_bytes is not None and file.size != shard.file_bytes:
            changed = f"is {file.size} bytes, where its manifest says {shard.file_bytes}"
        elif shard.md5 is not None and (md5 := view.md5(file)) is not None and md5 != shard.md5:
            changed = f"has MD5 {md5}, where its manifest says {shard.md5}"
        else:
            continue
        problems.append(
            f"shard {file.path} {changed}: it changed since the corpus was prepared; copy it again from the "
            "prepared corpus, or prepare the corpus again"
        )
    return problems


def check_data_files(
    dataset: Dataset,
    *,
    run_name: str,
    run_directory: str,
    overrides: dict[str, str],
    steps: int | None,
    global_batch: int | None,
    model_vocab: int | None,
    tokenizer_vocab: int | None = None,
    files: FileView | None = None,
) -> DataCheck:
    """Everything the files can say about this job, before it trains: the pattern matches files,
    the tokenizer fits the model, the corpus covers the run, and the data is the data the run
    read before. `tokenizer_vocab` is the tokenizer's when known (a shipped one's always is).
    `files` is where to look (this machine's filesystem by default); a view that cannot answer
    raises OSError."""
    view = files or LocalFiles()
    problems: list[str] = []
    manifest, matched = None, []
    pattern_matches: list[tuple[str, str, list[MatchedFile]]] = []
    for what, pattern in (("datasetFiles", dataset.files), ("evalFiles", dataset.eval_files)):
        if pattern is None:
            continue
        matched_here = view.matches(pattern)
        if what == "datasetFiles":
            matched = matched_here
        if not matched_here:
            problems.append(
                f"{what} matches no file: {pattern!r} (as the job's workers see it); check the pattern and that the "
                "files were uploaded (gcloud storage ls)"
            )
        problems += [
            f"{what} = {pattern!r} matches an empty file, {file.path} (0 bytes): MaxText cannot read it and the job "
            "would fail at its first batch; remove it, or narrow the pattern to the files that hold the data"
            for file in matched_here
            if file.size == 0
        ]
        problems += format_problems(what, pattern, matched_here, view, TEXT_FEATURE)
        pattern_matches.append((what, pattern, matched_here))
    if dataset.files is not None and matched:
        manifest, problem = _manifest(view, dataset.files)
        if problem is not None:
            problems.append(problem)
    shards_problems = shard_problems(dataset.files or "", manifest, matched, view) if manifest is not None else []
    problems += shards_problems
    if shards_problems:
        manifest = None  # its counts are not of the files the job reads
    # The shards of a prepared corpus are the files it wrote (their sizes, and MD5s where the view
    # has them): its manifest names their feature. Any other file's first record is read for it.
    if manifest is not None and manifest.text_feature != TEXT_FEATURE:
        problems.append(
            f"datasetFiles = {dataset.files!r}: its manifest says the records' text is in {manifest.text_feature!r}, "
            f"and MaxText reads {TEXT_FEATURE!r}; prepare the corpus again with this version's trainer.prepare_data"
        )
    for what, pattern, matched_here in pattern_matches:
        if what != "datasetFiles" or manifest is None:
            problems += record_problems(what, pattern, matched_here, view, TEXT_FEATURE)
    vocab = tokenizer_vocab or dataset.tokenizer_vocab
    if vocab is not None and model_vocab is not None:
        problem = vocab_problem(dataset.tokenizer, vocab, model_vocab)
        if problem is not None:
            problems.append(problem)
    warnings: list[str] = []
    counted = manifest is not None and manifest.tokenizer == dataset.tokenizer
    max_target_length = int(overrides.get("max_target_length", MAXTEXT_MAX_TARGET_LENGTH))
    truncation = as_boolean(overrides.get("use_truncation", "true")) is not False
    lengths = manifest.token_lengths if manifest is not None and counted else None
    per_pass = pass_tokens(lengths, max_target_length=max_target_length, truncation=truncation) if lengths else None
    if per_pass is not None and per_pass.truncated:
        warnings.append(truncation_warning(per_pass, max_target_length, str(dataset.files)))
    if manifest is not None and steps is not None and global_batch is not None:
        problem, warning = coverage(
            documents=manifest.documents,
            steps=steps,
            global_batch=global_batch,
            max_target_length=max_target_length,
            tokens=manifest.tokens if counted else None,
            lengths=lengths,
            truncation=truncation,
            packing=dataset.packing,
            epochs=dataset.epochs,
            files=str(dataset.files),
        )
        problems += [problem] if problem is not None else []
        warnings += [warning] if warning is not None else []
    record = data_record(dataset, overrides, manifest.content_hash if manifest else None)
    earlier_path = str(PurePosixPath(run_directory) / DATA_RECORD)
    earlier_text = view.read_text(earlier_path)
    if earlier_text is not None:
        try:
            earlier = DataRecord.from_json(earlier_text)
        except ValueError as error:
            problems.append(f"the record of run {run_name!r}'s data, {earlier_path}, cannot be read ({error})")
        else:
            problem = changed_record_problem(run_name, record, earlier)
            if problem is not None:
                problems.append(problem)
    return DataCheck(
        problems=problems,
        record=record,
        manifest=manifest,
        files=len(matched),
        warnings=warnings,
        pass_tokens=per_pass,
    )


def check_job_data(
    job: JobSpec,
    *,
    global_batch: int | None,
    model_vocab: int | None,
    tokenizer_vocab: int | None = None,
    files: FileView | None = None,
) -> DataCheck:
    """check_data_files for a resolved job that reads data, its run and MaxText settings its own."""
    assert job.dataset is not None, "a job on synthetic data has no files to check"
    return check_data_files(
        job.dataset,
        run_name=job.run_name,
        run_directory=job.run_directory,
        overrides=dict(job.maxtext_overrides),
        steps=job.total_steps,
        global_batch=global_batch,
        model_vocab=model_vocab,
        tokenizer_vocab=tokenizer_vocab,
        files=files,
    )


def keep_record(run_directory: str, record: DataRecord) -> None:
    """Keeps what this run reads beside its checkpoints, for the next run of its name to check."""
    directory = Path(run_directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DATA_RECORD).write_text(record.to_json())
