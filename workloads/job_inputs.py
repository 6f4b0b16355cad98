"""The RayJob's inputs for a resolved job: the same for `pulumi up` and for the local smoke run."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.capacity import job_cost, train_flops_per_step
from domain.job import JobError, JobSpec, resolve_job
from domain.presets import PRESETS
from domain.tpu_catalog import accelerator_by_ray_type
from domain.workload_settings import WorkloadSettings

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def local_checkpoint_root(settings: WorkloadSettings) -> str:
    """A relative `checkpointRoot` is relative to the project, wherever Pulumi runs from."""
    root = Path(settings.checkpoint_root)
    return str(root if root.is_absolute() else PROJECT_ROOT / root)


def resolve_for_cluster(settings: WorkloadSettings, cluster: Mapping[str, Any]) -> JobSpec:
    """Resolves the job for the shape the infra stack built (its outputs in `cluster`)."""
    preset = settings.preset or cluster["preset"]
    chosen = PRESETS.get(preset)
    if chosen is not None and chosen.accelerator_name != cluster["accelerator"]:
        raise JobError(
            [
                f"preset = {preset!r} is for TPU {chosen.accelerator_name}, but the infra stack's "
                f"cluster has {cluster['accelerator']}; use a preset for {cluster['accelerator']}"
            ]
        )
    return resolve_job(
        preset,
        run_name=settings.run_name_for(preset),
        checkpoint_root=cluster["checkpointRoot"],
        slices=int(cluster["slices"]),
        topology=cluster["topology"],
        elastic=settings.elastic,
        min_slices=settings.min_slices,
        max_failures=settings.max_failures,
        overrides=settings.maxtext_overrides,
    )


def resolve_local(settings: WorkloadSettings) -> JobSpec:
    assert settings.preset is not None
    return resolve_job(
        settings.preset,
        run_name=settings.run_name_for(settings.preset),
        checkpoint_root=local_checkpoint_root(settings),
        elastic=settings.elastic,
        min_slices=settings.min_slices,
        max_failures=settings.max_failures,
        overrides=settings.maxtext_overrides,
    )


def gke_target(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """Where the head's Jobs API is, from the infra stack's outputs (no credentials)."""
    target = {
        "endpoint": cluster["clusterEndpoint"],
        "ca_certificate": cluster["clusterCaCertificate"],
        "namespace": cluster["namespace"],
        "service": cluster["headServiceName"],
        "port": int(cluster["dashboardPort"]),
        "cluster_id": cluster.get("clusterId"),
        "auth_secret": cluster.get("rayAuthSecret"),
    }
    return {key: value for key, value in target.items() if value is not None}


def ray_job_inputs(job: JobSpec, settings: WorkloadSettings) -> dict[str, Any]:
    """The RayJob's JOB_INPUTS for a resolved job. Refuses a job whose trainer program is
    missing here: the image is built from this tree, so a job naming a program that is not in it
    would only fail on the cluster."""
    if importlib.util.find_spec(job.trainer_module) is None:
        raise JobError(
            [
                f"the trainer program {job.trainer_module} is not in this checkout; restore "
                f"{job.trainer_module.replace('.', '/')}.py (and run ./scripts/setup)"
            ]
        )
    return {
        "entrypoint": job.entrypoint(),
        "runtime_env": dict(settings.runtime_env) or None,
        "metadata": {"preset": job.preset, "run_name": job.run_name},
        "timeout_seconds": settings.timeout_seconds,
        "total_steps": job.total_steps,
        "checkpoint_dir": job.run_directory,
    }


def cost_estimate(job: JobSpec, settings: WorkloadSettings, price_per_chip_hour: float) -> dict[str, Any]:
    """What the job should cost: its steps x an estimated step time (model FLOPs per step over
    what the chips deliver at the assumed MFU), at the chips' hourly price. None for CPU jobs."""
    if not job.use_tpu or job.total_steps is None:
        return dict.fromkeys(
            ("flopsPerStep", "assumedMfu", "estimatedStepSeconds", "estimatedJobHours", "estimatedJobDollars")
        )
    chips = job.max_workers * job.chips_per_host
    flops = train_flops_per_step(job.maxtext_overrides, chips=chips)
    estimate = job_cost(
        flops_per_step=flops,
        steps=job.total_steps,
        chips=chips,
        peak_tflops_per_chip=accelerator_by_ray_type(job.accelerator_type or "").peak_bf16_tflops_per_chip,
        assumed_mfu=settings.assumed_mfu,
        price_per_chip_hour_usd=price_per_chip_hour,
    )
    return {
        "flopsPerStep": flops,
        "assumedMfu": settings.assumed_mfu,
        "estimatedStepSeconds": round(estimate.step_seconds or 0, 3),
        "estimatedJobHours": round(estimate.job_hours or 0, 3),
        "estimatedJobDollars": estimate.job_dollars,
    }
