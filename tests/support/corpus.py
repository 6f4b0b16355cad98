"""A prepared corpus's manifest as tests write it beside their shards (domain/training/dataset_manifest.py)."""

from __future__ import annotations

from domain.training.dataset_manifest import DatasetManifest, Shard

SHARD = "data-00000-of-00001.array_record"


def corpus_manifest(documents: int, tokens: int | None, content_hash: str = "sha256:abc") -> DatasetManifest:
    """One shard of `documents` documents holding `tokens` Llama 3 tokens."""
    return DatasetManifest(
        format="arrayrecord",
        text_feature="text",
        documents=documents,
        bytes=100,
        content_hash=content_hash,
        shards=(Shard(SHARD, documents, 100, "sha256:0"),),
        sources=("corpus.jsonl",),
        skipped_empty=0,
        tokenizer="llama3",
        tokens=tokens,
    )
