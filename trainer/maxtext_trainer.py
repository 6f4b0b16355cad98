"""The JaxTrainer for a MaxText job, built from a resolved JobSpec (see domain/job.py).

Both trainer programs are thin over this module: the multislice trainer runs a fixed number of
workers; the elastic one runs on any whole number of slices between a minimum and the maximum and
restores from MaxText's latest checkpoint after a failure. Nothing here hard-codes a TPU shape:
workers, topology and chips per worker come from the job.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from domain.job import JobSpec
from domain.maxtext_config import base_config_path

# Environment for CPU workers: JAX on the CPU backend, and MaxText without Google Cloud clients
# (faster start, nothing to authenticate on a laptop).
CPU_WORKER_ENV = {"JAX_PLATFORMS": "cpu", "DECOUPLE_GCLOUD": "TRUE"}


def maxtext_argv(job: JobSpec, base_config: Path | None = None) -> list[str]:
    """MaxText's argv: program name, the installed base.yml, then `key=value` overrides."""
    return ["maxtext", str(base_config or base_config_path()), *job.maxtext_args()]


def scaling_config(job: JobSpec):
    from ray.train import ScalingConfig

    if not job.use_tpu:
        return ScalingConfig(num_workers=job.num_workers, use_tpu=False)
    # One worker per TPU VM holding all its chips; SPREAD puts each on its own host, and Ray
    # reserves whole slices (a SlicePlacementGroup) so every worker of a slice starts together.
    return ScalingConfig(
        num_workers=job.num_workers,
        use_tpu=True,
        topology=job.topology,
        accelerator_type=job.accelerator_type,
        resources_per_worker={"TPU": job.chips_per_host},
        placement_strategy="SPREAD",
    )


def run_config(job: JobSpec):
    from ray.train import FailureConfig, RunConfig

    return RunConfig(
        name=job.run_name,
        # Ray Train's own run state next to MaxText's checkpoints: shared by every host on GKE.
        storage_path=f"{job.checkpoint_root.rstrip('/')}/ray-train",
        # Two budgets: worker errors use up max_failures; a node drained for preemption (a Spot
        # slice reclaimed) uses up max_preemption_failures instead, so preemptions cannot exhaust
        # the retries meant for real errors.
        failure_config=FailureConfig(max_failures=job.max_failures, max_preemption_failures=job.max_preemptions),
        worker_runtime_env={} if job.use_tpu else {"env_vars": dict(CPU_WORKER_ENV)},
    )


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Runs MaxText's pre-training entry point on this worker.

    MaxText is imported here, on the worker, so the driver never takes the TPU. Re-running with
    the same run_name restores the latest checkpoint under `<root>/<run_name>/checkpoints`,
    which is how a restarted worker group resumes.
    """
    from maxtext.trainers.pre_train.train import main as maxtext_main

    maxtext_main(config["argv"])


def build_trainer(job: JobSpec):
    from ray.train.v2.jax import JaxTrainer

    return JaxTrainer(
        train_loop_per_worker=train_loop_per_worker,
        train_loop_config={"argv": maxtext_argv(job)},
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
    result = build_trainer(job).fit()
    print(f"run {job.run_name!r} finished; Ray Train state in {result.path}", flush=True)
    return 0 if result.error is None else 1
