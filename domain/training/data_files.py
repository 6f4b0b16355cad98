"""A job's data files as a view of them shows them: the local filesystem (the local stack before
it submits, the trainer's driver on the cluster before the first step) or the buckets behind the
cluster's mounts (the GKE stack before it submits: workloads/bucket_files.py). What the files must
be is decided in domain/training/dataset.py; this module only looks: the pattern's matches, the
prepared corpus's manifest beside them, and the record of the data an earlier run of the run
name read. Paths are the workers' paths in every view.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from domain.setting import as_boolean
from domain.training.dataset import (
    DATA_RECORD,
    DataRecord,
    Dataset,
    changed_record_problem,
    coverage_problem,
    data_record,
    vocab_problem,
)
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest
from domain.training.job import JobSpec


class FileView(Protocol):
    """The job's files, by the paths its workers open."""

    def count(self, pattern: str) -> int:
        """How many files match `pattern` (a glob: `*` within one path segment)."""
        ...

    def read_text(self, path: str) -> str | None:
        """The file's text; None when there is no such file."""
        ...


class LocalFiles:
    """This machine's filesystem."""

    def count(self, pattern: str) -> int:
        return len(glob.glob(pattern))

    def read_text(self, path: str) -> str | None:
        return Path(path).read_text() if Path(path).is_file() else None


@dataclass(frozen=True)
class DataCheck:
    problems: list[str]
    record: DataRecord | None  # what this run reads, to keep beside its checkpoints
    manifest: DatasetManifest | None
    files: int


def _manifest(files: FileView, pattern: str) -> tuple[DatasetManifest | None, str | None]:
    path = str(PurePosixPath(pattern).parent / MANIFEST_NAME)
    try:
        text = files.read_text(path)
        return (DatasetManifest.from_json(text), None) if text is not None else (None, None)
    except (OSError, ValueError) as error:
        return None, f"the manifest {path} beside datasetFiles cannot be read ({error}); prepare the corpus again"


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
    manifest, matched = None, 0
    for what, pattern in (("datasetFiles", dataset.files), ("evalFiles", dataset.eval_files)):
        if pattern is None:
            continue
        matched_here = view.count(pattern)
        if what == "datasetFiles":
            matched = matched_here
        if not matched_here:
            problems.append(
                f"{what} matches no file: {pattern!r} (as the job's workers see it); check the pattern and that the "
                "files were uploaded (gcloud storage ls)"
            )
    if dataset.files is not None and matched:
        manifest, problem = _manifest(view, dataset.files)
        if problem is not None:
            problems.append(problem)
    vocab = tokenizer_vocab or dataset.tokenizer_vocab
    if vocab is not None and model_vocab is not None:
        problem = vocab_problem(dataset.tokenizer, vocab, model_vocab)
        if problem is not None:
            problems.append(problem)
    if manifest is not None and steps is not None and global_batch is not None:
        tokens = manifest.tokens if manifest.tokenizer == dataset.tokenizer else None
        problem = coverage_problem(
            documents=manifest.documents,
            steps=steps,
            global_batch=global_batch,
            max_target_length=int(overrides.get("max_target_length", "0") or 0) or 1,
            tokens=tokens,
            truncation=as_boolean(overrides.get("use_truncation", "true")) is not False,
            epochs=dataset.epochs,
            files=str(dataset.files),
        )
        if problem is not None:
            problems.append(problem)
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
    return DataCheck(problems=problems, record=record, manifest=manifest, files=matched)


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
