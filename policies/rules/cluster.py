"""The GKE cluster: what the TPU workloads need from the control plane, and keeping a production
cluster from being deleted by a stray `pulumi destroy`.

Standard-only rules skip Autopilot clusters, which always run Workload Identity and Dataplane V2.
"""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
)

from domain.gcp import gke
from policies.rules.common import CLUSTER, UNKNOWN, at, described, known, on, plain
from policies.rules.declare import Rules

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

WORKLOAD_POOL_SUFFIX = ".svc.id.goog"


def _cluster(args: ResourceValidationArgs) -> tuple[dict[str, Any], str, Any] | None:
    """(props, label, mode) of a GKE cluster; mode is `standard`, `autopilot` or UNKNOWN."""
    if args.resource_type != CLUSTER:
        return None
    props = plain(args.props)
    # Unset means Standard (GKE's default), which is how the Standard program leaves it.
    autopilot = props.get("enableAutopilot", False)
    mode = "autopilot" if autopilot is True else "standard" if autopilot is False else UNKNOWN
    return props, described("GKE cluster", args.name, props), mode


def _below(version: str, minimum: str) -> bool | None:
    """Whether `version` is older than `minimum`; None when a partial version (`1.35`) or an
    alias (`latest`) could resolve to either side."""
    wanted = gke.parse_version(minimum)
    try:
        return gke.parse_version(version) < wanted
    except ValueError:
        numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("-", 1)[0])[:3])
        if not numbers or numbers == wanted[: len(numbers)]:
            return None
        return numbers < wanted[: len(numbers)]


@RULES.resource(
    "gke-cluster-dranet-version",
    EnforcementLevel.MANDATORY,
    "GKE clusters run a version with managed DRANET for their mode.",
)
@on(_cluster)
def dranet_version(
    props: dict[str, Any], label: str, mode: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Managed DRANET, which hands the DCN NICs to the workers, needs a minimum GKE version."""
    version = at(props, "minMasterVersion")
    if not known(mode) or not isinstance(version, str):
        return
    minimum = gke.DRANET_MINIMUM_VERSION[mode]
    if _below(version, minimum):
        report_violation(
            f"{label} asks for GKE {version}, older than {minimum}, the first {mode} version with "
            "managed DRANET: the TPU workers would never get their DCN NICs. Set "
            f"min_master_version to {minimum} or later (gkeVersion in the stack config).",
            args.urn,
        )


@RULES.resource(
    "gke-cluster-workload-identity",
    EnforcementLevel.MANDATORY,
    "Standard GKE clusters enable Workload Identity.",
)
@on(_cluster)
def workload_identity(
    props: dict[str, Any], label: str, mode: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Pods reach the checkpoint bucket as their Kubernetes service account, never a key."""
    pool = at(props, "workloadIdentityConfig", "workloadPool")
    if mode != "standard" or not isinstance(pool, str):
        return
    if not pool.endswith(WORKLOAD_POOL_SUFFIX) or pool == WORKLOAD_POOL_SUFFIX:
        report_violation(
            f"{label} has workload pool {pool!r}, so Workload Identity is off: Ray pods could "
            "not reach the checkpoint bucket without a service account key. Set "
            f"workload_identity_config={{'workload_pool': 'PROJECT{WORKLOAD_POOL_SUFFIX}'}}.",
            args.urn,
        )


@RULES.resource(
    "gke-cluster-dataplane-v2",
    EnforcementLevel.MANDATORY,
    "Standard GKE clusters use Dataplane V2 (ADVANCED_DATAPATH).",
)
@on(_cluster)
def dataplane_v2(
    props: dict[str, Any], label: str, mode: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Managed DRANET runs on Dataplane V2 only."""
    provider = at(props, "datapathProvider")
    if mode == "standard" and known(provider) and provider != "ADVANCED_DATAPATH":
        report_violation(
            f"{label} uses datapath provider {provider!r}: managed DRANET (the DCN NICs of the "
            "TPU workers) needs Dataplane V2. Set datapath_provider='ADVANCED_DATAPATH'.",
            args.urn,
        )


@RULES.resource(
    "gke-cluster-ray-operator",
    EnforcementLevel.MANDATORY,
    "GKE clusters enable the Ray operator add-on.",
)
@on(_cluster)
def ray_operator(
    props: dict[str, Any], label: str, _: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Without the add-on nothing reconciles the RayCluster: TPU nodes would idle, billed."""
    configs = at(props, "addonsConfig", "rayOperatorConfigs")
    if isinstance(configs, list) and (len(configs) == 0 or at(configs, 0, "enabled") is False):
        report_violation(
            f"{label} has the Ray operator add-on off: nothing would create the Ray head and "
            "workers, while the TPU nodes are billed. Set "
            "addons_config.ray_operator_configs=[{'enabled': True}].",
            args.urn,
        )


@RULES.resource(
    "gke-cluster-gcs-fuse",
    EnforcementLevel.MANDATORY,
    "GKE clusters enable the GCS FUSE CSI driver.",
)
@on(_cluster)
def gcs_fuse(
    props: dict[str, Any], label: str, _: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Checkpoints are written to the bucket through the GCS FUSE CSI driver."""
    if at(props, "addonsConfig", "gcsFuseCsiDriverConfig", "enabled") is False:
        report_violation(
            f"{label} has the GCS FUSE CSI driver off: the Ray pods cannot mount the checkpoint "
            "bucket and never start. Set addons_config.gcs_fuse_csi_driver_config="
            "{'enabled': True}.",
            args.urn,
        )


@RULES.resource(
    "gke-cluster-production-deletion-protection",
    EnforcementLevel.MANDATORY,
    "GKE clusters labelled environment=production have deletion protection on.",
)
@on(_cluster)
def production_deletion_protection(
    props: dict[str, Any], label: str, _: Any, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A production cluster must survive a `pulumi destroy` run against the wrong stack."""
    environment = at(props, "resourceLabels", "environment")
    if environment == "production" and at(props, "deletionProtection") is False:
        report_violation(
            f"{label} is labelled environment=production but has deletion protection off: one "
            "`pulumi destroy` would delete it with everything running on it. Set "
            "`pulumi config set deletionProtection true` (deletion_protection=True).",
            args.urn,
        )
