"""TPU node pools: a node pool whose machine type is a TPU machine of the catalog.

A multi-host slice only becomes usable when every VM of its topology is there, placed together
and wired to the DCN networks; anything less is billed by the chip-hour and trains nothing. A pool
either holds its slice (a node count) or scales it as one unit through GKE's autoscaling, from 0
to every VM (domain/resources/gcp_resources.py); a flex-start pool is built as GKE requires of it.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
)

from domain.resources.gcp_resources import (
    DRANET_NODE_LABEL,
    FLEX_START_LOCATION_POLICY,
    FLEX_START_RESERVATION_AFFINITY,
)
from policies.rules.common import (
    NODE_POOL,
    UNKNOWN,
    PoolSlice,
    at,
    described,
    known,
    on,
    plain,
    pool_slice,
    whole_number,
)
from policies.rules.declare import Rules

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()

[(DRANET_LABEL, DRANET_VALUE)] = DRANET_NODE_LABEL.items()
NO_RESERVATION = FLEX_START_RESERVATION_AFFINITY["consume_reservation_type"]


def _tpu_pool(args: ResourceValidationArgs) -> tuple[dict[str, Any], PoolSlice, str] | None:
    if args.resource_type != NODE_POOL:
        return None
    props = plain(args.props)
    found = pool_slice(props)
    if found is None:
        return None
    return props, found, described("TPU node pool", args.name, props)


@RULES.resource(
    "tpu-pool-catalog-shape",
    EnforcementLevel.MANDATORY,
    "TPU node pools use the catalog's machine type and node count for their topology, "
    "or autoscale from 0 to that count.",
)
@on(_tpu_pool)
def catalog_shape(
    props: dict[str, Any], found: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Machine type, topology and node count must describe one whole slice of the catalog."""
    accelerator, topology = found.accelerator, found.topology
    if not isinstance(topology, str):
        return
    own = [t for t, s in accelerator.shapes.items() if s.machine_type == found.machine_type]
    if found.shape is None:
        report_violation(
            f"{label} asks for TPU topology {topology!r}, which TPU {accelerator.name} does not "
            f"offer. Set placement_policy.tpu_topology to a topology of {found.machine_type}: "
            f"{', '.join(own)}.",
            args.urn,
        )
        return
    if found.shape.machine_type != found.machine_type:
        report_violation(
            f"{label} runs {found.machine_type}, but a {topology} slice of TPU "
            f"{accelerator.name} is built from {found.shape.machine_type} VMs, so GKE cannot "
            f"form the slice. Set node_config.machine_type to {found.shape.machine_type}, or "
            f"choose a topology of {found.machine_type}: {', '.join(own)}.",
            args.urn,
        )
        return
    vms = found.shape.vms
    if known(found.node_count) and found.node_count != vms:
        report_violation(
            f"{label} has {found.node_count} nodes, but a {topology} slice of TPU "
            f"{accelerator.name} is {vms} VMs of {found.shape.chips_per_vm} chips: "
            "a partial slice never becomes ready and extra VMs sit idle, both billed. Set "
            f"node_count={vms}.",
            args.urn,
        )
    autoscaling = at(props, "autoscaling")
    if not isinstance(autoscaling, dict):
        return
    whole = f"a {topology} slice of TPU {accelerator.name} is {vms} VMs and GKE scales it as one unit"
    for key in ("totalMaxNodeCount", "maxNodeCount"):
        most = whole_number(at(autoscaling, key))
        if known(most) and most != vms:
            report_violation(
                f"{label} autoscales up to {most} nodes ({key}), but {whole}: with fewer VMs "
                "the slice never becomes ready, and more are never used. Set "
                f"autoscaling.total_max_node_count={vms}.",
                args.urn,
            )
    for key in ("totalMinNodeCount", "minNodeCount"):
        fewest = whole_number(at(autoscaling, key))
        if known(fewest) and fewest not in (0, vms):
            report_violation(
                f"{label} keeps at least {fewest} nodes ({key}), but {whole}: a slice is up or "
                f"not, so its pool holds 0 or {vms} nodes. Set autoscaling.total_min_node_count=0 "
                f"(or hold the slice with node_count={vms} and no autoscaling).",
                args.urn,
            )
    count = whole_number(at(props, "nodeCount"))
    if known(count):
        report_violation(
            f"{label} sets node_count={count} beside autoscaling: every update would resize the "
            "pool back to that count, fighting the cluster autoscaler. Remove node_count, or "
            "remove autoscaling to hold the slice.",
            args.urn,
        )


@RULES.resource(
    "tpu-pool-compact-placement",
    EnforcementLevel.MANDATORY,
    "Multi-host TPU node pools use COMPACT placement.",
)
@on(_tpu_pool)
def compact_placement(
    props: dict[str, Any], found: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """The VMs of a multi-host slice must sit together for their inter-chip links."""
    if found.shape is None or not found.shape.is_multi_host:
        return
    placement = at(props, "placementPolicy", "type")
    if known(placement) and placement != "COMPACT":
        report_violation(
            f"{label} is a multi-host {found.topology} slice with placement type "
            f"{placement!r}: its VMs must be placed together to form one slice. Set "
            f"placement_policy={{'type': 'COMPACT', 'tpu_topology': '{found.topology}'}}.",
            args.urn,
        )


@RULES.resource(
    "tpu-pool-dranet-networks",
    EnforcementLevel.MANDATORY,
    "TPU node pools attach the accelerator's DCN networks and carry the DRANET label.",
)
@on(_tpu_pool)
def dranet_networks(
    props: dict[str, Any], found: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """DCN traffic needs the accelerator's extra NICs and the label that turns DRANET on."""
    needed = found.accelerator.dcn_networks
    if needed == 0:
        return
    networks = at(props, "networkConfig", "additionalNodeNetworkConfigs")
    if isinstance(networks, list) and len(networks) != needed:
        report_violation(
            f"{label} attaches {len(networks)} additional node networks, but TPU "
            f"{found.accelerator.name} slices carry cross-slice traffic over {needed} DCN "
            "networks; with fewer, that traffic shares or misses its NICs. Set "
            f"network_config.additional_node_network_configs to the {needed} DCN "
            "(network, subnetwork) pairs.",
            args.urn,
        )
    # A known label map without the key is decided; an unknown map, or value, is not.
    labels = at(props, "nodeConfig", "labels")
    value = labels.get(DRANET_LABEL, "") if isinstance(labels, dict) else UNKNOWN
    if known(value) and value != DRANET_VALUE:
        report_violation(
            f"{label} lacks the node label {DRANET_LABEL}={DRANET_VALUE!r}: without it GKE's "
            "managed DRANET driver does not hand the DCN NICs to the Ray workers. Add it to "
            "node_config.labels.",
            args.urn,
        )


@RULES.resource(
    "tpu-pool-gvnic",
    EnforcementLevel.MANDATORY,
    "TPU node pools enable gVNIC.",
)
@on(_tpu_pool)
def gvnic(
    props: dict[str, Any], _: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Multi-NIC TPU VMs need Google's virtual NIC for DCN bandwidth."""
    if at(props, "nodeConfig", "gvnic", "enabled") is False:
        report_violation(
            f"{label} has gVNIC disabled: the additional DCN NICs and their bandwidth need it. "
            "Set node_config.gvnic={'enabled': True}.",
            args.urn,
        )


@RULES.resource(
    "tpu-pool-gke-metadata",
    EnforcementLevel.MANDATORY,
    "TPU node pools run the GKE metadata server (Workload Identity for pods).",
)
@on(_tpu_pool)
def gke_metadata_server(
    props: dict[str, Any], _: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """Without the GKE metadata server, pods see the node's credentials instead of their own."""
    mode = at(props, "nodeConfig", "workloadMetadataConfig", "mode")
    if known(mode) and mode != "GKE_METADATA":
        report_violation(
            f"{label} exposes metadata mode {mode!r}: Ray pods would act as the node's service "
            "account instead of their own Workload Identity, and could read its credentials. "
            "Set node_config.workload_metadata_config={'mode': 'GKE_METADATA'}.",
            args.urn,
        )


@RULES.resource(
    "tpu-pool-flex-start",
    EnforcementLevel.MANDATORY,
    "Flex-start TPU node pools autoscale from 0 with location policy ANY, no reservation, no Spot and no auto-repair.",
)
@on(_tpu_pool)
def flex_start(
    props: dict[str, Any], _: PoolSlice, label: str, args: ResourceValidationArgs, report_violation: ReportViolation
) -> None:
    """A flex-start pool as GKE builds one: its nodes come only through the cluster autoscaler,
    from any zone with capacity, never from a reservation and never Spot, and are not auto-repaired
    (GKE's flex-start documentation and xpk, cited in domain/resources/gcp_resources.py)."""
    if at(props, "nodeConfig", "flexStart") is not True:
        return
    fix = "Build the pool from the stack's capacity = flex-start setting, or set "
    if at(props, "nodeConfig", "spot") is True:
        report_violation(
            f"{label} is both flex-start and Spot: they are two provisioning models and GKE "
            f"takes one per node pool. {fix}node_config.spot=False.",
            args.urn,
        )
    affinity = at(props, "nodeConfig", "reservationAffinity", "consumeReservationType")
    if known(affinity) and affinity != NO_RESERVATION:
        report_violation(
            f"{label} is flex-start with reservation affinity {affinity!r}: flex-start capacity "
            f"comes from the Dynamic Workload Scheduler, not from a reservation. {fix}"
            f"node_config.reservation_affinity={{'consume_reservation_type': '{NO_RESERVATION}'}}.",
            args.urn,
        )
    if at(props, "management", "autoRepair") is True:
        report_violation(
            f"{label} is flex-start with auto-repair on: flex-start TPU pools are created with "
            f"auto-repair off (--no-enable-autorepair). {fix}management.auto_repair=False.",
            args.urn,
        )
    count = whole_number(at(props, "nodeCount"))
    if known(count) and count > 0:
        report_violation(
            f"{label} is flex-start with node_count={count}: flex-start nodes come only through "
            f"the cluster autoscaler, from zero. {fix}autoscaling from 0 and no node_count.",
            args.urn,
        )
    autoscaling = at(props, "autoscaling")
    if not isinstance(autoscaling, dict):
        return
    fewest = whole_number(at(autoscaling, "totalMinNodeCount"))
    if known(fewest) and fewest > 0:
        report_violation(
            f"{label} is flex-start and keeps at least {fewest} nodes: flex-start pools scale "
            f"from zero, and a slice kept up would end when its VMs reach their run limit. {fix}"
            "autoscaling.total_min_node_count=0.",
            args.urn,
        )
    policy = at(autoscaling, "locationPolicy")
    if known(policy) and policy != FLEX_START_LOCATION_POLICY:
        report_violation(
            f"{label} is flex-start with location policy {policy!r}: GKE requires "
            f"{FLEX_START_LOCATION_POLICY!r} for flex-start, so the autoscaler takes capacity "
            f"wherever it is found. {fix}autoscaling.location_policy='{FLEX_START_LOCATION_POLICY}'.",
            args.urn,
        )
