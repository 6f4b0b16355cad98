"""The JaxTrainer for a MaxText job, built from a resolved JobSpec (see domain/training/job.py).

Both trainer programs are thin over this module: the multislice trainer runs a fixed number of
workers; the elastic one runs on any whole number of slices between a minimum and the maximum and
restores from MaxText's latest checkpoint after a failure. Nothing here hard-codes a TPU shape:
workers, topology and chips per worker come from the job.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.ray.preemption import NOTICE_POLL_SECONDS, RESTART_GRACE_SECONDS, run_completed
from domain.training.data_files import check_job_data, keep_record
from domain.training.dataset import more_passes
from domain.training.job import CPU_WORKER_ENV, JobSpec
from domain.training.job_events import NOTICE_SAVED_EVENT, event_line, maxtext_step
from domain.training.maxtext_config import base_config_path
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


# Imported from ray.train.v2 where declared: `ray.train` rebinds v2's classes only at run time, so
# a type checker sees v1's (tests/test_trainer_scaling.py checks both are the same class).


def scaling_config(job: JobSpec):
    from ray.train.v2.api.config import ScalingConfig

    if not job.use_tpu:
        # One worker per node, as on TPU VMs: a node drained for preemption takes one worker.
        return ScalingConfig(
            num_workers=job.num_workers,
            use_tpu=False,
            resources_per_worker=job.resources_per_worker,
            placement_strategy="SPREAD",
            elastic_resize_monitor_interval_s=job.resize_check_seconds,
        )
    # One worker per TPU VM holding all its chips; SPREAD puts each on its own host, and Ray
    # reserves whole slices (a SlicePlacementGroup) so every worker of a slice starts together.
    return ScalingConfig(
        num_workers=job.num_workers,
        use_tpu=True,
        topology=job.topology,
        accelerator_type=job.accelerator_type,
        resources_per_worker=job.resources_per_worker,
        placement_strategy="SPREAD",
        elastic_resize_monitor_interval_s=job.resize_check_seconds,
    )


def run_config(job: JobSpec):
    from ray.train.v2.api.config import FailureConfig, RunConfig

    return RunConfig(
        name=job.run_name,
        # Ray Train's own run state next to MaxText's checkpoints: shared by every host on GKE.
        storage_path=f"{job.checkpoint_root.rstrip('/')}/ray-train",
        # Preemptions have a budget of their own, so they cannot exhaust the retries meant for
        # errors; the restart lead is domain/ray/preemption.py's.
        failure_config=FailureConfig(
            max_failures=job.max_failures,
            max_preemption_failures=job.max_preemptions,
            preemption_grace_s=RESTART_GRACE_SECONDS,
        ),
        worker_runtime_env={} if job.use_tpu else {"env_vars": dict(CPU_WORKER_ENV)},
    )


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
    clock = StartClock(loop_started, _emit, cache_on=cache_dir is not None) if rank0 else None
    if rank0:
        _emit(
            "attempt",
            time=round(loop_started, 3),
            workers=context.get_world_size(),
            process_started=round(process_start_time(), 3),
        )
        _log_steps(clock)
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
            _emit(NOTICE_SAVED_EVENT, step=committed, seconds_to_deadline=to_deadline)
        print("waiting for Ray Train to restart the worker group on the slices that remain", flush=True)
    return False


def _emit(event: str, **fields: Any) -> None:
    print(event_line(event, **{"time": round(time.time(), 3), **fields}), flush=True)


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


class _DataWait:
    """The seconds MaxText's data loader spends fetching batches, for the step events to carry.
    MaxText (0.2.5) measures this only for Google's goodput library, through Cloud Logging, so
    the trainer times the loader's public fetch, DataLoader.load_next_batch_pre_sharding, itself:
    tests/test_trainer_data_wait.py fails if MaxText renames it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0
        # The real (not padding) target tokens of the last batch this process fetched: the
        # batch of the step MaxText runs (it fetches one batch per step, at the step's start).
        self.batch_tokens: int | None = None

    def add(self, seconds: float) -> None:
        with self._lock:
            self._seconds += seconds

    def take(self) -> float:
        with self._lock:
            seconds, self._seconds = self._seconds, 0.0
        return seconds

    def time(self, loader_class: Any) -> None:
        """Wraps `loader_class`'s fetch (once) so each call adds its duration here."""
        fetch = loader_class.load_next_batch_pre_sharding
        if getattr(fetch, "_timed_by", None) is self:
            return
        wait = self

        def timed(loader: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                batch = fetch(loader, *args, **kwargs)
            finally:
                wait.add(time.monotonic() - started)
            wait.batch_tokens = real_tokens(batch)
            return batch

        timed._timed_by = self  # type: ignore[attr-defined]
        loader_class.load_next_batch_pre_sharding = timed


DATA_WAIT = _DataWait()


def real_tokens(batch: Any) -> int | None:
    """This process's share of a batch's real target tokens, as MaxText counts them for a step
    (its total_weights: the target positions whose segment is not 0, padding). None for a batch
    without segments, and for one that is a global array across processes (MaxText's synthetic
    data on several processes), whose share is not this process's to count. Never raises: it
    runs inside MaxText's fetch of the batch."""
    import numpy as np

    segments = batch.get("targets_segmentation") if isinstance(batch, dict) else None
    if segments is None or getattr(segments, "is_fully_addressable", True) is False:
        return None
    try:
        return int(np.count_nonzero(np.asarray(segments)))
    except Exception:  # a count is not worth a failed step
        return None


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
            _emit(
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


class _StepEvents(logging.Handler):
    """A `step` event for each step MaxText logs, at the time it logged it, with the time spent
    waiting for data since the previous one; the group's first ends its start's clock."""

    def __init__(self, clock: StartClock | None) -> None:
        super().__init__(level=logging.INFO)
        self.clock = clock

    def emit(self, record: logging.LogRecord) -> None:
        step = maxtext_step(record.getMessage())
        if step is not None:
            data_seconds = round(DATA_WAIT.take(), 3)
            print(
                event_line(
                    "step", time=round(record.created, 3), step=step[0], seconds=step[1], data_seconds=data_seconds
                ),
                flush=True,
            )
            if self.clock is not None:
                self.clock.step_logged(record.created)


def _log_steps(clock: StartClock | None) -> None:
    # MaxText logs through absl, whose records go to the standard `absl` logger; one handler, of
    # this group's clock.
    absl = logging.getLogger("absl")
    for handler in [handler for handler in absl.handlers if isinstance(handler, _StepEvents)]:
        absl.removeHandler(handler)
    absl.addHandler(_StepEvents(clock))


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
                _emit("notice", deadline_ms=info.deadline_ms, preempted_ranks=info.preempted_ranks)
            os.kill(os.getpid(), signal.SIGTERM)  # JAX's handler: MaxText saves at the next step
            return


def build_trainer(job: JobSpec):
    from ray.train.v2.jax import JaxTrainer

    return JaxTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config=WorkerConfig.of(job).loop_config(),
        scaling_config=scaling_config(job),
        run_config=run_config(job),
    )


def parse_job(argv: Sequence[str], *, elastic: bool) -> JobSpec:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--job", help="the resolved job as JSON (what the workloads stack passes)")
    source.add_argument("--job-file", type=Path, help="a file holding the resolved job as JSON")
    args = parser.parse_args(argv)
    job = JobSpec.from_json(args.job if args.job is not None else args.job_file.read_text())
    if job.elastic != elastic:
        kind = "elastic" if job.elastic else "multislice"
        parser.error(f"this job was resolved for the {kind} trainer; run that program instead")
    return job


def main(argv: Sequence[str], *, elastic: bool) -> int:
    job = parse_job(argv, elastic=elastic)
    print(
        f"training {job.preset} as {job.run_name!r}: workers={job.num_workers} "
        f"topology={job.topology} slices={job.slices} max_failures={job.max_failures} "
        f"max_preemptions={'unlimited' if job.max_preemptions < 0 else job.max_preemptions} "
        f"output={job.run_directory}",
        flush=True,
    )
    if job.dataset is not None:
        problems = check_data(job)
        if problems:
            message = "training refused before its first step: " + "; ".join(problems)
            print(message, flush=True)
            _emit("failed", message=message)
            return 1
    data_end = Path(job.run_directory) / DATA_END_RECORD
    data_end.unlink(missing_ok=True)  # an earlier run's
    try:
        result = build_trainer(job).fit()
    except Exception as error:  # Ray Train raises what ended the run, with its budget spent
        message = failure_message(job, error)
        print(message, flush=True)
        _emit("failed", message=message)
        return 1
    if data_end.is_file():
        ended = json.loads(data_end.read_text())
        committed, last = ended["committed_step"], ended["last_step"]
        saved = (
            f"saved a final checkpoint there (step {committed})"
            if committed == last
            else f"the last checkpoint is step {committed}"
        )
        message = (
            f"training ran out of data after step {last} of {job.total_steps}: the corpus holds fewer sequences than "
            f"the run's steps x global batch; {saved}; {more_passes('N')}"
        )
        print(message, flush=True)
        _emit("failed", message=message)
        return 1
    print(f"run {job.run_name!r} finished; Ray Train state in {result.path}", flush=True)
    return 0


def _model_vocab(job: JobSpec) -> int:
    """The model's vocab_size as MaxText resolves it: the job's override, else the model's
    config, else base.yml's."""
    import yaml

    if "vocab_size" in job.maxtext_overrides:
        return int(job.maxtext_overrides["vocab_size"])
    model = job.maxtext_overrides.get("model_name", "default")
    for path in (Path(maxtext_package()) / "configs" / "models" / f"{model}.yml", base_config_path()):
        if path.is_file():
            value = (yaml.safe_load(path.read_text()) or {}).get("vocab_size")
            if value is not None:
                return int(value)
    raise RuntimeError(f"MaxText's config of {model} names no vocab_size")


def _tokenizer_vocab(job: JobSpec) -> int | None:
    """A tokenizer file's vocabulary, loaded as MaxText loads it (a shipped one's is known)."""
    assert job.dataset is not None
    if job.dataset.tokenizer_vocab is not None:
        return job.dataset.tokenizer_vocab
    from maxtext.input_pipeline.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(job.dataset.tokenizer, job.dataset.tokenizer_type, True, True, "")
    for count in ("n_words", "vocab_size"):
        if isinstance(getattr(tokenizer, count, None), int):
            return getattr(tokenizer, count)
    inner = getattr(tokenizer, "tokenizer", None)
    return len(inner) if inner is not None else None


def check_data(job: JobSpec) -> list[str]:
    """The job's data as this driver sees it (on GKE, the dataset bucket mounted on the head as
    on the workers), before any worker starts; keeps the run's data record when it passes."""
    assert job.dataset is not None
    devices = job.max_workers * (job.chips_per_host if job.use_tpu else 1)
    batch = float(job.maxtext_overrides.get("per_device_batch_size", "1"))
    try:
        tokenizer_vocab = _tokenizer_vocab(job)
    except Exception as error:  # any tokenizer MaxText cannot load is the problem
        return [f"tokenizer = {job.dataset.tokenizer!r} cannot be loaded as MaxText loads it ({error})"]
    global_batch = int(batch * devices)
    checked = check_job_data(
        job, global_batch=global_batch, model_vocab=_model_vocab(job), tokenizer_vocab=tokenizer_vocab
    )
    if checked.problems:
        return checked.problems
    if checked.record is not None:
        keep_record(job.run_directory, checked.record)
    for warning in checked.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    manifest = checked.manifest
    _emit(
        "dataset",
        files=job.dataset.files or job.dataset.hf_path,
        content_hash=manifest.content_hash if manifest else None,
        documents=manifest.documents if manifest else None,
        tokens=manifest.tokens if manifest and manifest.tokenizer == job.dataset.tokenizer else None,
        tokens_truncated=checked.pass_tokens.truncated if checked.pass_tokens else None,
        passes=job.dataset.epochs or 1,
        sequences_per_step=global_batch,
    )
    return []


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def failure_message(job: JobSpec, error: BaseException) -> str:
    """Which budget ran out, in the settings' own names, and Ray Train's reason."""
    from ray.train import ControllerError, PreemptionError, WorkerGroupError

    reason = _first_line(error)
    if isinstance(error, PreemptionError):
        return (
            f"training failed: preemptions used up maxPreemptions = {job.max_preemptions} "
            f"(worker errors are counted apart, against maxFailures = {job.max_failures}); last: {reason}"
        )
    if isinstance(error, WorkerGroupError):
        reason = "; ".join(f"rank {rank}: {_first_line(failure)}" for rank, failure in error.worker_failures.items())
        return (
            f"training failed: worker errors used up maxFailures = {job.max_failures} (preemptions are "
            f"counted apart, against maxPreemptions); last: {reason}"
        )
    if isinstance(error, ControllerError):
        return f"training failed: Ray Train's controller failed: {_first_line(error.controller_failure)}"
    return f"training failed: {type(error).__name__}: {reason}"
