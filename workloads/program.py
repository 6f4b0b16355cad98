"""The workloads program: one training job as a RayJob resource, on the infra stack's cluster or
on a Ray head reached directly.

The job is resolved and checked before its first resource is registered. The program is async
(`pulumi.run` in __main__.py) so that it can wait for the infra stack's outputs first: a job
refused for what those outputs say raises the domain's error (a ProblemsError with every problem)
from the program itself, as a refusal from the stack file does, rather than from inside an
Output, where the SDK would wrap it in "While processing input ..." with object reprs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from domain.config.stack_outputs import ClusterOutputs
from domain.config.workload_settings import key
from domain.training.job import JobError, JobSpec
from domain.workload_settings import WorkloadSettings
from workloads import job_inputs, job_resolution
from workloads.infra_outputs import OUTPUT_NAMES, checkpoint_bucket, gke_inputs, read_infra_outputs
from workloads.job_inputs import COST_OUTPUTS, JobPlan
from workloads.ray_job import RayJob, RayJobGuard
from workloads.ray_job.migration import LEGACY_JOB_ID, legacy_submission_id
from workloads.ray_job.record import JOB_INPUTS, submission_id


@dataclass(frozen=True)
class _Placed:
    """The job where it runs: the job resolved there, the RayJob's JOB_INPUTS, its target input
    (`gke` or `address`) and the cost estimate's outputs."""

    job: pulumi.Output[JobSpec]
    inputs: pulumi.Output[dict[str, Any]]
    target: dict[str, pulumi.Output[Any]]
    cost: pulumi.Output[dict[str, Any]]


async def build(settings: WorkloadSettings) -> dict[str, Any]:
    """Registers the job's resources and returns the stack outputs. Raises the domain's
    JobError, before the guard or the job is registered, when the job cannot run.

    `settings.secrets` names the settings set as secrets: a secret runtime env keeps the job's
    runtime env secret; any other secret setting (it reaches the command) keeps the whole job
    description secret, in the resource's inputs, outputs and the exports derived from it."""
    secret_job = bool(settings.secrets - {key(WorkloadSettings.runtime_env)})
    infra_stack = settings.infra_stack
    placed = await _on_cluster(settings, infra_stack, secret_job) if infra_stack else _on_head(settings, secret_job)
    props: dict[str, pulumi.Input[Any]] = {name: placed.inputs[name] for name in JOB_INPUTS}
    if settings.is_secret(WorkloadSettings.runtime_env):
        props["runtime_env"] = pulumi.Output.secret(props["runtime_env"])
    props.update(placed.target)
    props.update(settings.identity.as_inputs())
    # The submission id is a digest of the inputs: it names the job, it does not reveal it.
    identified = pulumi.Output.all(**props)
    guard = RayJobGuard(
        "training-guard",
        job_id=pulumi.Output.unsecret(identified.apply(submission_id)),
        # The same job's id in the first releases' form: a guard they wrote keeps guarding it.
        previous_job_id=pulumi.Output.unsecret(identified.apply(legacy_submission_id)),
        address=placed.target.get("address"),
        gke=placed.target.get("gke"),
    )
    ray_job = RayJob(
        "training",
        {**props, LEGACY_JOB_ID: guard.legacy_job_id},
        opts=pulumi.ResourceOptions(depends_on=[guard]),
    )
    return {
        "preset": placed.job.apply(lambda resolved: resolved.preset),
        "runName": placed.job.apply(lambda resolved: resolved.run_name),
        **ray_job.stack_outputs(),
        **{name: placed.cost[name] for name in COST_OUTPUTS},
    }


async def _on_cluster(settings: WorkloadSettings, infra_stack: str, secret_job: bool) -> _Placed:
    """The job on the infra stack's cluster. Its outputs are known in previews too, so the job is
    resolved, planned and checked here, before anything is registered; unknown, that is left to
    the apply."""
    infra = pulumi.StackReference(infra_stack)
    raw = pulumi.Output.all(**{name: infra.get_output(name) for name in OUTPUT_NAMES})
    values = await raw.future()
    known = _cluster_plan(settings, infra_stack, values) if values is not None else None
    if known is not None:
        problems, warnings = job_resolution.bucket_data_check(known.plan.job, known.cluster)
        if problems:
            raise JobError(problems)
        for warning in warnings:
            pulumi.log.warn(warning)
    planned = raw.apply(lambda values: known if known is not None else _cluster_plan(settings, infra_stack, values))
    job = planned.apply(lambda cluster_plan: cluster_plan.plan.job)
    inputs = planned.apply(lambda cluster_plan: cluster_plan.plan.inputs)
    cost = planned.apply(lambda cluster_plan: cluster_plan.plan.cost.outputs())
    if secret_job:
        job, inputs, cost = pulumi.Output.secret(job), pulumi.Output.secret(inputs), pulumi.Output.secret(cost)
    return _Placed(
        job=job,
        inputs=inputs,
        target={"gke": planned.apply(lambda cluster_plan: gke_inputs(cluster_plan.cluster))},
        cost=cost,
    )


def _on_head(settings: WorkloadSettings, secret_job: bool) -> _Placed:
    """The job on the Ray head at the stack's address, resolved, planned and checked here."""
    resolved = job_resolution.resolve_local(settings, warn=pulumi.log.warn)
    planned = job_inputs.plan(resolved, settings, price_per_chip_hour=0.0, warn=pulumi.log.warn)
    job = pulumi.Output.from_input(resolved)
    if secret_job:
        job = pulumi.Output.secret(job)
    return _Placed(
        job=job,
        inputs=job.apply(lambda _: planned.inputs),
        target={"address": pulumi.Output.from_input(settings.address)},
        cost=pulumi.Output.from_input(planned.cost.outputs()),
    )


@dataclass(frozen=True)
class _ClusterPlan:
    """The job planned for the infra stack's cluster, beside that cluster's outputs."""

    cluster: ClusterOutputs
    plan: JobPlan


def _cluster_plan(settings: WorkloadSettings, infra_stack: str, values: dict[str, Any]) -> _ClusterPlan:
    cluster = read_infra_outputs(infra_stack, values)
    job = job_resolution.resolve_for_cluster(settings, cluster)
    return _ClusterPlan(
        cluster,
        job_inputs.plan(
            job,
            settings,
            price_per_chip_hour=cluster.price_per_chip_hour_usd,
            cost_basis=cluster.cost_basis,
            checkpoint_bucket=checkpoint_bucket(cluster),
            warn=pulumi.log.warn,
        ),
    )
