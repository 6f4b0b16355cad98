"""A job's data files as a filesystem shows them: the local stack's before it submits, the trainer's
driver on the cluster before the first step. What the files must be is decided in
domain/training/dataset.py; this module only looks: the pattern's matches, the prepared
corpus's manifest beside them, and the record of the data an earlier run of the run name read.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class DataCheck:
    problems: list[str]
    record: DataRecord | None  # what this run reads, to keep beside its checkpoints
    manifest: DatasetManifest | None
    files: int


def _manifest(pattern: str) -> tuple[DatasetManifest | None, str | None]:
    path = Path(pattern).parent / MANIFEST_NAME
    if not path.is_file():
        return None, None
    try:
        return DatasetManifest.from_json(path.read_text()), None
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
) -> DataCheck:
    """Everything the files can say about this job, before it trains: the pattern matches files,
    the tokenizer fits the model, the corpus covers the run, and the data is the data the run
    read before. `tokenizer_vocab` is the tokenizer's when known (a shipped one's always is)."""
    problems: list[str] = []
    manifest, matched = None, 0
    for what, pattern in (("datasetFiles", dataset.files), ("evalFiles", dataset.eval_files)):
        if pattern is None:
            continue
        matched_here = len(glob.glob(pattern))
        if what == "datasetFiles":
            matched = matched_here
        if not matched_here:
            problems.append(
                f"{what} matches no file: {pattern!r} (as the job's workers see it); check the pattern and that the "
                "files were uploaded (gcloud storage ls)"
            )
    if dataset.files is not None and matched:
        manifest, problem = _manifest(dataset.files)
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
            packing=dataset.packing,
            max_target_length=int(overrides.get("max_target_length", "0") or 0) or 1,
            tokens=tokens,
            epochs=dataset.epochs,
            files=str(dataset.files),
        )
        if problem is not None:
            problems.append(problem)
    record = data_record(dataset, overrides, manifest.content_hash if manifest else None)
    earlier_path = Path(run_directory) / DATA_RECORD
    if earlier_path.is_file():
        try:
            earlier = DataRecord.from_json(earlier_path.read_text())
        except (OSError, ValueError) as error:
            problems.append(f"the record of run {run_name!r}'s data, {earlier_path}, cannot be read ({error})")
        else:
            problem = changed_record_problem(run_name, record, earlier)
            if problem is not None:
                problems.append(problem)
    return DataCheck(problems=problems, record=record, manifest=manifest, files=matched)


def keep_record(run_directory: str, record: DataRecord) -> None:
    """Keeps what this run reads beside its checkpoints, for the next run of its name to check."""
    directory = Path(run_directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DATA_RECORD).write_text(record.to_json())
