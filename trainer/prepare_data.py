"""Prepares a corpus for MaxText's Grain pipeline: JSONL or Parquet files with a text column become
ArrayRecord shards of MaxText's own Example records (one `text` feature each, what its
ParseFeatures reads) and a manifest (domain/training/dataset_manifest.py).

    .venv-trainer/bin/python -m trainer.prepare_data corpus/*.jsonl --output prepared/ [--shards N]

Runs in the trainer environment, which has ArrayRecord, pyarrow and MaxText. Reads local files
and `gs://` objects (listed and downloaded one at a time with Google's client library and your
Application Default Credentials: `gcloud auth application-default login`). Documents keep their order: the files as
given (a glob sorted), then their lines or rows. Empty texts are left out and counted. It refuses
an output directory that already holds a manifest, rather than mixing two corpora.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from domain.training.dataset import DEFAULT_TOKENIZER, SHIPPED_TOKENIZERS
from domain.training.dataset_manifest import (
    FORMAT,
    MANIFEST_NAME,
    TEXT_FEATURE,
    DatasetManifest,
    Shard,
    content_hash,
    md5_base64,
    shard_bounds,
    shard_count,
    shard_name,
    token_lengths,
)


class PrepareError(RuntimeError):
    pass


def source_files(patterns: Sequence[str]) -> list[str]:
    """The files the patterns name, in order: each pattern's matches sorted. A `gs://BUCKET/PATTERN`
    is listed through Cloud Storage (Application Default Credentials; STORAGE_EMULATOR_HOST points
    Google's client at another endpoint), with its `*` within one folder as a local glob's."""
    files: list[str] = []
    for pattern in patterns:
        if pattern.startswith("gs://"):
            matched = _bucket_matches(pattern)
        elif "://" in pattern:
            raise PrepareError(f"{pattern!r} is a URL this command cannot read; give local paths or gs:// URLs")
        else:
            matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            if not all(Path(path).is_file() for path in matched):
                matched = []
        if not matched:
            raise PrepareError(f"{pattern!r} matches no file; give JSONL (.jsonl) or Parquet (.parquet) files")
        files += matched
    return files


def _bucket_matches(url: str) -> list[str]:
    from google.api_core import exceptions
    from google.cloud import storage

    bucket, _, name = url.removeprefix("gs://").partition("/")
    literal = name[: next((i for i, c in enumerate(name) if c in "*?[{"), len(name))]
    try:
        blobs = storage.Client().list_blobs(bucket, prefix=literal, match_glob=name if literal != name else None)
        names = sorted(blob.name for blob in blobs)
    except exceptions.GoogleAPICallError as error:
        raise PrepareError(f"{url!r} could not be listed: {error.message}") from None
    return [f"gs://{bucket}/{found}" for found in names if literal != name or found == name]


@contextlib.contextmanager
def _local(source: str) -> Iterator[Path]:
    """A local path to read `source` from: itself, or a bucket object downloaded to a temporary
    file (one at a time, removed once read)."""
    if not source.startswith("gs://"):
        yield Path(source)
        return
    from google.cloud import storage

    bucket, _, name = source.removeprefix("gs://").partition("/")
    with tempfile.TemporaryDirectory(prefix="prepare-data-") as directory:
        path = Path(directory) / PurePosixPath(name).name
        storage.Client().bucket(bucket).blob(name).download_to_filename(str(path))
        yield path


def _texts_of_jsonl(path: Path, column: str) -> Iterator[str]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise PrepareError(f"{path}:{number} is not a JSON object ({error.msg})") from None
            if not isinstance(record, dict) or column not in record:
                keys = sorted(record) if isinstance(record, dict) else []
                raise PrepareError(
                    f"{path}:{number} has no {column!r} field (it has: {', '.join(keys) or 'none'}); "
                    "name the text field with --text-column"
                )
            if not isinstance(record[column], str):
                raise PrepareError(f"{path}:{number}: {column!r} is not text")
            yield record[column]


def _texts_of_parquet(path: Path, column: str) -> Iterator[str]:
    import pyarrow.parquet as parquet

    schema = parquet.read_schema(path)
    if column not in schema.names:
        raise PrepareError(
            f"{path} has no {column!r} column (it has: {', '.join(schema.names)}); name the text column "
            "with --text-column"
        )
    for batch in parquet.ParquetFile(path).iter_batches(columns=[column]):
        for value in batch.column(0).to_pylist():
            if value is not None and not isinstance(value, str):
                raise PrepareError(f"{path}: column {column!r} is not text")
            yield value or ""


def texts(files: Sequence[str], column: str) -> Iterator[str]:
    for source in files:
        suffix = PurePosixPath(source).suffix
        if suffix not in (".parquet", ".jsonl", ".json"):
            raise PrepareError(f"{source}: not a .jsonl or .parquet file")
        with _local(source) as path:
            if suffix == ".parquet":
                yield from _texts_of_parquet(path, column)
            else:
                yield from _texts_of_jsonl(path, column)


def _example(text: str) -> bytes:
    from maxtext.input_pipeline.protos import example_pb2

    example = example_pb2.Example()
    example.features.feature[TEXT_FEATURE].bytes_list.value.append(text.encode("utf-8"))
    return example.SerializeToString()


def document_tokens(documents: Sequence[str], tokenizer: str) -> list[int]:
    """Each document's tokens as MaxText's pipeline makes them (BOS and EOS added), with one of
    the tokenizers MaxText ships."""
    import os

    import maxtext
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    shipped = SHIPPED_TOKENIZERS[tokenizer]
    path = os.path.join(os.path.dirname(maxtext.__file__), "assets", "tokenizers", shipped.file)
    encoder = build_tokenizer(path, shipped.type, add_bos=True, add_eos=True, hf_access_token="")
    return [len(encoder.encode(text)) for text in documents]


def prepare(
    patterns: Sequence[str],
    output: Path,
    *,
    column: str = TEXT_FEATURE,
    shards: int | None = None,
    tokenizer: str | None = DEFAULT_TOKENIZER,
) -> DatasetManifest:
    from array_record.python.array_record_module import ArrayRecordWriter

    if (output / MANIFEST_NAME).exists():
        raise PrepareError(f"{output} already holds a prepared dataset ({MANIFEST_NAME}); give an empty directory")
    files = source_files(patterns)
    all_texts = list(texts(files, column))
    documents = [text for text in all_texts if text]
    if not documents:
        raise PrepareError(f"{', '.join(map(str, files))} hold no non-empty {column!r} text")
    total_bytes = sum(len(text.encode("utf-8")) for text in documents)
    count = shard_count(len(documents), total_bytes, shards)
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for index, (start, end) in enumerate(shard_bounds(len(documents), count)):
        name = shard_name(index, count)
        # group_size:1 lets a reader fetch any one record without decoding its neighbours
        # (Grain reads records by index, in a shuffled order).
        writer = ArrayRecordWriter(str(output / name), "group_size:1")
        for text in documents[start:end]:
            writer.write(_example(text))
        writer.close()
        data = (output / name).read_bytes()
        written.append(
            Shard(
                file=name,
                documents=end - start,
                bytes=sum(len(text.encode("utf-8")) for text in documents[start:end]),
                sha256="sha256:" + hashlib.sha256(data).hexdigest(),
                file_bytes=len(data),
                md5=md5_base64(data),
            )
        )
    lengths = document_tokens(documents, tokenizer) if tokenizer is not None else None
    manifest = DatasetManifest(
        format=FORMAT,
        text_feature=TEXT_FEATURE,
        documents=len(documents),
        bytes=total_bytes,
        content_hash=content_hash(documents),
        shards=tuple(written),
        sources=tuple(files),
        skipped_empty=len(all_texts) - len(documents),
        tokenizer=tokenizer,
        tokens=sum(lengths) if lengths is not None else None,
        token_lengths=token_lengths(lengths) if lengths is not None else None,
    )
    (output / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="JSONL or Parquet files (globs allowed)")
    parser.add_argument("--output", required=True, type=Path, help="an empty directory for the shards")
    parser.add_argument("--text-column", default=TEXT_FEATURE, help="the field or column with the text")
    parser.add_argument("--shards", type=int, default=None, help="how many shards (default: one per 128 MiB)")
    parser.add_argument(
        "--tokenizer",
        default=DEFAULT_TOKENIZER,
        choices=[*SHIPPED_TOKENIZERS, "none"],
        help=f"count the tokens with this tokenizer MaxText ships (default {DEFAULT_TOKENIZER}; none: do not count)",
    )
    args = parser.parse_args(argv)
    if args.shards is not None and args.shards < 1:
        parser.error(f"--shards {args.shards}: use 1 or more")
    try:
        manifest = prepare(
            args.sources,
            args.output,
            column=args.text_column,
            shards=args.shards,
            tokenizer=None if args.tokenizer == "none" else args.tokenizer,
        )
    except PrepareError as error:
        print(f"prepare_data: {error}", file=sys.stderr)
        return 2
    summary = {
        "documents": manifest.documents,
        "bytes": manifest.bytes,
        "shards": len(manifest.shards),
        "content_hash": manifest.content_hash,
        "tokens": manifest.tokens,
        "pattern": str(args.output / manifest.file_pattern),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
