"""A RayCluster's TPU worker groups against the stack's TPU node pools: they select an accelerator
and topology the pools provide, and give a job one replica per slice of that shape. Stack rules,
since they relate resources to each other; each group's own shape: `policies.rules.raycluster`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs

from domain.tpu.gke_labels import TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL
from domain.tpu.tpu_catalog import ACCELERATORS
from policies.rules.common import RAY_CLUSTER, StackView, TpuWorkerGroup, at, described, known, tpu_worker_groups
from policies.rules.declare import Rules
from policies.rules.raycluster_props import in_tree_autoscaling, slices_for_a_job

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()


def _ray_clusters(stack: StackView) -> Iterator[tuple[Any, str, TpuWorkerGroup]]:
    for cluster in stack.of_type(RAY_CLUSTER):
        label = described("RayCluster", cluster.name, cluster.props)
        for group in tpu_worker_groups(cluster.props):
            yield cluster, label, group


@RULES.stack(
    "raycluster-tpu-selectors",
    EnforcementLevel.MANDATORY,
    "TPU worker groups select a catalog accelerator and topology that the stack's TPU node pools provide.",
)
def tpu_selectors(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Worker pods must select an accelerator and topology that exist and that the stack's
    TPU node pools provide, or they stay pending forever."""
    stack = StackView(args.resources)
    pools = stack.tpu_pools()
    pools_known = stack.pools_decided() and all(isinstance(f.topology, str) for _, f in pools)
    provided = {(found.accelerator.name, found.topology) for _, found in pools} if pools_known else set()
    for cluster, label, group in _ray_clusters(stack):
        accelerator, topology = group.accelerator_label, group.topology
        if not known(accelerator, topology):
            continue
        if group.accelerator is None:
            valid = ", ".join(a.gke_accelerator for a in ACCELERATORS.values())
            problem = f"selects TPU accelerator {accelerator!r}, which is not in the catalog ({valid})"
        elif group.shape is None:
            problem = (
                f"selects topology {topology!r}, which TPU {group.accelerator.name} does not "
                f"offer ({', '.join(group.accelerator.shapes)})"
            )
        elif pools and pools_known and (group.accelerator.name, topology) not in provided:
            offered = ", ".join(sorted(f"{a} {t}" for a, t in provided))
            problem = (
                f"selects TPU {group.accelerator.name} {topology}, but the stack's TPU node pools provide {offered}"
            )
        else:
            continue
        report_violation(
            f"{label}: worker group '{group.name}' {problem}, so its pods would stay pending. Set "
            f"its {TPU_ACCELERATOR_LABEL} and {TPU_TOPOLOGY_LABEL} node "
            "selectors to the slices' accelerator and topology.",
            cluster.urn,
        )


@RULES.stack(
    "raycluster-replicas-match-slices",
    EnforcementLevel.MANDATORY,
    "TPU worker groups give a job one replica per TPU slice (node pool) of their shape.",
)
def replicas_match_slices(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """One worker-group replica per slice: the stack's TPU node pools of that shape (with the
    autoscaler, the most it may bring up: maxReplicas)."""
    stack = StackView(args.resources)
    pools = stack.tpu_pools()
    if not stack.pools_decided() or not all(isinstance(f.topology, str) for _, f in pools):
        return
    for cluster, label, group in _ray_clusters(stack):
        replicas, source = slices_for_a_job(at(cluster.props, "spec"), group.spec)
        if group.accelerator is None or not known(replicas):
            continue
        slices = sum(
            1
            for _, found in pools
            if found.accelerator.name == group.accelerator.name and found.topology == group.topology
        )
        if not slices or replicas == slices:
            continue
        effect = "replicas stay pending" if replicas > slices else "slices sit idle, billed"
        fix = (
            f"Set maxReplicas to {slices}"
            if source == "maxReplicas" and in_tree_autoscaling(at(cluster.props, "spec")) is True
            else f"Set replicas (and minReplicas, maxReplicas) to {slices}"
        )
        report_violation(
            f"{label}: worker group '{group.name}' gives a job {replicas} slices ({source}), but the "
            f"stack has {slices} TPU slice(s) (node pools) of {group.accelerator.name} {group.topology}, "
            f"so {effect}. {fix}.",
            cluster.urn,
        )
