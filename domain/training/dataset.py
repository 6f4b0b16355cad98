"""A job's training data: synthetic (the presets' default), files read by MaxText's Grain
pipeline, or a Hugging Face stream; the tokenizer; and what must stay the same across the runs of
one run name that resume one another.

Grain saves its data position with every checkpoint (MaxText's `iter` item, one file per JAX
process) and restores it, so a resumed run reads on from where it stopped. A Hugging Face stream
has no such position: after any restart it starts again from the beginning.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

SYNTHETIC, GRAIN, HUGGING_FACE = "synthetic", "grain", "hf"
# MaxText's grain_file_type for each file suffix this product reads.
FILE_TYPES = {".array_record": "arrayrecord", ".parquet": "parquet"}
# Where a run keeps what its data was (beside its checkpoints): the next run of the run name is
# checked against it.
DATA_RECORD = "data.json"


@dataclass(frozen=True)
class ShippedTokenizer:
    """A tokenizer MaxText ships in its package (maxtext/assets/tokenizers, MaxText 0.2.5), with
    its vocabulary (tests/test_dataset_tokenizers.py loads each and counts it)."""

    name: str
    file: str
    type: str  # MaxText's tokenizer_type
    vocab_size: int


SHIPPED_TOKENIZERS = {
    tokenizer.name: tokenizer
    for tokenizer in (
        ShippedTokenizer("llama3", "tokenizer_llama3.tiktoken", "tiktoken", 128256),
        ShippedTokenizer("llama2", "tokenizer.llama2", "sentencepiece", 32000),
        ShippedTokenizer("mistral-v1", "tokenizer.mistral-v1", "sentencepiece", 32000),
        ShippedTokenizer("mistral-v3", "tokenizer.mistral-v3", "sentencepiece", 32768),
        ShippedTokenizer("gemma", "tokenizer.gemma", "sentencepiece", 256000),
        ShippedTokenizer("gemma3", "tokenizer.gemma3", "sentencepiece", 262144),
        ShippedTokenizer("qwen3", "qwen3-tokenizer", "huggingface", 151669),
    )
}
DEFAULT_TOKENIZER = "llama3"
# A tokenizer file's type, from its name, for files of a user's own.
TOKENIZER_SUFFIXES = {".tiktoken": "tiktoken", ".model": "sentencepiece", ".json": "huggingface"}

# MaxText keys that the dataset settings own: set in maxtextOverrides they would bypass the
# checks below, so they are refused there (domain/config/workload_settings.py).
DATA_KEYS = (
    "dataset_type",
    "grain_train_files",
    "grain_eval_files",
    "grain_file_type",
    "tokenizer_path",
    "tokenizer_type",
    "data_shuffle_seed",
    "packing",
    "num_epoch",
    "eval_interval",
    "hf_path",
    "hf_train_files",
    "hf_eval_files",
    "hf_data_dir",
)


def file_type(pattern: str) -> str | None:
    """MaxText's grain_file_type for files matching `pattern`, from its suffix; None if unknown."""
    return next((kind for suffix, kind in FILE_TYPES.items() if pattern.endswith(suffix)), None)


def tokenizer_type(tokenizer: str) -> str | None:
    """A shipped tokenizer's type, or a file's from its suffix (None when neither says)."""
    if tokenizer in SHIPPED_TOKENIZERS:
        return SHIPPED_TOKENIZERS[tokenizer].type
    return next((kind for suffix, kind in TOKENIZER_SUFFIXES.items() if tokenizer.endswith(suffix)), None)


@dataclass(frozen=True)
class Dataset:
    """The data a job trains on, as its workers open it. `files` and `eval_files` are patterns
    the workers glob (absolute); `tokenizer` is a shipped tokenizer's name (the worker finds it
    in its own MaxText package) or a path."""

    kind: str  # GRAIN or HUGGING_FACE
    tokenizer: str
    shuffle_seed: int
    packing: bool
    epochs: int | None = None  # None: one pass, and the corpus must cover the run
    files: str | None = None
    eval_files: str | None = None
    eval_interval: int | None = None
    hf_path: str | None = None

    @property
    def tokenizer_type(self) -> str:
        return tokenizer_type(self.tokenizer) or "sentencepiece"

    @property
    def tokenizer_vocab(self) -> int | None:
        """The vocabulary of a shipped tokenizer; None for a file (counted at job start)."""
        shipped = SHIPPED_TOKENIZERS.get(self.tokenizer)
        return shipped.vocab_size if shipped else None

    @property
    def resumable(self) -> bool:
        return self.kind == GRAIN

    def maxtext_overrides(self) -> dict[str, str]:
        """MaxText's keys for this data, but tokenizer_path (see `tokenizer_path`)."""
        overrides = {
            "dataset_type": self.kind,
            "tokenizer_type": self.tokenizer_type,
            "data_shuffle_seed": str(self.shuffle_seed),
            "packing": str(self.packing).lower(),
        }
        if self.kind == GRAIN:
            assert self.files is not None
            overrides |= {"grain_train_files": self.files, "grain_file_type": file_type(self.files) or ""}
            if self.epochs is not None:
                overrides["num_epoch"] = str(self.epochs)
        else:
            assert self.hf_path is not None
            overrides["hf_path"] = self.hf_path
        if self.eval_files is not None and self.eval_interval is not None:
            overrides |= {"grain_eval_files": self.eval_files, "eval_interval": str(self.eval_interval)}
        return overrides

    def tokenizer_path(self, maxtext_package: str) -> str:
        """tokenizer_path on a worker whose MaxText package is at `maxtext_package`."""
        shipped = SHIPPED_TOKENIZERS.get(self.tokenizer)
        return f"{maxtext_package}/assets/tokenizers/{shipped.file}" if shipped else self.tokenizer

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Dataset:
        return cls(**{entry.name: data[entry.name] for entry in fields(cls) if entry.name in data})


@dataclass(frozen=True)
class DataRecord:
    """What a run's data was: a run that resumes it must read the same data the same way, or its
    restored data position points into other data (examples skipped or seen twice)."""

    files: str | None
    hf_path: str | None
    content_hash: str | None  # the prepared corpus's manifest, when it has one
    tokenizer: str
    shuffle_seed: int
    packing: bool
    per_device_batch_size: str
    max_target_length: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DataRecord:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        missing = [entry.name for entry in fields(cls) if entry.name not in data]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        return cls(**{entry.name: data[entry.name] for entry in fields(cls)})

    def changes(self, earlier: DataRecord) -> list[str]:
        """What differs from `earlier`, as `name: earlier -> now`."""
        return [
            f"{entry.name}: {getattr(earlier, entry.name)!r} -> {getattr(self, entry.name)!r}"
            for entry in fields(self)
            if getattr(earlier, entry.name) != getattr(self, entry.name)
        ]


def data_record(dataset: Dataset, overrides: dict[str, str], content_hash: str | None) -> DataRecord:
    return DataRecord(
        files=dataset.files,
        hf_path=dataset.hf_path,
        content_hash=content_hash,
        tokenizer=dataset.tokenizer,
        shuffle_seed=dataset.shuffle_seed,
        packing=dataset.packing,
        per_device_batch_size=str(overrides.get("per_device_batch_size")),
        max_target_length=str(overrides.get("max_target_length")),
    )


def changed_record_problem(run_name: str, now: DataRecord, earlier: DataRecord) -> str | None:
    changes = now.changes(earlier)
    if not changes:
        return None
    return (
        f"run {run_name!r} already trained on other data settings ({'; '.join(changes)}): resuming it would restore a "
        "data position that points into other data, skipping or repeating examples; set them back, or start a new run "
        "(`pulumi config set runName NAME`)"
    )


def vocab_problem(tokenizer: str, tokenizer_vocab: int, model_vocab: int) -> str | None:
    """A tokenizer whose ids reach past the model's embedding table."""
    if tokenizer_vocab <= model_vocab:
        return None
    return (
        f"tokenizer = {tokenizer!r} has {tokenizer_vocab} tokens, more than the model's vocab_size {model_vocab}: "
        f"ids past {model_vocab - 1} have no embedding; use a tokenizer of at most {model_vocab} tokens, or set "
        f"maxtextOverrides.vocab_size to at least {tokenizer_vocab}"
    )


def sequences_needed(steps: int, global_batch: int) -> int:
    return steps * global_batch


def more_passes(epochs: int | str) -> str:
    """What to set where the data runs out: more passes, or fewer steps, in the stack and in the
    smoke run (which has no stack to `pulumi config set`)."""
    return (
        f"set epochs to at least {epochs} (`pulumi config set epochs {epochs}`; the smoke run's --epochs "
        f"{epochs}), or lower maxtextOverrides.steps (the smoke run's --set steps=N)"
    )


def most_sequences(*, documents: int, tokens: int | None, max_target_length: int, truncation: bool) -> int | None:
    """The most sequences one pass over a corpus can give, packed or not; None when nothing bounds
    it. MaxText truncates each document to max_target_length (its `use_truncation`, on by
    default), and a sequence holds at least one document, so a pass gives at most one sequence
    per document. Without truncation a document becomes chunks of max_target_length: at most
    its tokens / max_target_length, plus one, each."""
    if truncation:
        return documents
    if tokens is None:
        return None
    return documents + tokens // max_target_length


def coverage_problem(
    *,
    documents: int,
    steps: int,
    global_batch: int,
    max_target_length: int,
    tokens: int | None,
    truncation: bool,
    epochs: int | None,
    files: str,
) -> str | None:
    """A corpus that cannot fill the run's batches in the passes it is given, whatever the
    packing: refused only when even the most sequences it can give (`most_sequences`) are too
    few. A corpus that passes may still run out (packing fills sequences with fewer documents
    than it has); the trainer then says so."""
    needed = sequences_needed(steps, global_batch)
    passes = epochs or 1
    most = most_sequences(
        documents=documents, tokens=tokens, max_target_length=max_target_length, truncation=truncation
    )
    if most is None or passes * most >= needed:
        return None
    unit = (
        f"{documents} documents give at most {most} sequences (MaxText truncates each to max_target_length "
        f"{max_target_length}, and a sequence holds at least one)"
        if truncation
        else f"{documents} documents of {tokens} tokens give at most {most} chunks of {max_target_length}"
    )
    least = math.ceil(needed / most)
    return (
        f"datasetFiles = {files!r} is too small for the run: its {unit}, {passes * most} in {passes} "
        f"pass{'es' if passes > 1 else ''}, but {steps} steps of {global_batch} sequences need {needed}; "
        f"{more_passes(least)}"
    )
