"""Prepares a corpus for MaxText's Grain pipeline: JSONL or Parquet files with a text column become
ArrayRecord shards of MaxText's own Example records (one `text` feature each, what its
ParseFeatures reads) and a manifest (domain/training/dataset_manifest.py).

    .venv-trainer/bin/python -m trainer.prepare_data corpus/*.jsonl --output prepared/ [--shards N]

Runs in the trainer environment, which has ArrayRecord, pyarrow and MaxText. Reads local files
(copy a bucket's files down first: `gcloud storage cp`). Documents keep their order: the files as
given (a glob sorted), then their lines or rows. Empty texts are left out and counted. It refuses
an output directory that already holds a manifest, rather than mixing two corpora.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from domain.training.dataset import DEFAULT_TOKENIZER, SHIPPED_TOKENIZERS
from domain.training.dataset_manifest import (
    FORMAT,
    MANIFEST_NAME,
    TEXT_FEATURE,
    DatasetManifest,
    Shard,
    content_hash,
    shard_bounds,
    shard_count,
    shard_name,
)


class PrepareError(RuntimeError):
    pass


def source_files(patterns: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        if "://" in pattern:
            raise PrepareError(
                f"{pattern!r} is a URL; this command reads local files: copy them down first "
                "(gcloud storage cp 'gs://BUCKET/PATH/*' corpus/)"
            )
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched or not all(Path(path).is_file() for path in matched):
            raise PrepareError(f"{pattern!r} matches no file; give JSONL (.jsonl) or Parquet (.parquet) files")
        files += [Path(path) for path in matched]
    return files


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


def texts(files: Sequence[Path], column: str) -> Iterator[str]:
    for path in files:
        if path.suffix == ".parquet":
            yield from _texts_of_parquet(path, column)
        elif path.suffix in (".jsonl", ".json"):
            yield from _texts_of_jsonl(path, column)
        else:
            raise PrepareError(f"{path}: not a .jsonl or .parquet file")


def _example(text: str) -> bytes:
    from maxtext.input_pipeline.protos import example_pb2

    example = example_pb2.Example()
    example.features.feature[TEXT_FEATURE].bytes_list.value.append(text.encode("utf-8"))
    return example.SerializeToString()


def count_tokens(documents: Sequence[str], tokenizer: str) -> int:
    """The documents' tokens as MaxText's pipeline makes them (BOS and EOS added), with one of
    the tokenizers MaxText ships."""
    import os

    import maxtext
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    shipped = SHIPPED_TOKENIZERS[tokenizer]
    path = os.path.join(os.path.dirname(maxtext.__file__), "assets", "tokenizers", shipped.file)
    encoder = build_tokenizer(path, shipped.type, add_bos=True, add_eos=True, hf_access_token="")
    return sum(len(encoder.encode(text)) for text in documents)


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
        written.append(
            Shard(
                file=name,
                documents=end - start,
                bytes=sum(len(text.encode("utf-8")) for text in documents[start:end]),
                sha256="sha256:" + hashlib.sha256((output / name).read_bytes()).hexdigest(),
            )
        )
    manifest = DatasetManifest(
        format=FORMAT,
        text_feature=TEXT_FEATURE,
        documents=len(documents),
        bytes=total_bytes,
        content_hash=content_hash(documents),
        shards=tuple(written),
        sources=tuple(str(path) for path in files),
        skipped_empty=len(all_texts) - len(documents),
        tokenizer=tokenizer,
        tokens=count_tokens(documents, tokenizer) if tokenizer is not None else None,
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
