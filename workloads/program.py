"""The workloads program: one training job as a RayJob resource, on the infra stack's cluster or
on a Ray head reached directly."""

from __future__ import annotations

from typing import Any

import pulumi

from domain.workload_settings import WorkloadSettings
from workloads import job_inputs
from workloads.ray_job import RayJob

# Infra stack outputs the job needs.
INFRA_OUTPUTS = (
    "clusterEndpoint", "clusterCaCertificate", "namespace", "headServiceName", "dashboardPort",
    "checkpointRoot", "preset", "accelerator", "slices", "topology", "pricePerChipHourUsd",
)


def build(settings: WorkloadSettings) -> dict[str, Any]:
    if settings.infra_stack:
        infra = pulumi.StackReference(settings.infra_stack)
        cluster = pulumi.Output.all(**{name: infra.require_output(name) for name in INFRA_OUTPUTS})
        job = cluster.apply(lambda values: job_inputs.resolve_for_cluster(settings, values))
        inputs = job.apply(lambda resolved: job_inputs.ray_job_inputs(resolved, settings))
        target = {"gke": cluster.apply(job_inputs.gke_target)}
        cost = pulumi.Output.all(job, cluster).apply(
            lambda values: job_inputs.cost_estimate(values[0], settings, float(values[1]["pricePerChipHourUsd"]))
        )
    else:
        resolved = job_inputs.resolve_local(settings)
        inputs = pulumi.Output.from_input(job_inputs.ray_job_inputs(resolved, settings))
        job = pulumi.Output.from_input(resolved)
        target = {"address": settings.address}
        cost = pulumi.Output.from_input(job_inputs.cost_estimate(resolved, settings, 0.0))
    ray_job = RayJob(
        "training",
        entrypoint=inputs["entrypoint"],
        runtime_env=inputs["runtime_env"],
        metadata=inputs["metadata"],
        timeout_seconds=inputs["timeout_seconds"],
        total_steps=inputs["total_steps"],
        checkpoint_dir=inputs["checkpoint_dir"],
        **target,
    )
    return {
        "preset": job.apply(lambda resolved: resolved.preset),
        "runName": job.apply(lambda resolved: resolved.run_name),
        "submissionId": ray_job.submission_id,
        "status": ray_job.status,
        "startTime": ray_job.start_time,
        "endTime": ray_job.end_time,
        "durationSeconds": ray_job.duration_seconds,
        "stepsCompleted": ray_job.steps_completed,
        "finalLoss": ray_job.final_loss,
        "tokensPerSecondPerDevice": ray_job.tokens_per_second_per_device,
        "tflopsPerDevice": ray_job.tflops_per_device,
        "checkpointDir": ray_job.checkpoint_dir,
        "dashboardUrl": ray_job.dashboard_url,
        **{name: cost[name] for name in ("flopsPerStep", "assumedMfu", "estimatedStepSeconds",
                                         "estimatedJobHours", "estimatedJobDollars")},
    }
