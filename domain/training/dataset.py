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

from domain.training.dataset_manifest import PassTokens, chunks, pass_tokens

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


def more_passes(epochs: int | str) -> str:
    """What to set where the data runs out: more passes, or fewer steps, in the stack and in the
    smoke run (which has no stack to `pulumi config set`)."""
    return (
        f"set epochs to at least {epochs} (`pulumi config set epochs {epochs}`; the smoke run's --epochs "
        f"{epochs}), or lower maxtextOverrides.steps (the smoke run's --set steps=N)"
    )


# MaxText's defaults (its base.yml, MaxText 0.2.5) for the keys a corpus's coverage depends on.
MAXTEXT_MAX_TARGET_LENGTH = 2048


@dataclass(frozen=True)
class PassSequences:
    """The sequences one pass over a corpus gives a run, at least and at most. Without packing a
    sequence is one document, trimmed to max_target_length (`use_truncation`, MaxText's default)
    or cut into chunks of it, so the count is exact where the manifest counts each document's
    tokens. Packing puts several documents, or chunks, into one sequence of max_target_length:
    no fewer sequences than the pass's tokens fill, no more than without packing."""

    least: int
    most: int | None  # None: not bounded (no truncation and no token count)

    @property
    def exact(self) -> bool:
        return self.least == self.most


def pass_sequences(
    *,
    documents: int,
    tokens: int | None,
    lengths: tuple[tuple[int, int], ...] | None,
    max_target_length: int,
    truncation: bool,
    packing: bool,
) -> PassSequences:
    if lengths is not None:
        most: int | None = documents if truncation else chunks(lengths, max_target_length)
        kept = pass_tokens(lengths, max_target_length=max_target_length, truncation=truncation).kept
    elif truncation:
        most, kept = documents, None
    else:
        # Each document is at most its tokens / max_target_length chunks, plus one.
        most, kept = (documents + tokens // max_target_length, tokens) if tokens is not None else (None, None)
    if not packing and most is not None and (lengths is not None or truncation):
        return PassSequences(least=most, most=most)
    least = -(-kept // max_target_length) if kept is not None else 1
    return PassSequences(least=least, most=most)


def truncation_warning(per_pass: PassTokens, max_target_length: int, files: str) -> str:
    """Tokens MaxText's trim drops from documents longer than the sequence, each pass."""
    share = per_pass.truncated / (per_pass.kept + per_pass.truncated)
    return (
        f"datasetFiles = {files!r}: {per_pass.documents_truncated} documents are longer than max_target_length "
        f"{max_target_length}, and MaxText trims them: each pass trains {per_pass.kept} of the corpus's tokens and "
        f"drops {per_pass.truncated} ({share:.1%}; the tokensTruncated output). To train on them, set "
        "maxtextOverrides.use_truncation to false (the smoke run's --set use_truncation=false: long documents are "
        "then cut into sequences, none dropped), or raise max_target_length"
    )


def batches(sequences: int, global_batch: int) -> int:
    """The steps `sequences` feed: MaxText pads the last batch of a pass's end, so a part batch
    is a step too."""
    return -(-sequences // global_batch)


def coverage(
    *,
    documents: int,
    steps: int,
    global_batch: int,
    max_target_length: int,
    tokens: int | None,
    lengths: tuple[tuple[int, int], ...] | None,
    truncation: bool,
    packing: bool,
    epochs: int | None,
    files: str,
) -> tuple[str | None, str | None]:
    """Whether a corpus can feed the run's steps in the passes it is given: (a problem, when even
    the most sequences it gives are too few; a warning, when packing may leave it short: it gives
    between `least` and `most`, and the run needs more than the least). The trainer says so if
    the data runs out."""
    passes = epochs or 1
    bounds = pass_sequences(
        documents=documents,
        tokens=tokens,
        lengths=lengths,
        max_target_length=max_target_length,
        truncation=truncation,
        packing=packing,
    )
    in_passes = f"in {passes} pass{'es' if passes > 1 else ''}"
    run = f"the run takes {steps} steps of {global_batch} sequence{'s' if global_batch > 1 else ''}"
    if bounds.most is not None and batches(passes * bounds.most, global_batch) < steps:
        how = "trims each to" if truncation else "cuts each into chunks of"
        unit = (
            f"{documents} documents give {'exactly' if bounds.exact else 'at most'} {bounds.most} sequences (MaxText "
            f"{how} max_target_length {max_target_length}{', and a packed sequence holds at least one' if packing else ''})"
        )
        enough = math.ceil(((steps - 1) * global_batch + 1) / bounds.most)
        problem = (
            f"datasetFiles = {files!r} is too small for the run: its {unit}, "
            f"{batches(passes * bounds.most, global_batch)} steps {in_passes}, but {run}; {more_passes(enough)}"
        )
        return problem, None
    if batches(passes * bounds.least, global_batch) >= steps:
        return None, None
    most = "more" if bounds.most is None else f"{batches(passes * bounds.most, global_batch)}"
    warning = (
        f"datasetFiles = {files!r} may run out before the run ends: packed into sequences of {max_target_length} "
        f"tokens, it feeds between {batches(passes * bounds.least, global_batch)} and {most} steps {in_passes}, and "
        f"{run}; if it runs out, the job saves at the last step the data held and fails saying so. To be sure, "
        f"{more_passes(math.ceil(((steps - 1) * global_batch + 1) / bounds.least))}"
    )
    return None, warning
