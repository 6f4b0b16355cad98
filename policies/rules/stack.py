"""Limits an organization sets per stack through the pack's config: how many TPU chips one stack
may hold, what they may cost an hour while a job trains and a day while none runs, and the
regions its data and clusters may live in.

    {"tpu-chip-cap": {"chipCap": 128}, "tpu-hourly-budget": {"budgetDollarsPerHour": 400},
     "tpu-idle-budget": {"idleBudgetDollarsPerDay": 0},
     "allowed-regions": {"allowedRegions": ["us-east5", "europe-west4"]}}

Chips are counted from the TPU node pools (a fixed node count, or an autoscaled pool's most nodes
while training and fewest while idle, x chips per VM); a stack without TPU node pools (Autopilot)
is counted from its RayCluster TPU worker groups (replicas, or maxReplicas while training and
minReplicas while idle when autoscaled, x hosts x chips per host), what GKE will create for them.
Dollars are chips x the catalog's list price per chip-hour for the pool's capacity (on demand,
Spot, flex-start; a reservation at the on-demand price) in its region; where the catalog has no
price for that capacity, the region's on-demand price, which no choice exceeds, bounds it (an
Autopilot ComputeClass may obtain any of its choices, so it is bounded the same way).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
)

from domain.perf.capacity import HOURS_PER_DAY
from domain.tpu.capacity_choices import FLEX_START, ON_DEMAND, RESERVATION, SPOT
from domain.tpu.tpu_catalog import Accelerator, zone_region
from policies.rules.common import (
    BUCKET,
    CLUSTER,
    RAY_CLUSTER,
    SUBNETWORK,
    UNKNOWN,
    StackView,
    at,
    container_tpu_limit,
    described,
    known,
    plain,
    tpu_worker_groups,
    whole_number,
)
from policies.rules.declare import ConfigKey, Rules
from policies.rules.raycluster_props import in_tree_autoscaling, slices_for_a_job

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

# A whole number of chips, which the engine sends as a JSON number (a float).
CHIP_CAP = ConfigKey[float](
    "chipCap",
    "integer",
    minimum=0,
    default=64,
    description="The most TPU chips one stack may provision.",
)
BUDGET_DOLLARS_PER_HOUR = ConfigKey[float](
    "budgetDollarsPerHour",
    "number",
    minimum=0,
    default=200,
    description="The most one stack's TPU chips may cost per hour while a job trains (every slice up), at list prices.",
)
IDLE_BUDGET_DOLLARS_PER_DAY = ConfigKey[float](
    "idleBudgetDollarsPerDay",
    "number",
    minimum=0,
    default=0,
    description="The most one stack's TPU chips may cost per day while no job runs (the slices it "
    "keeps up), at list prices; 0 asks every stack to scale its slices to zero while idle.",
)
ALLOWED_REGIONS = ConfigKey[list[str]](
    "allowedRegions",
    "array",
    items={"type": "string"},
    default=[],
    description="Regions buckets, subnets and clusters may use (for example us-east5); empty allows any.",
)
_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


@dataclass(frozen=True)
class TpuCapacity:
    """TPU chips some resource provisions, and of which accelerator (None: not in the catalog):
    all of them while a job trains, the ones kept up while none runs, how they are obtained
    (None: not known, as on Autopilot) and where (None: not known)."""

    source: str  # the resource, as messages name it
    accelerator: Accelerator | None
    training_chips: int
    idle_chips: int
    capacity: str | None = None
    region: str | None = None


def _pool_capacity(props: dict[str, Any]) -> str:
    """How a TPU node pool's nodes are obtained, from its node config."""
    config = at(props, "nodeConfig")
    if at(config, "flexStart") is True:
        return FLEX_START
    if at(config, "spot") is True or at(config, "preemptible") is True:
        return SPOT
    if at(config, "reservationAffinity", "consumeReservationType") == "SPECIFIC_RESERVATION":
        return RESERVATION
    return ON_DEMAND


def _location_region(location: Any) -> str | None:
    """`us-east5-b` -> `us-east5`; a region stays itself; None when not known."""
    if not isinstance(location, str):
        return None
    return zone_region(location) if _ZONE.fullmatch(location) or "-ai" in location else location


def _pool_nodes(props: dict[str, Any], node_count: Any) -> tuple[Any, Any]:
    """(nodes while training, nodes while idle): an autoscaled pool's most and fewest nodes
    (GKE's total_* counts, else the per-zone ones), else its fixed node count for both."""
    autoscaling = at(props, "autoscaling")
    if isinstance(autoscaling, dict):
        most = whole_number(at(autoscaling, "totalMaxNodeCount"))
        fewest = whole_number(at(autoscaling, "totalMinNodeCount"))
        if not known(most) and not known(fewest):
            most = whole_number(at(autoscaling, "maxNodeCount"))
            fewest = whole_number(at(autoscaling, "minNodeCount"))
        return most, fewest
    if props.get("autoscaling") is UNKNOWN:  # in preview: whether the pool autoscales is not known
        return UNKNOWN, UNKNOWN
    return node_count, node_count


def _group_replicas(cluster_props: dict[str, Any], spec: dict[str, Any]) -> tuple[Any, Any]:
    """(replicas while training, replicas while idle): what a job gets (`slices_for_a_job`), and
    minReplicas when the RayCluster's autoscaler removes idle slices, else the same count."""
    cluster_spec = at(cluster_props, "spec")
    most, _ = slices_for_a_job(cluster_spec, spec)
    autoscaling = in_tree_autoscaling(cluster_spec)
    if autoscaling is UNKNOWN:
        return UNKNOWN, UNKNOWN
    return most, whole_number(at(spec, "minReplicas")) if autoscaling else most


def tpu_capacity(stack: StackView) -> list[TpuCapacity] | None:
    """Every TPU chip the stack provisions; None when some count is not known yet."""
    if not stack.pools_decided():
        return None
    pools = stack.tpu_pools()
    if pools:
        found = []
        for pool, slice_ in pools:
            most, fewest = _pool_nodes(pool.props, slice_.node_count)
            if not known(most, fewest):
                return None
            location = at(pool.props, "location")
            if not known(location):
                location = at(pool.props, "nodeLocations", 0)
            found.append(
                TpuCapacity(
                    f"node pool '{pool.name}'",
                    slice_.accelerator,
                    most * slice_.chips_per_vm,
                    fewest * slice_.chips_per_vm,
                    _pool_capacity(pool.props),
                    _location_region(location),
                )
            )
        return found
    clusters = stack.of_type(CLUSTER)
    region = _location_region(at(clusters[0].props, "location")) if len(clusters) == 1 else None
    found = []
    for cluster in stack.of_type(RAY_CLUSTER):
        for group in tpu_worker_groups(cluster.props):
            most, fewest = _group_replicas(cluster.props, group.spec)
            hosts = whole_number(at(group.spec, "numOfHosts"))
            limits = [container_tpu_limit(c) for c in group.containers]
            limits = [limit for limit in limits if limit is not UNKNOWN]
            if not known(most, fewest, hosts) or not limits:
                return None
            source = f"RayCluster '{cluster.name}' worker group '{group.name}'"
            per_replica = hosts * sum(limits)
            found.append(TpuCapacity(source, group.accelerator, most * per_replica, fewest * per_replica, None, region))
    return found


def chip_hour_price(capacity: TpuCapacity) -> tuple[float, str]:
    """What one of `capacity`'s chip-hours costs, and how that was priced: the catalog's list
    price for its capacity choice and region; else that region's on-demand price, which no
    choice exceeds (Spot and flex-start are discounts on it, a reservation is costed at it);
    else the catalog's US on-demand price, when the region is not known or not listed."""
    accelerator = capacity.accelerator
    assert accelerator is not None
    region = capacity.region
    if capacity.capacity is not None and region is not None:
        price = accelerator.chip_hour_price(capacity.capacity, region)
        if price is not None:
            return price.usd, f"the {capacity.capacity} list price in {region}"
    bound = accelerator.chip_hour_price(ON_DEMAND, region) if region is not None else None
    if bound is not None:
        why = (
            f"the catalog has no {capacity.capacity} price there"
            if capacity.capacity
            else "the ComputeClass may obtain any of its capacity choices, none dearer"
        )
        return bound.usd, f"at most the on-demand list price in {region} ({why})"
    where = f"in {region}" if region else "for an unknown region"
    return accelerator.price_per_chip_hour_usd, f"the US on-demand list price (the catalog has no price {where})"


def _usd(amount: float) -> str:
    """$2.70, $0.7803: cents, or every digit the catalog gives."""
    return f"${amount:.2f}" if round(amount, 2) == amount else f"${amount:g}"


def _itemized(capacity: list[TpuCapacity], chips: Callable[[TpuCapacity], int]) -> str:
    """`16 in node pool 'tpu-0', 16 in node pool 'tpu-1'`: by name, whatever order the engine sent."""
    return ", ".join(f"{chips(c)} in {c.source}" for c in sorted(capacity, key=lambda c: c.source) if chips(c))


def _priced(capacity: list[TpuCapacity], chips: Callable[[TpuCapacity], int]) -> tuple[float, str]:
    """Dollars an hour for `chips` of each, and the pricing every part used."""
    dollars, bases = 0.0, []
    for part in capacity:
        if chips(part):
            usd, basis = chip_hour_price(part)
            dollars += chips(part) * usd
            bases.append(f"{_usd(usd)} per chip-hour, {basis}")
        # A resource with no chips up costs nothing at any price.
    # In cents, as messages show it and budgets are set (32 x 2.70 x 24 is 2073.6000000000004).
    return round(dollars, 2), "; ".join(dict.fromkeys(bases))


def _training(c: TpuCapacity) -> int:
    return c.training_chips


def _idle(c: TpuCapacity) -> int:
    return c.idle_chips


@RULES.stack(
    "tpu-chip-cap",
    EnforcementLevel.MANDATORY,
    f"A stack provisions at most {CHIP_CAP} TPU chips.",
    config=[CHIP_CAP],
)
def chip_cap(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """A typo in `slices` or `topology` should not reserve a pod's worth of TPUs: every chip the
    stack can bring up counts, whether it is up while idle or only while a job trains."""
    capacity = tpu_capacity(StackView(args.resources))
    cap = CHIP_CAP.value(args)
    if not capacity:
        return
    total = sum(c.training_chips for c in capacity)
    if total > cap:
        report_violation(
            f"The stack provisions {total} TPU chips ({_itemized(capacity, _training)}), over the cap of "
            f"{cap:g} chips per stack. Use fewer or smaller slices (the slices and topology "
            "settings), or raise the cap in the policy config: "
            f'{{"{chip_cap.name}": {{"{CHIP_CAP}": {total}}}}}.',
            None,
        )


@RULES.stack(
    "tpu-hourly-budget",
    EnforcementLevel.ADVISORY,
    f"A stack's TPU chips cost at most {BUDGET_DOLLARS_PER_HOUR} while a job trains, at list prices.",
    config=[BUDGET_DOLLARS_PER_HOUR],
)
def hourly_budget(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """What the stack's TPUs cost for every hour a job trains on all of them."""
    capacity = tpu_capacity(StackView(args.resources))
    budget = BUDGET_DOLLARS_PER_HOUR.value(args)
    if not capacity or any(c.accelerator is None for c in capacity):
        return
    dollars, basis = _priced(capacity, _training)
    if dollars > budget:
        total = sum(c.training_chips for c in capacity)
        report_violation(
            f"While a job trains, the stack's {total} TPU chips ({_itemized(capacity, _training)}) cost about "
            f"${dollars:,.2f} an hour ({basis}), over the budget of ${budget:,.2f} an hour. Use fewer or "
            "smaller slices, cheaper capacity (capacity = spot, or a reservation), or raise "
            f"{BUDGET_DOLLARS_PER_HOUR} in the policy config for {hourly_budget.name}.",
            None,
        )


@RULES.stack(
    "tpu-idle-budget",
    EnforcementLevel.ADVISORY,
    f"The TPU slices a stack keeps up while no job runs cost at most {IDLE_BUDGET_DOLLARS_PER_DAY}.",
    config=[IDLE_BUDGET_DOLLARS_PER_DAY],
)
def idle_budget(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """What the stack's TPUs cost while no job runs: the slices it keeps up are paid every hour."""
    capacity = tpu_capacity(StackView(args.resources))
    budget = IDLE_BUDGET_DOLLARS_PER_DAY.value(args)
    if not capacity or any(c.accelerator is None for c in capacity if c.idle_chips):
        return
    hourly, basis = _priced(capacity, _idle)
    daily = round(hourly * HOURS_PER_DAY, 2)
    if daily > budget:
        total = sum(c.idle_chips for c in capacity)
        report_violation(
            f"While no job runs, the stack keeps {total} TPU chips up ({_itemized(capacity, _idle)}): about "
            f"${hourly:,.2f} an hour, ${daily:,.2f} a day ({basis}), over the idle budget of ${budget:,.2f} a "
            "day. Lower minSlices (0 scales every slice to zero while idle; the Ray autoscaler brings them back "
            f"for a job), or raise {IDLE_BUDGET_DOLLARS_PER_DAY} in the policy config for {idle_budget.name}.",
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


@RULES.resource(
    "allowed-regions",
    EnforcementLevel.MANDATORY,
    f"Buckets, subnets and GKE clusters are in an allowed region ({ALLOWED_REGIONS}; empty allows any).",
    config=[ALLOWED_REGIONS],
)
def allowed_regions(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Data residency: checkpoints, DCN subnets and clusters stay where the organization says."""
    allowed = ALLOWED_REGIONS.value(args)
    if not allowed:
        return
    props = plain(args.props)
    region = _region(args.resource_type, props)
    if isinstance(region, str) and region not in allowed:
        kind = {BUCKET: "Bucket", SUBNETWORK: "Subnet", CLUSTER: "GKE cluster"}[args.resource_type]
        report_violation(
            f"{described(kind, args.name, props)} is in {region}, which is not an allowed region "
            f"({', '.join(allowed)}). Set gcp:region (and gcp:zone) to an allowed region, or "
            f"add this one to {ALLOWED_REGIONS} in the policy config.",
            args.urn,
        )
