"""Replays a job's input pipeline, without a model: the batches MaxText's Grain iterator gives the
job, from its start or from a data position a checkpoint saved, each as the documents it holds.

    .venv-trainer/bin/python -m trainer.replay_data --job JOB_JSON [--state ITER_JSON] [--batches N]

It builds the iterator the job's workers build (MaxText's config from the job's own argv,
`create_data_iterator`), on this machine's CPU, one process (the local stack's shape), sets a
saved position with Grain's `set_state`, and prints one JSON list per batch: for each packed
sequence, the documents in it, read back through the tokenizer as the leading `DOCUMENT_ID`
pattern of each segment (a test's corpus writes `doc N:` at the start of every document; -1
for a segment without it), after `replayed batch `. It
stops after N batches, or when the data ends. It reads with the job's own Grain worker count: a
saved position is the state of an iterator of that many workers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.training.job import JobSpec
from trainer.events import real_tokens
from trainer.train_loop import mark_absl_flags_parsed, maxtext_argv

DOCUMENT_ID = re.compile(r"doc (\d+):")
# Each batch's line starts so (MaxText prints its own lines to stdout too), and is followed by
# one with its real target tokens, counted as MaxText counts a step's (the trainer's real_tokens).
BATCH_PREFIX = "replayed batch "
TOKENS_PREFIX = "replayed tokens "


@dataclass(frozen=True)
class Batch:
    sequences: list[list[int]]  # each packed sequence's documents
    tokens: int


def batches(job: JobSpec, state: dict[str, Any] | None, limit: int | None) -> Iterator[Batch]:
    import jax
    from maxtext.configs import pyconfig
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from maxtext.input_pipeline.tokenizer import build_tokenizer
    from maxtext.utils import maxtext_utils

    assert job.dataset is not None, "a job without a dataset has no pipeline to replay"
    mark_absl_flags_parsed()  # Grain's worker processes read absl flags
    argv = [*maxtext_argv(job), "enable_checkpointing=false"]
    config = pyconfig.initialize(argv)
    mesh = jax.sharding.Mesh(maxtext_utils.create_device_mesh(config), config.mesh_axes)
    iterator, _ = create_data_iterator(config, mesh)
    if state is not None:
        iterator.local_iterator.set_state(state)
    tokenizer = build_tokenizer(config.tokenizer_path, config.tokenizer_type, False, False, "")
    try:
        yield from _read(iterator, tokenizer, limit)
    finally:
        # Grain's own close stops its worker processes (MaxText's would also signal other
        # processes of the machine: see main).
        iterator.local_iterator.close()


def _read(iterator: Any, tokenizer: Any, limit: int | None) -> Iterator[Batch]:
    import numpy as np

    count = 0
    while limit is None or count < limit:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        inputs, segments = np.asarray(batch["inputs"]), np.asarray(batch["inputs_segmentation"])
        sequences = []
        for tokens, segment_ids in zip(inputs, segments, strict=True):
            documents = []
            for segment in sorted(set(segment_ids.tolist()) - {0}):
                # The tiktoken tokenizer pads with id -1, which it cannot decode: padding, not text.
                ids = [int(t) for t, s in zip(tokens, segment_ids, strict=True) if s == segment and t >= 0]
                if not ids:
                    continue
                found = DOCUMENT_ID.search(tokenizer.decode(ids))
                documents.append(int(found[1]) if found else -1)
            sequences.append(documents)
        yield Batch(sequences, real_tokens(batch) or 0)
        count += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="the resolved job as JSON")
    parser.add_argument("--state", type=Path, help="a data position a checkpoint saved (iter/process_0-of-1.json)")
    parser.add_argument("--batches", type=int, help="at most this many batches (default: to the end of the data)")
    args = parser.parse_args(argv)
    job = JobSpec.from_json(args.job)
    state = json.loads(args.state.read_text()) if args.state else None
    code = 1
    try:
        for batch in batches(job, state, args.batches):
            print(BATCH_PREFIX + json.dumps(batch.sequences), flush=True)
            print(f"{TOKENS_PREFIX}{batch.tokens}", flush=True)
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Without finalizers: MaxText's iterator, when collected, also signals every orphaned
        # multiprocessing process on the machine (maxtext/input_pipeline/multihost_dataloading.py).
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
