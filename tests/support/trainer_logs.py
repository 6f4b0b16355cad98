"""What the local training runs' tests read from a run: MaxText's step and restore lines in the
job's log, the trainer's events for a checkpoint at a preemption notice, the checkpoint steps
Orbax committed, and the pid of the Ray Train worker."""

from __future__ import annotations

import re
from pathlib import Path

from ray.util.state import list_actors

from domain.training.job import JobSpec
from domain.training.job_events import NOTICE_SAVED_EVENT, parse_event

STEP_LINE = re.compile(r"completed step: (\d+), seconds: [\d.]+, .*?loss: ([-\d.naninf]+)")
RESTORE_LINE = re.compile(r"restoring from this run's directory step (\d+)")


def committed_steps(job: JobSpec) -> list[int]:
    """Orbax writes into a temporary directory and renames it to the step when it commits."""
    directory = Path(job.run_directory) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


def notice_saves(log: str) -> dict[float, dict]:
    """The trainer's events for the checkpoint at a preemption notice, by time (a line may be
    read twice)."""
    events = (parse_event(line) for line in log.splitlines())
    return {event["time"]: event for event in events if event is not None and event["event"] == NOTICE_SAVED_EVENT}


def the_worker(head) -> int:
    """The pid of the one Ray Train worker, a process of the Ray head this session started."""
    [worker] = list_actors(
        address=head.address,
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
    )
    return worker.pid
