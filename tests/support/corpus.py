"""A prepared corpus's manifest as tests write it beside their shards (domain/training/dataset_manifest.py)."""

from __future__ import annotations

from collections.abc import Mapping

from domain.training.dataset_manifest import DatasetManifest, Shard, md5_base64, shard_name

SHARD = "data-00000-of-00001.array_record"


def shard_files(count: int) -> dict[str, bytes]:
    """`count` shard files by name, each of its own content."""
    return {shard_name(index, count): f"shard {index} of {count}".encode() for index in range(count)}


def corpus_manifest(
    documents: int,
    tokens: int | None,
    content_hash: str = "sha256:abc",
    files: Mapping[str, bytes] | None = None,
) -> DatasetManifest:
    """`documents` documents holding `tokens` Llama 3 tokens: in one shard, listed by name only (as
    manifests before sizes and MD5s were), or in `files`, each listed with its size and MD5."""
    if files is None:
        shards: tuple[Shard, ...] = (Shard(SHARD, documents, 100, "sha256:0"),)
    else:
        counts = [documents // len(files) + (index < documents % len(files)) for index in range(len(files))]
        shards = tuple(
            Shard(name, count, 100, "sha256:0", file_bytes=len(data), md5=md5_base64(data))
            for (name, data), count in zip(files.items(), counts, strict=True)
        )
    return DatasetManifest(
        format="arrayrecord",
        text_feature="text",
        documents=documents,
        bytes=100 * len(shards),
        content_hash=content_hash,
        shards=shards,
        sources=("corpus.jsonl",),
        skipped_empty=0,
        tokenizer="llama3",
        tokens=tokens,
    )
