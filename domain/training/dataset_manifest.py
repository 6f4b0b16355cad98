"""A prepared dataset: ArrayRecord shards of MaxText's own Example records, one text feature each,
and the manifest `python -m trainer.prepare_data` writes beside them (documents, bytes, the
shards, a content hash). The manifest is read once, here, into a typed record.

The content hash is over the documents in order, each as its UTF-8 length and bytes: the same
documents in the same order hash the same whether they came from JSONL or Parquet, and however
they are sharded.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

MANIFEST_NAME = "manifest.json"
FORMAT = "arrayrecord"
TEXT_FEATURE = "text"  # MaxText's default train_data_columns
SHARD_TARGET_BYTES = 128 * 1024 * 1024


def shard_name(index: int, count: int) -> str:
    return f"data-{index:05d}-of-{count:05d}.array_record"


def shard_count(documents: int, total_bytes: int, requested: int | None = None) -> int:
    """How many shards: `requested`, else one per SHARD_TARGET_BYTES; never more than documents."""
    wanted = requested if requested is not None else -(-total_bytes // SHARD_TARGET_BYTES)
    return max(1, min(wanted, documents))


def shard_bounds(documents: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges of documents per shard, sizes differing by at most one, so a
    shard holds documents in their source order."""
    return [(index * documents // shards, (index + 1) * documents // shards) for index in range(shards)]


def md5_base64(data: bytes) -> str:
    """A file's MD5 as Cloud Storage reports it (an object's `md5Hash`: base64 of the digest)."""
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")


def content_hash(documents: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for document in documents:
        data = document.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class Shard:
    file: str  # relative to the manifest's directory
    documents: int
    bytes: int  # UTF-8 bytes of its documents' text
    sha256: str  # of the shard file
    # The shard file's size and its MD5 as Cloud Storage reports it (base64 of the digest), so the
    # files a pattern matches can be checked against the manifest without reading them; None in
    # manifests without.
    file_bytes: int | None = None
    md5: str | None = None


@dataclass(frozen=True)
class DatasetManifest:
    format: str
    text_feature: str
    documents: int
    bytes: int
    content_hash: str
    shards: tuple[Shard, ...]
    sources: tuple[str, ...]
    skipped_empty: int  # documents whose text was empty, left out
    # The documents' tokens with a shipped tokenizer (MaxText's BOS and EOS included, as its
    # pipeline adds them), which bound what a packed run can fill; None in manifests without.
    tokenizer: str | None = None
    tokens: int | None = None
    # The documents by token count: (tokens, documents of that many) pairs, shortest first, as
    # counted for `tokens`; what a pass keeps of them depends on the run's max_target_length
    # (`pass_tokens`). None in manifests without.
    token_lengths: tuple[tuple[int, int], ...] | None = None

    @property
    def file_pattern(self) -> str:
        """The glob that matches exactly the shards (MaxText's grain_train_files, under the
        manifest's directory)."""
        return f"data-*-of-{len(self.shards):05d}.array_record"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DatasetManifest:
        """Raises ValueError naming the field that is missing or wrong."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"the manifest is not JSON ({error})") from None
        if not isinstance(data, dict):
            raise ValueError("the manifest is not a JSON object")
        shards = tuple(Shard(**_fields(shard, Shard)) for shard in _field(data, "shards", list))
        lengths = _token_lengths(data.get("token_lengths"))
        manifest = cls(
            **{**_fields(data, cls), "shards": shards, "sources": tuple(_field(data, "sources", list))},
            token_lengths=lengths,
        )
        if manifest.format != FORMAT:
            raise ValueError(f"the manifest's format is {manifest.format!r}; this product reads {FORMAT!r}")
        if sum(shard.documents for shard in shards) != manifest.documents:
            raise ValueError("the manifest's shards do not add up to its documents")
        if lengths is not None and (
            sum(count for _, count in lengths) != manifest.documents
            or sum(tokens * count for tokens, count in lengths) != manifest.tokens
        ):
            raise ValueError("the manifest's token_lengths do not add up to its documents and tokens")
        return manifest


def token_lengths(lengths: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Documents' token counts as the manifest keeps them: (tokens, documents) pairs, shortest
    first. As many pairs as distinct lengths, however many documents."""
    return tuple(sorted(Counter(lengths).items()))


@dataclass(frozen=True)
class PassTokens:
    """What one pass over a corpus trains of its tokens: MaxText trims each document to
    max_target_length when `use_truncation` is on (its default), and cuts it into chunks of
    max_target_length, losing nothing, when it is off."""

    kept: int
    truncated: int  # tokens the trim drops
    documents_truncated: int


def pass_tokens(lengths: tuple[tuple[int, int], ...], *, max_target_length: int, truncation: bool) -> PassTokens:
    longer = [(tokens, count) for tokens, count in lengths if tokens > max_target_length] if truncation else []
    truncated = sum((tokens - max_target_length) * count for tokens, count in longer)
    return PassTokens(
        kept=sum(tokens * count for tokens, count in lengths) - truncated,
        truncated=truncated,
        documents_truncated=sum(count for _, count in longer),
    )


def chunks(lengths: tuple[tuple[int, int], ...], max_target_length: int) -> int:
    """The sequences MaxText cuts a corpus into without truncation: each document's tokens in
    chunks of max_target_length, the last one shorter."""
    return sum(-(-tokens // max_target_length) * count for tokens, count in lengths)


def _token_lengths(value: Any) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    pairs = value if isinstance(value, list) else None
    if pairs is None or not all(
        isinstance(pair, list)
        and len(pair) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)
        for pair in pairs
    ):
        raise ValueError("the manifest's 'token_lengths' is not a list of [tokens, documents] pairs")
    return tuple((tokens, count) for tokens, count in pairs)


def _field(data: dict[str, Any], name: str, kind: type) -> Any:
    if name not in data:
        raise ValueError(f"the manifest has no {name!r}")
    if not isinstance(data[name], kind) or (kind is int and isinstance(data[name], bool)):
        raise ValueError(f"the manifest's {name!r} is not a {kind.__name__}")
    return data[name]


def _fields(data: Any, cls: type) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"a manifest entry is not an object where a {cls.__name__} belongs")
    kinds = {
        "file": str,
        "sha256": str,
        "md5": str,
        "format": str,
        "text_feature": str,
        "content_hash": str,
        "tokenizer": str,
    }
    return {
        entry.name: _field(data, entry.name, kinds.get(entry.name, int))
        for entry in fields(cls)
        if entry.name not in ("shards", "sources", "token_lengths")
        and (entry.name not in _OPTIONAL or data.get(entry.name) is not None)
    }


_OPTIONAL = ("tokenizer", "tokens", "file_bytes", "md5")
