"""Exact resume on a prepared corpus (`slow`): the tiny preset trains through the RayJob provider
on the local Ray head, once without a fault and once with its Ray Train worker SIGKILLed after a
checkpoint. The interrupted run restores MaxText's saved Grain position with the checkpoint, so
step by step its losses are the uninterrupted run's (same seed, same data in the same order: a
batch skipped or read twice would change every later loss), and its last checkpoint holds the
same data position."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.training.dataset import GRAIN, SHIPPED_TOKENIZERS, Dataset
from domain.training.job import JobSpec, resolve_job
from tests.support.provider_run import ProviderRun
from tests.test_trainer_local_run import RESTORE_LINE, STEP_LINE, committed_steps, the_worker

pytestmark = pytest.mark.slow

OVERRIDES = {
    "steps": 16,
    "checkpoint_period": 4,
    "per_device_batch_size": 2,
    "max_target_length": 128,
    "vocab_size": SHIPPED_TOKENIZERS["llama3"].vocab_size,
}
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def documents() -> list[str]:
    """400 distinct documents of 5 to 60 words."""
    return [
        f"doc {index}: " + " ".join(WORDS[(index * 7 + k) % len(WORDS)] for k in range(5 + index % 56))
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
        max_failures=1,
        overrides=OVERRIDES,
        dataset=Dataset(kind=GRAIN, tokenizer="llama3", shuffle_seed=5, packing=True, files=corpus),
    )


def losses_by_step(log: str) -> dict[int, str]:
    """Each step's loss as MaxText printed it; a step run twice keeps its last run's."""
    return {int(step): loss for step, loss in STEP_LINE.findall(log)}


def data_position(job: JobSpec, step: int) -> str:
    """MaxText's saved Grain position at `step` (one file per process)."""
    return (Path(job.run_directory) / "checkpoints" / str(step) / "iter" / "process_0-of-1.json").read_text()


def test_a_run_killed_mid_way_resumes_on_exactly_the_data_it_would_have_read(local_ray_head, tmp_path, corpus):
    whole = ProviderRun(local_ray_head, job_on(corpus, tmp_path, "whole")).start()
    whole.join(timeout=420)
    assert whole.error is None and whole.outs is not None and whole.outs["status"] == "SUCCEEDED", whole.error
    expected = losses_by_step(whole.log())
    assert sorted(expected) == list(range(OVERRIDES["steps"]))

    killed_job = job_on(corpus, tmp_path, "killed")
    killed = ProviderRun(local_ray_head, killed_job).start()
    killed.wait_for(lambda: 4 in committed_steps(killed_job), "the checkpoint at step 4", 300)
    worker = the_worker(local_ray_head)
    killed.wait_for(lambda: max(killed.record().steps, default=-1) >= 6, "two steps past the checkpoint", 300)
    os.kill(worker, signal.SIGKILL)
    killed.join(timeout=420)
    assert killed.error is None and killed.outs is not None and killed.outs["status"] == "SUCCEEDED", killed.error
    log = killed.log()
    restored = [int(step) for step in RESTORE_LINE.findall(log)]
    assert restored and restored[-1] >= 4, log[-3000:]
    assert killed.outs["steps_recomputed"] >= 1 and killed.outs["failures"] == 1
    # Step by step the same losses: the restart read on from the saved data position.
    assert losses_by_step(log) == expected
    last = OVERRIDES["steps"] - 1
    assert data_position(killed_job, last) == data_position(job_on(corpus, tmp_path, "whole"), last)
    # Both name the same corpus, and count each step's tokens once; only a prepared corpus has a
    # manifest, and so a content hash and a token count to count passes with.
    prepared = corpus.endswith(".array_record")
    for key in ("dataset_files", "dataset_hash", "tokens_trained", "epochs"):
        assert killed.outs[key] == whole.outs[key], key
        assert (killed.outs[key] is not None) == (prepared or key in ("dataset_files", "tokens_trained")), key
