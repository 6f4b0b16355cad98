"""The infra stack's outputs as the workloads project reads them: parsed once, here, into a
`ClusterOutputs` (domain/config/stack_outputs.py declares each output, its type and whether it is
required), which the rest of the project reads by attribute."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.config.stack_outputs import READ_BY_WORKLOADS, ClusterOutputs, StackOutput, WorkloadsOutputs
from domain.setting import as_integer, as_number
from domain.stack_identity import integral
from domain.training.job import JobError
from workloads.jobs_api.gke_access import GkeTarget
from workloads.ray_job.record import CheckpointBucket

# The names a StackReference is asked for.
OUTPUT_NAMES = tuple(entry.name for entry in READ_BY_WORKLOADS)


def read_infra_outputs(infra_stack: str, raw: Mapping[str, Any]) -> ClusterOutputs:
    """The outputs of `infra_stack` (a StackReference's values, by output name), typed. Raises
    JobError naming every output that is missing or of the wrong kind."""
    missing = [
        entry.name for entry in READ_BY_WORKLOADS if entry.workloads == "required" and raw.get(entry.name) is None
    ]
    problems = []
    if missing:
        problems.append(
            f"the infra stack {infra_stack} has no output{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}; check that infraStack "
            "names a deployed infra stack and run pulumi up on it with this checkout"
        )
    values: dict[str, Any] = {}
    for entry in READ_BY_WORKLOADS:
        value = raw.get(entry.name)
        if value is None:
            values[entry.field] = None
            continue
        typed, wrong = _typed(entry, value)
        if wrong is not None:
            problems.append(f"the infra stack {infra_stack}'s output {entry.name} = {value!r} is not {wrong}")
        values[entry.field] = typed
    if problems:
        raise JobError(problems)
    return WorkloadsOutputs(**values)


def _typed(entry: StackOutput, value: Any) -> tuple[Any, str | None]:
    """`value` as the output's kind holds it, or what it should have been."""
    if entry.kind == "integer":
        number = as_integer(integral(value))
        lowest = entry.minimum
        if number is None or (lowest is not None and number < lowest):
            return None, "a whole number" + (f" of at least {lowest}" if lowest is not None else "")
        return number, None
    if entry.kind == "number":
        real = as_number(value)
        return (float(real), None) if real is not None else (None, "a number")
    if entry.kind == "array":
        return (list(value), None) if isinstance(value, list) else (None, "a list")
    if entry.kind == "object":
        return (dict(value), None) if isinstance(value, dict) else (None, "an object")
    return (value, None) if isinstance(value, str) else (None, "a string")


def gke_target(cluster: ClusterOutputs) -> GkeTarget:
    """Where the head's Jobs API is, from the infra stack's outputs (no credentials)."""
    return GkeTarget(
        endpoint=cluster.cluster_endpoint,
        ca_certificate=cluster.cluster_ca_certificate,
        namespace=cluster.namespace,
        service=cluster.head_service_name,
        port=cluster.dashboard_port,
        cluster_id=cluster.cluster_id or None,
        auth_secret=cluster.ray_auth_secret or None,
    )


def gke_inputs(cluster: ClusterOutputs) -> dict[str, Any]:
    """The RayJob's `gke` input."""
    return gke_target(cluster).as_inputs()


def checkpoint_bucket(cluster: ClusterOutputs) -> CheckpointBucket | None:
    """The RayJob's `checkpoint_bucket` input: the bucket behind the cluster's checkpoint mount
    (None where the infra stack does not export it)."""
    if not cluster.checkpoint_bucket_url:
        return None
    return CheckpointBucket(mount=cluster.checkpoint_root, url=cluster.checkpoint_bucket_url)
