"""The coverage check before submit against MaxText's own pipeline (issue 32): corpora made to sit
at the edges (documents shorter and longer than the sequence), prepared as a user prepares them,
read to the end by the iterator a job's workers build (trainer/replay_data.py), with packing and
truncation on and off. The steps the pipeline feeds lie within the bounds the check computes from
the manifest (exactly on them without packing), and the check refuses none of those runs and
passes no longer run silently."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass

import pytest

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.training.dataset import GRAIN, SHIPPED_TOKENIZERS, Dataset, batches, coverage, pass_sequences
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest, pass_tokens
from domain.training.job import CPU_WORKER_ENV, JobSpec, resolve_job

SEQUENCE = 32  # max_target_length: Llama 3 tokens
BATCH = 2  # per_device_batch_size on one CPU device: the last batch of a pass may be a part batch
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def document(index: int, words: int) -> str:
    return f"doc {index}: " + " ".join(WORDS[(index * 5 + k) % len(WORDS)] for k in range(words))


# Every document shorter than the sequence; every one longer (up to four sequences); both.
CORPORA = {
    "short": [document(index, 3 + index % 20) for index in range(41)],
    "long": [document(index, 30 + index * 3) for index in range(27)],
    "mixed": [document(index, 2 + (index * 13) % 90) for index in range(45)],
}
# (corpus, packing, use_truncation)
CASES = [
    ("short", True, True),
    ("short", False, True),
    ("long", False, True),
    ("long", False, False),
    ("long", True, False),
    ("mixed", True, True),
    ("mixed", False, False),
]

# In the trainer environment: each corpus prepared as `python -m trainer.prepare_data` prepares
# it, then each case's job read to the end of its one pass by MaxText's own iterator.
READ_TO_THE_END = """
import json, os, sys
from pathlib import Path
from domain.training.job import JobSpec
from trainer.prepare_data import prepare
from trainer.replay_data import batches
work = Path(sys.argv[1])
for name, texts in json.loads((work / "corpora.json").read_text()).items():
    (work / name).mkdir()
    (work / name / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\\n" for t in texts))
    prepare([str(work / name / "corpus.jsonl")], work / name / "prepared")
fed = []
for job in json.loads((work / "jobs.json").read_text()):
    read = list(batches(JobSpec.from_json(job), None, None))
    sequences = sum(1 for batch in read for sequence in batch.sequences if sequence)
    fed.append([len(read), sum(batch.tokens for batch in read), sequences])
print("fed " + json.dumps(fed), flush=True)
os._exit(0)  # MaxText's iterator, when collected, signals orphaned processes: replay_data's main says why
"""


@dataclass(frozen=True)
class Fed:
    manifest: DatasetManifest
    job: JobSpec
    steps: int  # what the pipeline fed, to the end of the data
    tokens: int  # the real target tokens of those steps, as MaxText counts a step's
    sequences: int  # of those steps, the sequences that hold data (a part batch is padded)


def job_for(work, corpus: str, packing: bool, truncation: bool) -> JobSpec:
    return resolve_job(
        "tiny-cpu",
        run_name=f"{corpus}-{packing}-{truncation}".lower(),
        checkpoint_root=str(work / "runs"),
        overrides={
            "max_target_length": SEQUENCE,
            "per_device_batch_size": BATCH,
            "use_truncation": str(truncation).lower(),
            # Read in this process: a Grain worker process per case cost 23 s of the test's 34, and
            # one such read hung past its 600 s timeout in a loaded CI run. The counts are the same
            # with the job's one worker (compared once: the same steps, tokens and sequences).
            "grain_worker_count": "0",
            "vocab_size": SHIPPED_TOKENIZERS["llama3"].vocab_size,
        },
        dataset=Dataset(
            kind=GRAIN,
            tokenizer="llama3",
            shuffle_seed=3,
            packing=packing,
            files=str(work / corpus / "prepared" / "data-*-of-00001.array_record"),
        ),
    )


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> list[Fed]:
    work = tmp_path_factory.mktemp("coverage")
    jobs = [job_for(work, *case) for case in CASES]
    (work / "corpora.json").write_text(json.dumps(CORPORA))
    (work / "jobs.json").write_text(json.dumps([job.to_json() for job in jobs]))
    done = subprocess.run(
        [str(TRAINER_PYTHON), "-c", READ_TO_THE_END, str(work)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, **CPU_WORKER_ENV},
        timeout=600,
    )
    [line] = [line for line in done.stdout.splitlines() if line.startswith("fed ")] or [done.stderr[-3000:]]
    counts = json.loads(line.removeprefix("fed "))
    return [
        Fed(DatasetManifest.from_json((work / corpus / "prepared" / MANIFEST_NAME).read_text()), job, *count)
        for (corpus, _, _), job, count in zip(CASES, jobs, counts, strict=True)
    ]


def test_the_corpora_sit_at_the_edges_of_the_sequence(fed):
    """Each corpus is what its name says, in the manifest's own count of each document's tokens."""
    lengths = {case[0]: item.manifest.token_lengths for case, item in zip(CASES, fed, strict=True)}
    assert max(tokens for tokens, _ in lengths["short"]) < SEQUENCE
    assert min(tokens for tokens, _ in lengths["long"]) > SEQUENCE
    assert max(tokens for tokens, _ in lengths["long"]) > 3 * SEQUENCE
    mixed = [tokens for tokens, _ in lengths["mixed"]]
    assert min(mixed) < SEQUENCE < max(mixed)


@pytest.mark.parametrize("case", range(len(CASES)), ids=["-".join(map(str, case)) for case in CASES])
def test_the_steps_the_pipeline_feeds_lie_within_the_checks_bounds(fed, case):
    corpus, packing, truncation = CASES[case]
    item = fed[case]
    manifest = item.manifest
    bounds = pass_sequences(
        documents=manifest.documents,
        tokens=manifest.tokens,
        lengths=manifest.token_lengths,
        max_target_length=SEQUENCE,
        truncation=truncation,
        packing=packing,
    )
    assert bounds.most is not None
    least, most = batches(bounds.least, BATCH), batches(bounds.most, BATCH)
    assert least <= item.steps <= most, (least, item.steps, most)
    assert bounds.exact == (not packing)
    # What one pass reads, as the manifest says before the run: each sequence's targets (what
    # the job counts as tokens trained) and its first token, which is never a target.
    kept = pass_tokens(manifest.token_lengths, max_target_length=SEQUENCE, truncation=truncation).kept
    assert item.tokens + item.sequences == kept, (item.tokens, item.sequences, kept)
    assert bounds.least <= item.sequences <= bounds.most
    # Both directions: the run the data feeds is never refused, one step more is never passed
    # without a word (refused where it is certain, a warning where packing makes it uncertain).
    for steps in (item.steps, item.steps + 1):
        problem, warning = coverage(
            documents=manifest.documents,
            steps=steps,
            global_batch=BATCH,
            max_target_length=SEQUENCE,
            tokens=manifest.tokens,
            lengths=manifest.token_lengths,
            truncation=truncation,
            packing=packing,
            epochs=None,
            files=corpus,
        )
        if steps == item.steps:
            assert problem is None, problem
        else:
            assert (problem, warning) != (None, None), f"{steps} steps passed; the data feeds {item.steps}"
            assert packing or problem is not None, warning
