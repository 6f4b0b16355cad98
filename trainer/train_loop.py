"""What each Ray Train worker of a MaxText job runs, `train_loop_per_worker`, and what the driver
(trainer/maxtext_trainer.py) gives it, `WorkerConfig`: MaxText's pre-training entry point with the
job's argv, a preemption notice turned into MaxText's own save, and data that runs out turned into
a final checkpoint. MaxText, Orbax and JAX are imported only inside the functions that use them,
so .venv's type check reads this module without them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.ray.preemption import NOTICE_POLL_SECONDS, run_completed
from domain.training.job import JobSpec
from domain.training.job_events import NOTICE_SAVED_EVENT, maxtext_step
from domain.training.maxtext_config import base_config_path
from trainer.events import DATA_WAIT, log_steps, print_event
from trainer.start_clock import StartClock, process_start_time

# Where MaxText keeps a run's checkpoints, under the run's directory: one Orbax step directory each.
CHECKPOINTS_SUBDIRECTORY = "checkpoints"


def checkpoint_directory(job: JobSpec) -> str:
    return f"{job.run_directory}/{CHECKPOINTS_SUBDIRECTORY}"


def maxtext_package() -> str:
    """Where this environment's MaxText is installed (its shipped tokenizers are files of it)."""
    import maxtext

    return os.path.dirname(maxtext.__file__)


def maxtext_argv(job: JobSpec, base_config: Path | None = None) -> list[str]:
    """MaxText's argv: program name, the installed base.yml, then `key=value` overrides."""
    package = maxtext_package() if job.dataset is not None else None
    return ["maxtext", str(base_config or base_config_path()), *job.maxtext_args(package)]


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What each worker of the group is given: Ray Train hands it to the train loop as its config,
    a dict keyed by these fields' names."""

    job: JobSpec
    argv: list[str]
    use_tpu: bool
    notice_poll_seconds: float
    checkpoint_dir: str
    run_directory: str
    total_steps: int | None

    @classmethod
    def of(cls, job: JobSpec) -> WorkerConfig:
        return cls(
            job=job,
            argv=maxtext_argv(job),
            use_tpu=job.use_tpu,
            notice_poll_seconds=NOTICE_POLL_SECONDS,
            checkpoint_dir=checkpoint_directory(job),
            run_directory=job.run_directory,
            total_steps=job.total_steps,
        )

    @classmethod
    def from_loop_config(cls, config: Mapping[str, Any]) -> WorkerConfig:
        return cls(**config)

    def loop_config(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Runs MaxText's pre-training entry point on this worker.

    MaxText is imported here, on the worker, so the driver never takes the TPU. Re-running with
    the same run_name restores the latest checkpoint under `checkpoint_directory(job)`, which
    is how a restarted worker group resumes.

    A preemption notice becomes a checkpoint at the next step (see PreemptionNotice); after that
    save this worker waits to be torn down instead of returning, because a worker group that
    returns has finished the run as far as Ray Train is concerned. A notice that comes while
    MaxText finishes the run's last steps changes nothing: the run is complete and the worker
    returns.
    """
    import ray.train

    loop_started = time.time()
    worker = WorkerConfig.from_loop_config(config)
    context = ray.train.get_context()
    rank0 = context.get_world_rank() == 0
    if not worker.use_tpu:
        _join_cpu_workers(context.get_world_rank(), context.get_world_size())
    cache_dir = worker.job.compile_cache_dir(os.environ.get(COMPILE_CACHE_ENV))
    # Rank 0 says how the group's start went; the other ranks start the same way.
    clock = StartClock(loop_started, print_event, cache_on=cache_dir is not None) if rank0 else None
    if rank0:
        print_event(
            "attempt",
            time=round(loop_started, 3),
            workers=context.get_world_size(),
            process_started=round(process_start_time(), 3),
        )
        log_steps(clock)
    notice = PreemptionNotice(poll_seconds=worker.notice_poll_seconds, report=rank0)
    from maxtext.common import checkpointing
    from maxtext.common.data_loader import DataLoader
    from maxtext.trainers.pre_train import train

    DATA_WAIT.time(DataLoader)

    mark_absl_flags_parsed()
    stopped = _DataStop()
    logging.getLogger("absl").addHandler(stopped)
    uninstall = clock.install(train, checkpointing) if clock is not None else None
    unsay = say_checkpointed_tokens(checkpointing, notice)
    # An empty jax_cache_dir is MaxText's "no cache" (its default is a folder in the pod).
    argv = [*worker.argv, f"jax_cache_dir={cache_dir or ''}"]
    notice.start()
    try:
        train.main(argv)
        if stopped.out_of_data and not notice.received:
            _save_where_the_data_ended(train.main, argv, worker.checkpoint_dir, stopped)
    finally:
        notice.stop()
        logging.getLogger("absl").removeHandler(stopped)
        unsay()
        if uninstall is not None:
            uninstall()
    if stopped.failure is not None:
        raise RuntimeError(f"MaxText stopped training because its data pipeline failed: {stopped.failure}")
    if stopped.out_of_data:
        # Not an error to retry (a restart would run out again): the run ends, and the driver
        # fails the job saying where the data ended and what was saved.
        if rank0:  # for the driver: Ray Train v2 keeps no metrics reported without a checkpoint
            committed = _latest_committed_step(worker.checkpoint_dir)
            ended = {"last_step": stopped.highest_step, "committed_step": -1 if committed is None else committed}
            (Path(worker.run_directory) / DATA_END_RECORD).write_text(json.dumps(ended))
        return
    if notice.received and not _report_the_notice_save(notice, worker.checkpoint_dir, worker.total_steps, rank0):
        threading.Event().wait()


def _save_where_the_data_ended(maxtext_main: Any, argv: list[str], checkpoint_dir: str, stopped: _DataStop) -> None:
    """MaxText ends its loop when the data runs out and saves nothing then (its train state is
    gone once the loop has stopped). So it is run once more, with `steps` cut to the steps the
    data held: it restores the latest checkpoint with its data position, trains the steps after it
    on the same batches again, and saves at completion (save_checkpoint_on_completion). The steps
    after the latest checkpoint are computed twice; the run ends on a checkpoint of its last step."""
    ran = stopped.highest_step + 1  # steps 0 .. highest_step trained
    committed = _latest_committed_step(checkpoint_dir)
    if ran <= 0 or (committed is not None and committed >= ran - 1):
        return
    print(
        f"the data ran out after step {ran - 1}; training steps {0 if committed is None else committed + 1} to "
        f"{ran - 1} again from the latest checkpoint, to save the last one",
        flush=True,
    )
    stopped.out_of_data = False
    maxtext_main([*argv, f"steps={ran}"])
    stopped.out_of_data = True


def _latest_committed_step(directory: str) -> int | None:
    from orbax.checkpoint.utils import checkpoint_steps

    return max(checkpoint_steps(directory), default=None)


def _report_the_notice_save(
    notice: PreemptionNotice, checkpoint_dir: str, total_steps: int | None, rank0: bool
) -> bool:
    """What MaxText did with the notice, said by rank 0 (the host that commits checkpoints), from
    what is committed now that MaxText has returned (it waits for the save before it stops).
    True if the run is complete, so the worker returns."""
    committed = _latest_committed_step(checkpoint_dir)
    if run_completed(committed, total_steps):
        if rank0:
            print(
                f"the preemption notice came after the run's last step ({committed}) was saved: the run is complete",
                flush=True,
            )
        return True
    if rank0:
        now = time.time()
        deadline = notice.deadline_ms / 1000 if notice.deadline_ms is not None else None
        to_deadline = round(deadline - now, 3) if deadline is not None else None
        if committed is None:
            print("MaxText stopped at the preemption notice, but no checkpoint of this run is committed", flush=True)
        else:
            when = (
                "with no deadline given"
                if to_deadline is None
                else f"{abs(to_deadline):.1f} s {'before' if to_deadline >= 0 else 'AFTER'} the node's deadline"
            )
            print(f"the checkpoint at the preemption notice is step {committed}, committed {when}", flush=True)
            print_event(NOTICE_SAVED_EVENT, step=committed, seconds_to_deadline=to_deadline)
        print("waiting for Ray Train to restart the worker group on the slices that remain", flush=True)
    return False


def mark_absl_flags_parsed() -> None:
    """MaxText's main is called here, not through absl's app.run, so absl's flags stay unparsed,
    and Grain's data workers read one: with grain_worker_count >= 1 the first batch raised
    UnparsedFlagAccessError. No flag is given on a command line here, so the defaults stand."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


# MaxText logs this and returns as if done when fetching a batch raises (not StopIteration).
DATA_STOP = "Training stopped: `next(self.data_iterator)` failed with "
# ... and when the pipeline runs out of data (StopIteration): the run ends early, as if done.
OUT_OF_DATA = "Training stopped: You may have run out of training data."
# Where the worker says, for the driver, that the data ended: beside the run's checkpoints.
DATA_END_RECORD = "data_end.json"


class _DataStop(logging.Handler):
    """Keeps the failure MaxText logs when its data pipeline raises."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.failure: str | None = None
        self.out_of_data = False
        self.highest_step = -1  # the highest step MaxText has logged as completed

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        step = maxtext_step(message)
        if step is not None:
            self.highest_step = max(self.highest_step, step[0])
        elif message.startswith(DATA_STOP):
            self.failure = message[len(DATA_STOP) :].strip()
        elif message.startswith(OUT_OF_DATA):
            self.out_of_data = True


def say_checkpointed_tokens(checkpointing_module: Any, notice: PreemptionNotice) -> Callable[[], None]:
    """Wraps MaxText's `checkpointing.maybe_save_checkpoint` so that, before a step's checkpoint
    may be written (a periodic one, or any after the preemption notice), this process says its
    share of the step's tokens (`step_tokens`): a run resumed from that checkpoint may never log
    the step. Returns what undoes it."""
    import jax

    save = checkpointing_module.maybe_save_checkpoint

    def maybe_save_checkpoint(checkpoint_manager: Any, state: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        given = kwargs.get("step", args[1] if len(args) > 1 else None)
        step = int(given) if given is not None else None  # None: the save at completion
        tokens = DATA_WAIT.batch_tokens
        period = getattr(config, "checkpoint_period", 0) or 0
        due = step is not None and (notice.received or (period > 0 and step % period == 0))
        if checkpoint_manager is not None and due and tokens is not None:
            print_event(
                "step_tokens",
                step=step,
                tokens=tokens,
                process=jax.process_index(),
                processes=jax.process_count(),
            )
        return save(checkpoint_manager, state, config, *args, **kwargs)

    checkpointing_module.maybe_save_checkpoint = maybe_save_checkpoint

    def uninstall() -> None:
        checkpointing_module.maybe_save_checkpoint = save

    return uninstall


def _join_cpu_workers(rank: int, world_size: int) -> None:
    """Joins this CPU worker to the group's JAX processes (Ray Train does it only for TPU and
    GPU workers): rank 0 starts JAX's coordinator on its node's Ray address, every rank learns
    where. Besides letting several CPU workers train one model (collectives over gloo), it
    installs JAX's preemption sync, which MaxText's save on SIGTERM needs even on one worker."""
    import jax
    import ray
    from ray.train.collective import broadcast_from_rank_zero

    address = None
    if rank == 0:
        # The address the node joined Ray with (loopback for a local cluster), not the host's
        # routable one that ray.util.get_node_ip_address() may give.
        node_id = ray.get_runtime_context().get_node_id()
        host = next(node["NodeManagerAddress"] for node in ray.nodes() if node["NodeID"] == node_id)
        with socket.socket() as probe:
            probe.bind((host, 0))
            address = f"{host}:{probe.getsockname()[1]}"
    address = broadcast_from_rank_zero(address)
    # Bound to that address only: JAX's coordinator listens on every interface by default.
    jax.distributed.initialize(
        address, num_processes=world_size, process_id=rank, coordinator_bind_address=address if rank == 0 else None
    )


class PreemptionNotice:
    """Turns Ray Train's preemption notice into MaxText's own save on preemption.

    Ray Train watches the cluster for nodes being drained for preemption (a Spot slice about to
    be reclaimed; on GKE, `ray start` drains its node when the pod gets SIGTERM) and tells the
    workers through `ray.train.get_preemption_info()`. MaxText never asks, but it does handle
    SIGTERM: with JAX's preemption sync installed (jax.distributed) and `enable_autocheckpoint`,
    every process agrees on the next step, saves a checkpoint there, and stops. So a thread asks
    Ray Train on a fixed cadence and, on the notice, sends SIGTERM to its own process. The call
    is a barrier across the workers (each asks the same number of times; all get rank 0's
    answer), so every worker of the group learns of the notice at the same call.
    """

    def __init__(self, poll_seconds: float, report: bool):
        self.poll_seconds = poll_seconds
        self.report = report
        self.received = False
        self.deadline_ms: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="preemption-notice", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        import ray.train

        while not self._stop.wait(self.poll_seconds):
            info = ray.train.get_preemption_info()
            if info is None or self._stop.is_set():
                continue
            self.received = True
            self.deadline_ms = info.deadline_ms
            if self.report:
                print_event("notice", deadline_ms=info.deadline_ms, preempted_ranks=info.preempted_ranks)
            os.kill(os.getpid(), signal.SIGTERM)  # JAX's handler: MaxText saves at the next step
            return
