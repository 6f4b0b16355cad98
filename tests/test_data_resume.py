"""Exact resume on a corpus (`slow`), ArrayRecord (prepared) and Parquet: the tiny preset trains
through the RayJob provider on a local Ray cluster once without a fault, once with its Ray Train
worker SIGKILLed twice (after a checkpoint, then during one's write), and (ArrayRecord) once with its node preempted: the notice's
checkpoint, then a worker group restarted on another node. The interrupted run restores
MaxText's saved Grain position with the checkpoint, so step by step its losses are the uninterrupted run's (same seed, same data in the same order: a
batch skipped or read twice would change every later loss), and its last checkpoint holds the
same data position. Replaying the pipeline (trainer/replay_data.py) shows what each batch held: every
document once per epoch, and from the restored position the batches the uninterrupted run read."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.training.dataset import GRAIN, SHIPPED_TOKENIZERS, Dataset
from domain.training.dataset_manifest import MANIFEST_NAME, DatasetManifest, pass_tokens
from domain.training.job import CPU_WORKER_ENV, JobSpec, resolve_job
from tests.support.provider_run import ProviderRun
from tests.support.trainer_logs import RESTORE_LINE, STEP_LINE, committed_steps, notice_saves, the_worker
from trainer.replay_data import BATCH_PREFIX, TOKENS_PREFIX
from workloads.local_ray import LocalRayHead, LocalRayNode
from workloads.ray_job import wait as job_wait

pytestmark = pytest.mark.slow

OVERRIDES = {
    "steps": 24,  # enough steps after the fault (each ~0.3 s) that it never lands after the last
    "checkpoint_period": 4,
    "per_device_batch_size": 2,
    "max_target_length": 128,
    "vocab_size": SHIPPED_TOKENIZERS["llama3"].vocab_size,
}
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def documents() -> list[str]:
    """400 distinct documents of 5 to 154 words: 110 are longer than the sequence (128 Llama 3
    tokens), and MaxText trims them."""
    return [
        f"doc {index}: " + " ".join(WORDS[(index * 7 + k) % len(WORDS)] for k in range(5 + (index * 37) % 150))
        for index in range(400)
    ]


PARQUET = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
texts = [line.rstrip("\\n") for line in open(sys.argv[1])]
half = len(texts) // 2
pq.write_table(pa.table({"text": texts[:half]}), sys.argv[2] + "/part-0.parquet")
pq.write_table(pa.table({"text": texts[half:]}), sys.argv[2] + "/part-1.parquet")
"""


@pytest.fixture(scope="module", params=["arrayrecord", "parquet"])
def corpus(request, tmp_path_factory) -> str:
    """The documents as ArrayRecord shards (prepared) or as Parquet files as a team has them."""
    directory = tmp_path_factory.mktemp("corpus")
    if request.param == "parquet":
        (directory / "texts.txt").write_text("\n".join(documents()) + "\n")
        (directory / "parquet").mkdir()
        done = subprocess.run(
            [str(TRAINER_PYTHON), "-c", PARQUET, str(directory / "texts.txt"), str(directory / "parquet")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return str(directory / "parquet" / "part-*.parquet")
    lines = [json.dumps({"text": text}) for text in documents()]
    (directory / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [
            str(TRAINER_PYTHON),
            "-m",
            "trainer.prepare_data",
            str(directory / "corpus.jsonl"),
            "--output",
            str(directory / "data"),
            "--shards",
            "3",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["pattern"]


def job_on(corpus: str, root: Path, run_name: str) -> JobSpec:
    return resolve_job(
        "tiny-cpu",
        run_name=run_name,
        checkpoint_root=str(root),
        max_failures=2,  # the killed run is killed twice
        overrides=OVERRIDES,
        dataset=Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=5, packing=True, files=corpus),
    )


def losses_by_step(log: str) -> dict[int, str]:
    """Each step's loss as MaxText printed it; a step run twice keeps its last run's."""
    return {int(step): loss for step, loss in STEP_LINE.findall(log)}


def data_position(job: JobSpec, step: int) -> str:
    """MaxText's saved Grain position at `step` (one file per process)."""
    return (Path(job.run_directory) / "checkpoints" / str(step) / "iter" / "process_0-of-1.json").read_text()


@dataclass(frozen=True)
class Baseline:
    """The uninterrupted run on a corpus: its losses, outputs and final data position."""

    losses: dict[int, str]
    outs: dict
    position: str
    batches: list[Replayed]  # what the job's pipeline gives for its steps, replayed


@pytest.fixture(scope="module")
def whole_pass(corpus, tmp_path_factory) -> list[Replayed]:
    """The job's pipeline replayed to the end of its one pass, once for the tests that read it
    (a replay is a process that starts MaxText's config and Grain)."""
    return replay(job_on(corpus, tmp_path_factory.mktemp("pass"), "pass"))


@pytest.fixture(scope="module")
def baseline(local_ray_head, corpus, whole_pass, tmp_path_factory) -> Baseline:
    job = job_on(corpus, tmp_path_factory.mktemp("whole"), "whole")
    whole = ProviderRun(local_ray_head, job).start()
    whole.join(timeout=420)
    assert whole.error is None and whole.outs is not None and whole.outs["status"] == "SUCCEEDED", whole.error
    losses = losses_by_step(whole.log())
    assert sorted(losses) == list(range(OVERRIDES["steps"]))
    # The outputs the job computes from its events, against an independent count: its pipeline
    # replayed outside Ray and MaxText's train loop. Tokens trained are the steps' targets; a
    # pass over a prepared corpus reads what the trim keeps of each document (manifest), and a
    # step reads its targets and each sequence's first token.
    batches = whole_pass[: OVERRIDES["steps"]]
    assert whole.outs["tokens_trained"] == sum(batch.tokens for batch in batches)
    if corpus.endswith(".array_record"):
        manifest = DatasetManifest.from_json((Path(corpus).parent / MANIFEST_NAME).read_text())
        assert manifest.token_lengths is not None
        kept = pass_tokens(manifest.token_lengths, max_target_length=OVERRIDES["max_target_length"], truncation=True)
        assert whole.outs["tokens_truncated"] == kept.truncated > 0
        read = sum(batch.tokens + sum(1 for sequence in batch.sequences if sequence) for batch in batches)
        assert whole.outs["epochs"] == round(read / kept.kept, 3)
    return Baseline(losses, whole.outs, data_position(job, OVERRIDES["steps"] - 1), batches)


@dataclass(frozen=True)
class Replayed:
    """A batch as the job's pipeline gives it (trainer/replay_data.py): its sequences' documents,
    and its target tokens as MaxText counts a step's."""

    sequences: list[list[int]]
    tokens: int


def replay(job: JobSpec, state: Path | None = None, batches: int | None = None) -> list[Replayed]:
    """The job's batches as its pipeline gives them, from the start or from a saved data
    position."""
    command = [str(TRAINER_PYTHON), "-m", "trainer.replay_data", "--job", job.to_json()]
    command += ["--state", str(state)] if state else []
    command += ["--batches", str(batches)] if batches is not None else []
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=PROJECT_ROOT, env={**os.environ, **CPU_WORKER_ENV}, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith((BATCH_PREFIX, TOKENS_PREFIX))]
    return [
        Replayed(json.loads(batch.removeprefix(BATCH_PREFIX)), int(tokens.removeprefix(TOKENS_PREFIX)))
        for batch, tokens in zip(lines[::2], lines[1::2], strict=True)
    ]


def test_every_document_is_read_exactly_once_per_epoch(whole_pass):
    """The pipeline the job reads, replayed to the end of its one pass: each document once."""
    read = Counter(document for batch in whole_pass for sequence in batch.sequences for document in sequence)
    assert read == Counter(range(len(documents()))), sorted(read.items())[:20]


def assert_resumed_exactly(
    run: ProviderRun, log: str, job: JobSpec, baseline: Baseline, corpus: str, unlogged: frozenset[int] = frozenset()
) -> None:
    """Step by step the baseline's losses (the restart read on from the saved data position), the
    same final position, the same corpus named and each step's tokens counted once; only a
    prepared corpus has a manifest, and so a content hash and a token count to count passes with."""
    assert run.error is None and run.outs is not None and run.outs["status"] == "SUCCEEDED", run.error
    losses = losses_by_step(log)
    assert set(losses) | unlogged == set(baseline.losses), sorted(losses)
    assert losses == {step: loss for step, loss in baseline.losses.items() if step in losses}
    assert data_position(job, OVERRIDES["steps"] - 1) == baseline.position
    prepared = corpus.endswith(".array_record")
    for key in ("dataset_files", "dataset_hash"):
        assert run.outs[key] == baseline.outs[key], key
        assert (run.outs[key] is not None) == (prepared or key == "dataset_files"), key
    # Each step's tokens once, exactly: a step saved at the notice and never logged counts as the
    # processes said before its checkpoint (before issue 32, as its successor's size).
    for key in ("tokens_trained", "tokens_truncated", "epochs"):
        assert run.outs[key] == baseline.outs[key], key
    assert (run.outs["epochs"] is not None) == prepared


def kill_during_a_checkpoint_write(run: ProviderRun, job: JobSpec, worker: int, after: int) -> tuple[int, bool]:
    """SIGKILLs `worker` as soon as Orbax is writing a checkpoint of a step past `after` (into a
    temporary directory it renames to the step when it commits). Returns the step, and whether
    the kill beat the commit: the disk says which, once the writer is dead."""
    directory = Path(job.run_directory) / "checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert run.outs is None, f"the run ended before a checkpoint write past step {after}: {run.outs}"
        writing = [int(found[1]) for entry in directory.iterdir() if (found := ORBAX_TEMPORARY.match(entry.name))]
        if (steps := [step for step in writing if step > after]) != []:
            os.kill(worker, signal.SIGKILL)
            return steps[0], steps[0] not in committed_steps(job)
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint write past step {after} within 300 s")


ORBAX_TEMPORARY = re.compile(r"(\d+)\.orbax-checkpoint-tmp")


def test_a_run_killed_twice_once_during_a_checkpoint_write_resumes_on_exactly_the_data_it_would_have_read(
    local_ray_head, tmp_path, corpus, baseline
):
    """Two interruptions in one run: the Ray Train worker SIGKILLed two steps past a checkpoint,
    then the restarted worker SIGKILLed while Orbax writes a later checkpoint. Each restart
    restores the last committed checkpoint (a write cut short is never restored), and the run's
    losses, data position and counts are the uninterrupted run's."""
    killed_job = job_on(corpus, tmp_path, "killed")
    killed = ProviderRun(local_ray_head, killed_job).start()
    killed.wait_for(lambda: 4 in committed_steps(killed_job), "the checkpoint at step 4", 300)
    first = the_worker(local_ray_head)
    killed.wait_for(lambda: max(killed.record().steps, default=-1) >= 6, "two steps past the checkpoint", 300)
    os.kill(first, signal.SIGKILL)
    killed.wait_for(lambda: RESTORE_LINE.search(killed.log()) is not None, "the restart's restore", 300)
    second = the_worker(local_ray_head)  # MaxText restores in the restarted worker
    assert second != first
    written, cut_short = kill_during_a_checkpoint_write(killed, killed_job, second, after=4)
    killed.join(timeout=420)
    restored = [int(step) for step in RESTORE_LINE.findall(killed.log())]
    assert len(restored) == 2 and restored[0] >= 4, killed.log()[-3000:]
    # The second restart restores the write the kill cut short only if it had committed.
    assert restored[1] < written if cut_short else restored[1] == written, (restored, written, cut_short)
    # The goodput outputs, against MaxText's own step lines: two restarts charged to maxFailures,
    # and exactly the steps the log shows run twice or more.
    outs = killed.outs
    assert outs is not None and (outs["restarts"], outs["failures"], outs["preemptions"]) == (2, 2, 0)
    runs = Counter(int(step) for step, _ in STEP_LINE.findall(killed.log()))
    assert outs["steps_recomputed"] == sum(count - 1 for count in runs.values()) >= 1
    assert outs["seconds_lost_to_restarts"] > 0 and 0 < outs["goodput_percent"] < 100
    assert_resumed_exactly(killed, killed.log(), killed_job, baseline, corpus)
    # The position the last restart restored is where the uninterrupted pipeline was: replayed
    # from it, the pipeline gives the uninterrupted run's next batches, document for document.
    steps, restored_at = OVERRIDES["steps"], restored[-1]
    position = Path(killed_job.run_directory) / "checkpoints" / str(restored_at) / "iter" / "process_0-of-1.json"
    assert replay(killed_job, position, steps - restored_at - 1) == baseline.batches[restored_at + 1 :]


# The preempted node's drain, as in tests/test_elastic_local.py: time for the notice to reach
# MaxText, the step in flight and the next, and the save.
DRAIN_SECONDS = 40


@pytest.mark.parametrize("corpus", ["arrayrecord"], indirect=True)
def test_a_run_preempted_mid_way_saves_at_the_notice_and_resumes_on_exactly_its_data(
    tmp_path, corpus, baseline, monkeypatch
):
    """A Spot node reclaimed: the notice's checkpoint carries the data position, and the worker
    group restarted on another node reads on from it. ArrayRecord only: the kill shows Parquet's
    position is restored from a checkpoint like ArrayRecord's."""
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.5)
    job = job_on(corpus, tmp_path, "preempted")
    with LocalRayHead(num_cpus=0, multi_node=True) as head, head.client_environment():
        spot = LocalRayNode(head, "spot", drain_seconds=DRAIN_SECONDS).start()
        spare: LocalRayNode | None = None
        try:
            run = ProviderRun(head, job).start()
            run.wait_for(lambda: max(run.record().steps, default=-1) >= 5, "step 5", 600)
            spot.preempt()
            spare = LocalRayNode(head, "spare").start()  # where the worker group restarts
            run.join(timeout=600)
            log = run.log()  # while the head that has it is up
        finally:
            for node in (spot, spare):
                if node is not None:
                    node.stop()
    saves = notice_saves(log)
    assert saves, log[-3000:]
    [saved] = saves.values()
    restored = [int(step) for step in RESTORE_LINE.findall(log)]
    assert restored and restored[-1] == saved["step"], (restored, saved)
    assert run.outs is not None and (run.outs["preemptions"], run.outs["failures"]) == (1, 0)
    # MaxText logs a step's line one step late: the step it stops at to save is not logged.
    assert_resumed_exactly(run, log, job, baseline, corpus, unlogged=frozenset({saved["step"]}))
