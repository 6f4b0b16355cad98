"""MaxText's Grain pipeline on a real local Ray head (`slow`): a data pipeline that fails mid-run
fails the job instead of ending it as if it were done. (Training through Grain with its default
worker process, and resuming in it, is tests/test_data_resume.py's; Parquet through the smoke run,
tests/test_smoke.py's.)"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.training.dataset import GRAIN, SHIPPED_TOKENIZERS, Dataset
from domain.training.job import JobSpec, resolve_job

pytestmark = pytest.mark.slow

# Records of MaxText's Example type without the text feature its pipeline asks for.
WRONG_FEATURE = """
import sys
from array_record.python.array_record_module import ArrayRecordWriter
from maxtext.input_pipeline.protos import example_pb2
writer = ArrayRecordWriter(sys.argv[1], "group_size:1")
for index in range(50):
    example = example_pb2.Example()
    example.features.feature["body"].bytes_list.value.append(f"document {index}".encode())
    writer.write(example.SerializeToString())
writer.close()
"""


def trainer_python(*args: str) -> str:
    done = subprocess.run([str(TRAINER_PYTHON), *args], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def llama3_tokenizer() -> str:
    """The Llama 3 tokenizer MaxText ships in its package (by absolute path: MaxText's default,
    relative one, does not resolve in an installed package)."""
    package = trainer_python("-c", "import maxtext, os; print(os.path.dirname(maxtext.__file__))").strip()
    return str(Path(package) / "assets" / "tokenizers" / "tokenizer_llama3.tiktoken")


def grain_job(tmp_path: Path, pattern: str, tokenizer: str, run_name: str) -> JobSpec:
    return resolve_job(
        "tiny-cpu",
        run_name=run_name,
        checkpoint_root=str(tmp_path / "runs"),
        overrides={
            "dataset_type": "grain",
            "grain_train_files": pattern,
            "grain_file_type": "arrayrecord",
            "grain_worker_count": 1,
            "tokenizer_path": tokenizer,
            "tokenizer_type": "tiktoken",
            "vocab_size": 128256,  # the tokenizer's
        },
    )


def run(head, job: JobSpec, timeout: float = 420) -> tuple[JobStatus, str]:
    client = JobSubmissionClient(head.address)
    job_id = client.submit_job(entrypoint=job.entrypoint())
    status = client.get_job_status(job_id)
    deadline = time.monotonic() + timeout
    while not status.is_terminal():
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            pytest.fail(f"job {job_id} still {status} after {timeout} s")
        time.sleep(1)
        status = client.get_job_status(job_id)
    return status, client.get_job_logs(job_id)


def test_a_data_pipeline_that_fails_mid_run_fails_the_job(local_ray_head, tmp_path, llama3_tokenizer):
    """MaxText logs "Training stopped: `next(self.data_iterator)` failed ..." and returns as if the
    run were done; the trainer turns that into a failure that says why."""
    trainer_python("-c", WRONG_FEATURE, str(tmp_path / "data-00000-of-00001.array_record"))
    job = grain_job(tmp_path, str(tmp_path / "data-*-of-00001.array_record"), llama3_tokenizer, "broken-run")
    status, logs = run(local_ray_head, job)
    assert status == JobStatus.FAILED, logs[-3000:]
    assert "MaxText stopped training because its data pipeline failed" in logs
    assert "Column 'text' not found in dataset" in logs


PARQUET = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
texts = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 3 for i in range(24)]
pq.write_table(pa.table({"text": texts}), sys.argv[1])
"""


def test_a_run_that_runs_out_of_data_saves_its_last_step_and_fails_saying_so(local_ray_head, tmp_path):
    """24 short documents fill far fewer than 40 steps of one packed sequence: MaxText ends its
    loop and saves nothing; the trainer trains from the latest checkpoint to the last step the data
    held, saves it, and fails the job naming it."""
    trainer_python("-c", PARQUET, str(tmp_path / "corpus.parquet"))
    job = resolve_job(
        "tiny-cpu",
        run_name="short-run",
        checkpoint_root=str(tmp_path / "runs"),
        overrides={"steps": 40, "checkpoint_period": 5, "vocab_size": SHIPPED_TOKENIZERS["llama3"].vocab_size},
        dataset=Dataset(
            kind=GRAIN, tokenizer="llama3", shuffle_seed=0, packing=True, files=str(tmp_path / "*.parquet")
        ),
    )
    status, logs = run(local_ray_head, job)
    assert status == JobStatus.FAILED, logs[-3000:]
    said = re.search(
        r"training ran out of data after step (\d+) of 40: .*saved a final checkpoint there \(step (\d+)\)", logs
    )
    assert said is not None, logs[-3000:]
    last = int(said[1])
    assert int(said[2]) == last and 0 < last < 39
    committed = sorted(
        int(entry.name) for entry in (Path(job.run_directory) / "checkpoints").iterdir() if entry.name.isdigit()
    )
    assert committed[-1] == last, committed
    if last % 5 != 0:  # not a periodic checkpoint's step (0, 5, 10, ...): the save where the data ended
        assert f"the data ran out after step {last}; training steps" in logs
