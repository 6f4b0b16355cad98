"""The JaxTrainer for a MaxText job, built from a resolved JobSpec (see domain/training/job.py).

Both trainer programs are thin over this module: the multislice trainer runs a fixed number of
workers; the elastic one runs on any whole number of slices between a minimum and the maximum and
restores from MaxText's latest checkpoint after a failure. Nothing here hard-codes a TPU shape:
workers, topology and chips per worker come from the job.

This module is the driver's part: it checks the job's data, builds the trainer, runs it and says
how the run ended. What each worker runs is trainer/train_loop.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from domain.ray.preemption import RESTART_GRACE_SECONDS
from domain.training.data_files import check_job_data, keep_record
from domain.training.dataset import more_passes
from domain.training.job import CPU_WORKER_ENV, JobSpec
from domain.training.maxtext_config import base_config_path
from trainer.events import print_event
from trainer.train_loop import DATA_END_RECORD, WorkerConfig, maxtext_package, train_loop_per_worker

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
            print_event("failed", message=message)
            return 1
    data_end = Path(job.run_directory) / DATA_END_RECORD
    data_end.unlink(missing_ok=True)  # an earlier run's
    try:
        result = build_trainer(job).fit()
    except Exception as error:  # Ray Train raises what ended the run, with its budget spent
        message = failure_message(job, error)
        print(message, flush=True)
        print_event("failed", message=message)
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
        print_event("failed", message=message)
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
    print_event(
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
