"""Limits an organization sets per stack through the pack's config: how many TPU chips and how
many dollars an hour one stack may hold, and the regions its data and clusters may live in.

    {"tpu-chip-cap": {"chipCap": 128}, "tpu-hourly-budget": {"budgetDollarsPerHour": 400},
     "allowed-regions": {"allowedRegions": ["us-east5", "europe-west4"]}}

Chips are counted from the TPU node pools (node count x chips per VM); a stack without TPU node
pools (Autopilot) is counted from its RayCluster TPU worker groups (replicas x hosts x chips per
host), the capacity GKE will create for them. Dollars are chips x the catalog's on-demand list
price per chip-hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from domain.tpu_catalog import Accelerator
from policies.rules.common import (
    BUCKET,
    CLUSTER,
    RAY_CLUSTER,
    SUBNETWORK,
    UNKNOWN,
    StackView,
    at,
    config_value,
    container_tpu_limit,
    described,
    known,
    plain,
    schema,
    tpu_worker_groups,
    whole_number,
)

CHIP_CAP_SCHEMA = schema(
    chipCap={
        "type": "integer",
        "minimum": 0,
        "default": 64,
        "description": "The most TPU chips one stack may provision.",
    }
)
BUDGET_SCHEMA = schema(
    budgetDollarsPerHour={
        "type": "number",
        "minimum": 0,
        "default": 200,
        "description": "The most one stack's TPU chips may cost per hour, at on-demand list prices.",
    }
)
REGIONS_SCHEMA = schema(
    allowedRegions={
        "type": "array",
        "items": {"type": "string"},
        "default": [],
        "description": "Regions buckets, subnets and clusters may use (for example us-east5); empty allows any.",
    }
)
_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


@dataclass(frozen=True)
class TpuCapacity:
    """TPU chips some resource provisions, and of which accelerator (None: not in the catalog)."""

    source: str  # the resource, as messages name it
    accelerator: Accelerator | None
    chips: int


def tpu_capacity(stack: StackView) -> list[TpuCapacity] | None:
    """Every TPU chip the stack provisions; None when some count is not known yet."""
    if not stack.pools_decided():
        return None
    pools = stack.tpu_pools()
    if pools:
        found = []
        for pool, slice_ in pools:
            if not known(slice_.node_count):
                return None
            chips = slice_.node_count * slice_.chips_per_vm
            found.append(TpuCapacity(f"node pool '{pool.name}'", slice_.accelerator, chips))
        return found
    found = []
    for cluster in stack.of_type(RAY_CLUSTER):
        for group in tpu_worker_groups(cluster.props):
            replicas = whole_number(at(group.spec, "replicas"))
            hosts = whole_number(at(group.spec, "numOfHosts"))
            limits = [container_tpu_limit(c) for c in group.containers]
            limits = [limit for limit in limits if limit is not UNKNOWN]
            if not known(replicas, hosts) or not limits:
                return None
            source = f"RayCluster '{cluster.name}' worker group '{group.name}'"
            found.append(TpuCapacity(source, group.accelerator, replicas * hosts * sum(limits)))
    return found


def _itemized(capacity: list[TpuCapacity]) -> str:
    return ", ".join(f"{c.chips} in {c.source}" for c in capacity)


def chip_cap(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """A typo in `slices` or `topology` should not reserve a pod's worth of TPUs."""
    capacity = tpu_capacity(StackView(args.resources))
    cap = config_value(args.get_config(), CHIP_CAP_SCHEMA, "chipCap")
    if not capacity:
        return
    total = sum(c.chips for c in capacity)
    if total > cap:
        report_violation(
            f"The stack provisions {total} TPU chips ({_itemized(capacity)}), over the cap of "
            f"{cap:g} chips per stack. Use fewer or smaller slices (the slices and topology "
            "settings), or raise the cap in the policy config: "
            f'{{"tpu-chip-cap": {{"chipCap": {total}}}}}.',
            None,
        )


def hourly_budget(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """What the stack's TPUs cost for every hour they exist, busy or idle."""
    capacity = tpu_capacity(StackView(args.resources))
    budget = config_value(args.get_config(), BUDGET_SCHEMA, "budgetDollarsPerHour")
    if not capacity or any(c.accelerator is None for c in capacity):
        return
    dollars = sum(c.chips * c.accelerator.price_per_chip_hour_usd for c in capacity)
    if dollars > budget:
        total = sum(c.chips for c in capacity)
        report_violation(
            f"The stack's {total} TPU chips ({_itemized(capacity)}) cost about ${dollars:,.2f} "
            f"an hour at on-demand list prices, over the budget of ${budget:,.2f} an hour. Use "
            "fewer or smaller slices, Spot capacity (spot) or a reservation, or raise "
            "budgetDollarsPerHour in the policy config for tpu-hourly-budget.",
            None,
        )


def _region(resource_type: str, props: dict[str, Any]) -> Any:
    """The region a bucket, subnet or cluster lives in (a zonal cluster's zone's region)."""
    if resource_type == BUCKET:
        location = at(props, "location")
        return location.lower() if isinstance(location, str) else UNKNOWN
    if resource_type == SUBNETWORK:
        return at(props, "region")
    if resource_type == CLUSTER:
        location = at(props, "location")
        zone = _ZONE.fullmatch(location) if isinstance(location, str) else None
        return zone.group(1) if zone else location
    return UNKNOWN


def allowed_regions(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Data residency: checkpoints, DCN subnets and clusters stay where the organization says."""
    allowed = config_value(args.get_config(), REGIONS_SCHEMA, "allowedRegions")
    if not allowed:
        return
    props = plain(args.props)
    region = _region(args.resource_type, props)
    if isinstance(region, str) and region not in allowed:
        kind = {BUCKET: "Bucket", SUBNETWORK: "Subnet", CLUSTER: "GKE cluster"}[args.resource_type]
        report_violation(
            f"{described(kind, args.name, props)} is in {region}, which is not an allowed region "
            f"({', '.join(allowed)}). Set gcp:region (and gcp:zone) to an allowed region, or "
            "add this one to allowedRegions in the policy config.",
            args.urn,
        )


ALL = [
    StackValidationPolicy(
        name="tpu-chip-cap",
        description="A stack provisions at most chipCap TPU chips.",
        validate=chip_cap,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=CHIP_CAP_SCHEMA,
    ),
    StackValidationPolicy(
        name="tpu-hourly-budget",
        description="A stack's TPU chips cost at most budgetDollarsPerHour at on-demand list prices.",
        validate=hourly_budget,
        enforcement_level=EnforcementLevel.ADVISORY,
        config_schema=BUDGET_SCHEMA,
    ),
    ResourceValidationPolicy(
        name="allowed-regions",
        description="Buckets, subnets and GKE clusters are in an allowed region (allowedRegions; empty allows any).",
        validate=allowed_regions,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=REGIONS_SCHEMA,
    ),
]
