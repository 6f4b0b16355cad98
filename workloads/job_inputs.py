"""The RayJob's inputs for a resolved job: the same for `pulumi up` and for the local smoke run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from domain.job import JobError, JobSpec, resolve_job
from domain.presets import PRESETS
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
        raise JobError([
            f"preset = {preset!r} is for TPU {chosen.accelerator_name}, but the infra stack's "
            f"cluster has {cluster['accelerator']}; use a preset for {cluster['accelerator']}"
        ])
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
    return {
        "endpoint": cluster["clusterEndpoint"],
        "ca_certificate": cluster["clusterCaCertificate"],
        "namespace": cluster["namespace"],
        "service": cluster["headServiceName"],
        "port": int(cluster["dashboardPort"]),
    }


def ray_job_inputs(job: JobSpec, settings: WorkloadSettings) -> dict[str, Any]:
    return {
        "entrypoint": job.entrypoint(),
        "runtime_env": dict(settings.runtime_env) or None,
        "metadata": {"preset": job.preset, "run_name": job.run_name},
        "timeout_seconds": settings.timeout_seconds,
        "total_steps": job.total_steps,
        "checkpoint_dir": job.run_directory,
    }
