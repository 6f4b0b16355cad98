"""TPU node pools: a node pool whose machine type is a TPU machine of the catalog.

A multi-host slice only becomes usable when every VM of its topology is there, placed together
and wired to the DCN networks; anything less is billed by the chip-hour and trains nothing.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from domain.gcp_resources import DRANET_NODE_LABEL
from policies.rules.common import (
    NODE_POOL,
    UNKNOWN,
    PoolSlice,
    at,
    described,
    known,
    plain,
    pool_slice,
)

[(DRANET_LABEL, DRANET_VALUE)] = DRANET_NODE_LABEL.items()


def _tpu_pool(args: ResourceValidationArgs) -> tuple[dict[str, Any], PoolSlice, str] | None:
    if args.resource_type != NODE_POOL:
        return None
    props = plain(args.props)
    found = pool_slice(props)
    if found is None:
        return None
    return props, found, described("TPU node pool", args.name, props)


def catalog_shape(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Machine type, topology and node count must describe one whole slice of the catalog."""
    pool = _tpu_pool(args)
    if pool is None:
        return
    _, found, label = pool
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
    if known(found.node_count) and found.node_count != found.shape.vms:
        report_violation(
            f"{label} has {found.node_count} nodes, but a {topology} slice of TPU "
            f"{accelerator.name} is {found.shape.vms} VMs of {found.shape.chips_per_vm} chips: "
            "a partial slice never becomes ready and extra VMs sit idle, both billed. Set "
            f"node_count={found.shape.vms}.",
            args.urn,
        )


def compact_placement(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """The VMs of a multi-host slice must sit together for their inter-chip links."""
    pool = _tpu_pool(args)
    if pool is None:
        return
    props, found, label = pool
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


def dranet_networks(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """DCN traffic needs the accelerator's extra NICs and the label that turns DRANET on."""
    pool = _tpu_pool(args)
    if pool is None:
        return
    props, found, label = pool
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


def gvnic(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Multi-NIC TPU VMs need Google's virtual NIC for DCN bandwidth."""
    pool = _tpu_pool(args)
    if pool is None:
        return
    props, _, label = pool
    if at(props, "nodeConfig", "gvnic", "enabled") is False:
        report_violation(
            f"{label} has gVNIC disabled: the additional DCN NICs and their bandwidth need it. "
            "Set node_config.gvnic={'enabled': True}.",
            args.urn,
        )


def gke_metadata_server(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Without the GKE metadata server, pods see the node's credentials instead of their own."""
    pool = _tpu_pool(args)
    if pool is None:
        return
    props, _, label = pool
    mode = at(props, "nodeConfig", "workloadMetadataConfig", "mode")
    if known(mode) and mode != "GKE_METADATA":
        report_violation(
            f"{label} exposes metadata mode {mode!r}: Ray pods would act as the node's service "
            "account instead of their own Workload Identity, and could read its credentials. "
            "Set node_config.workload_metadata_config={'mode': 'GKE_METADATA'}.",
            args.urn,
        )


ALL = [
    ResourceValidationPolicy(
        name="tpu-pool-catalog-shape",
        description="TPU node pools use the catalog's machine type and node count for their topology.",
        validate=catalog_shape,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="tpu-pool-compact-placement",
        description="Multi-host TPU node pools use COMPACT placement.",
        validate=compact_placement,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="tpu-pool-dranet-networks",
        description="TPU node pools attach the accelerator's DCN networks and carry the DRANET label.",
        validate=dranet_networks,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="tpu-pool-gvnic",
        description="TPU node pools enable gVNIC.",
        validate=gvnic,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="tpu-pool-gke-metadata",
        description="TPU node pools run the GKE metadata server (Workload Identity for pods).",
        validate=gke_metadata_server,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
]
