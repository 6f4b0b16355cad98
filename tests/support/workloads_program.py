"""The workloads program under Pulumi mocks, fed a fake infra stack's outputs: the harness the
workloads-program tests share (the RayJob's inputs, the job spec in its entrypoint, a recorded
fit check)."""

from __future__ import annotations

import shlex

from domain.paths import INFRA_PROJECT, WORKLOADS_DIR, WORKLOADS_PROJECT
from domain.ray.resource_types import RAY_JOB
from domain.training.job import JobSpec
from tests.support.pulumi_harness import RecordingMonitor, run_program, stack_config
from workloads.config import read_settings
from workloads.program import build

PROJECT = WORKLOADS_PROJECT
INFRA_STACK = f"organization/{INFRA_PROJECT}/dev"
INFRA_OUTPUTS = {
    "clusterEndpoint": "203.0.113.10",
    "clusterCaCertificate": "Q0VSVA==",
    "namespace": "training",
    "headServiceName": "maxtext-tpu-cluster-head-svc",
    "dashboardPort": 8265,
    "checkpointRoot": "/data",
    "preset": "llama3-8b",
    "accelerator": "v6e",
    "slices": 2,
    "topology": "4x4",
    "pricePerChipHourUsd": 2.70,
}


def run_workloads(stack: str, secrets: tuple[str, ...] = (), infra_outputs=None, **overrides):
    config = stack_config(stack, WORKLOADS_DIR)
    config.update({f"{PROJECT}:{key}": value for key, value in overrides.items()})
    monitor = RecordingMonitor(stack_outputs={INFRA_STACK: infra_outputs or INFRA_OUTPUTS})
    run = run_program(
        lambda: build(read_settings()),
        config,
        project=PROJECT,
        stack=stack,
        monitor=monitor,
        secret_keys=frozenset(f"{PROJECT}:{key}" for key in secrets),
    )
    return run, run.one(RAY_JOB).inputs


def job_of(entrypoint: str) -> JobSpec:
    words = shlex.split(entrypoint)
    assert words[:3] == ["python", "-m", words[2]] and words[3] == "--job"
    return JobSpec.from_json(words[4])


def recorded_fit_check(job):
    """A fit check of exactly `job`'s configuration, with the 8B anchor's recorded profile."""
    from domain.perf import fit_results
    from domain.perf.maxtext_check import model_flops
    from tests.support.anchors import CALIBRATING_8B, anchor_named

    work = model_flops(job)  # as a fit check records it: MaxText's count
    return fit_results.FitResult(
        fits=True,
        slice_type="v6e-16",
        slices=2,
        chips=32,
        usable_gib=31.24,
        generation="v6e",
        tokens_per_chip=work.tokens_per_chip,
        model_flops_per_chip=work.per_chip,
        model_flops_source=work.source,
        profile=anchor_named(CALIBRATING_8B).profile.to_json(),
        configuration=fit_results.configuration(job, fit_results.libtpu_flags(job)),
    )
