"""A run's scalars, read from its log and written as TensorBoard events (workloads/ray_job/
tensorboard.py), read back with TensorBoard's own event reader: the series `tensorboard --logdir`
lists, each value the log's."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from domain.training.job_log import JobLog
from domain.training.run_scalars import (
    EVAL_LOSS,
    LOSS,
    STEP_SECONDS,
    TFLOPS_PER_DEVICE,
    TOKENS_PER_SECOND_PER_DEVICE,
    start_tag,
)
from domain.training.start_phases import StartPhases
from workloads.local_ray import free_port
from workloads.ray_job.tensorboard import JOB_LOG_RUN, ScalarWriter

VENV_BIN = Path(sys.executable).parent  # .venv's, where `tensorboard` is installed


def step_line(step: int, loss: str, seconds: float = 0.25) -> str:
    return (
        f"completed step: {step}, seconds: {seconds:.3f}, TFLOP/s/device: 0.012, Tokens/s/device: "
        f"{400 + step}.5, total_weights: 64, loss: {loss}"
    )


LOG = [
    step_line(0, "6.5", seconds=3.5),  # the first step holds the compile
    step_line(1, "6.25"),
    "Completed eval after train step 1, loss=6.125, perplexity=457.1, total_weights=256, avg_z_loss=0",
    step_line(2, "nan"),  # diverged: its loss is left out
]


def read_back(directory) -> EventAccumulator:
    events = EventAccumulator(str(directory))
    events.Reload()
    return events


def series(events: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(event.step, event.value) for event in events.Scalars(tag)]


def test_a_runs_log_becomes_the_series_tensorboard_lists(tmp_path):
    writer = ScalarWriter(str(tmp_path / "tensorboard"))
    JobLog(scalars=writer.add).add_lines(LOG)
    # Each worker group's start, as the goodput outputs hold it.
    writer.finish([vars(StartPhases(queued=6.5, worker_start=2.5, compile=3.25))])
    assert writer.problem is None and writer.wrote
    events = read_back(tmp_path / "tensorboard" / JOB_LOG_RUN)
    assert set(events.Tags()["scalars"]) == {
        LOSS,
        STEP_SECONDS,
        TOKENS_PER_SECOND_PER_DEVICE,
        TFLOPS_PER_DEVICE,
        EVAL_LOSS,
        start_tag("queued"),
        start_tag("worker_start"),
        start_tag("compile"),
    }
    assert series(events, LOSS) == [(0, 6.5), (1, 6.25)]  # the diverged step's nan is not plotted
    assert series(events, STEP_SECONDS) == [(0, 3.5), (1, 0.25), (2, 0.25)]
    assert series(events, TOKENS_PER_SECOND_PER_DEVICE) == [(0, 400.5), (1, 401.5), (2, 402.5)]
    assert series(events, EVAL_LOSS) == [(1, 6.125)]
    assert series(events, start_tag("compile")) == [(0, 3.25)]
    assert all(math.isfinite(value) for tag in events.Tags()["scalars"] for _, value in series(events, tag))


def test_a_path_that_is_a_file_is_a_problem_naming_it_not_an_error(tmp_path):
    (tmp_path / "tensorboard").write_text("not a directory")
    writer = ScalarWriter(str(tmp_path / "tensorboard"))
    JobLog(scalars=writer.add).add_lines(LOG)
    writer.finish(None)
    assert writer.problem is not None and not writer.wrote
    assert f"could not be written to {tmp_path / 'tensorboard' / JOB_LOG_RUN}" in writer.problem
    assert writer.written == 0


@pytest.mark.timed  # waits for the server to answer
def test_tensorboard_lists_the_runs_scalars(tmp_path):
    """`tensorboard --logdir` over the run's TensorBoard directory (the README's instruction)
    serves the series as the run `job-log`; started here on loopback, stopped by its pid."""
    writer = ScalarWriter(str(tmp_path / "tensorboard"))
    JobLog(scalars=writer.add).add_lines(LOG)
    writer.finish(None)
    port = free_port()
    command = [str(VENV_BIN / "tensorboard"), "--logdir", str(tmp_path / "tensorboard"), "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        tags = None
        deadline = time.monotonic() + 120
        while tags is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=5) as answer:
                    tags = json.load(answer)
            except OSError:
                time.sleep(0.5)
        assert tags is not None, server.stderr.read() if server.poll() is not None else "no answer in 120 s"
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert set(tags) == {JOB_LOG_RUN}
    assert {LOSS, STEP_SECONDS, EVAL_LOSS} <= set(tags[JOB_LOG_RUN])
