"""The extra VPC networks that carry cross-slice (DCN) traffic.

A network is a DCN network when a TPU node pool of the stack attaches it as an additional node
network; other networks (the cluster's primary one, say) are none of these rules' business.
Mistakes here do not fail `pulumi up`: the slices come up, then cannot reach each other (or
reach each other slowly), and the job hangs or crawls while every TPU chip is billed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    StackValidationArgs,
)

from domain.gcp.dcn import DCN_MTU
from policies.rules.common import (
    FIREWALL,
    NETWORK,
    SUBNETWORK,
    StackResource,
    StackView,
    at,
    described,
    known,
    whole_number,
)
from policies.rules.declare import Rules

# This module's policies, in the pack's order (policies/rules/declare.py).
RULES = Rules()


@dataclass
class DcnNetwork:
    network: StackResource
    # CIDR ranges of its subnets (the pools' subnetworks and any subnet on the network);
    # UNKNOWN among them when one cannot be read yet.
    ranges: list = field(default_factory=list)

    def add_range(self, cidr: object) -> None:
        if cidr not in self.ranges:
            self.ranges.append(cidr)

    @property
    def label(self) -> str:
        return described("DCN network", self.network.name, self.network.props)


def dcn_networks(stack: StackView) -> list[DcnNetwork]:
    """The networks the stack's TPU pools attach, with their subnet ranges."""
    networks = stack.of_type(NETWORK)
    subnets = stack.of_type(SUBNETWORK)
    found: dict[str, DcnNetwork] = {}
    for pool, _ in stack.tpu_pools():
        configs = at(pool.props, "networkConfig", "additionalNodeNetworkConfigs")
        if not isinstance(configs, list):
            continue
        for config in configs:
            network = stack.resolve(pool, "networkConfig", at(config, "network"), networks)
            if network is None:
                continue
            entry = found.setdefault(network.urn, DcnNetwork(network))
            subnet = stack.resolve(pool, "networkConfig", at(config, "subnetwork"), subnets)
            if subnet is not None:
                entry.add_range(at(subnet.props, "ipCidrRange"))
    for subnet in subnets:
        network = stack.resolve(subnet, "network", at(subnet.props, "network"), networks)
        if network is not None and network.urn in found:
            found[network.urn].add_range(at(subnet.props, "ipCidrRange"))
    return list(found.values())


@RULES.stack(
    "dcn-network-custom-mode",
    EnforcementLevel.MANDATORY,
    "DCN networks attached to TPU node pools are custom-mode VPCs.",
)
def custom_mode(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Auto mode puts a /20 in every region, whose ranges can collide with the TPU subnets."""
    for dcn in dcn_networks(StackView(args.resources)):
        if at(dcn.network.props, "autoCreateSubnetworks") is True:
            report_violation(
                f"{dcn.label} is an auto-mode VPC (autoCreateSubnetworks is true): it creates a "
                "subnet in every region, whose ranges can overlap the TPU subnets. Set "
                "auto_create_subnetworks=False and create only the DCN subnet.",
                dcn.network.urn,
            )


@RULES.stack(
    "dcn-network-mtu",
    EnforcementLevel.MANDATORY,
    f"DCN networks attached to TPU node pools use MTU {DCN_MTU} (jumbo frames).",
)
def jumbo_mtu(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Cross-slice collectives move gigabytes per step; small frames cut their bandwidth."""
    for dcn in dcn_networks(StackView(args.resources)):
        mtu = whole_number(at(dcn.network.props, "mtu"))
        if known(mtu) and mtu != DCN_MTU:
            report_violation(
                f"{dcn.label} has MTU {mtu}: DCN traffic between slices needs jumbo frames. Set "
                f"mtu={DCN_MTU}, the largest a Google Cloud VPC allows.",
                dcn.network.urn,
            )


def _covers(source_ranges: list, subnet_range: str) -> bool:
    try:
        subnet = ipaddress.ip_network(subnet_range, strict=False)
    except ValueError:
        return False
    for source in source_ranges:
        try:
            if _within(subnet, ipaddress.ip_network(source, strict=False)):
                return True
        except (TypeError, ValueError):
            continue
    return False


def _within(
    inner: ipaddress.IPv4Network | ipaddress.IPv6Network, outer: ipaddress.IPv4Network | ipaddress.IPv6Network
) -> bool:
    """Whether `inner` lies in `outer`; never across IP versions (an IPv4 range is not within an IPv6 one)."""
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False


def _allows_ingress_from(firewall: StackResource, ranges: list[str]) -> bool | None:
    """Whether the rule admits traffic from every range; None when that cannot be read yet.

    Unset `direction` and `disabled` take the API's defaults (INGRESS, enabled): this looks for
    evidence of an allowing rule, so a default can only make it accept, never report.
    """
    props = firewall.props
    direction = props.get("direction", "INGRESS")
    disabled = props.get("disabled", False)
    allows, sources = at(props, "allows"), at(props, "sourceRanges")
    if not known(direction, disabled, allows, sources):
        return None
    if not isinstance(sources, list) or any(not known(source) for source in sources):
        return None
    return (
        direction == "INGRESS"
        and disabled is not True
        and isinstance(allows, list)
        and len(allows) > 0
        and all(_covers(sources, subnet_range) for subnet_range in ranges)
    )


@RULES.stack(
    "dcn-network-internal-firewall",
    EnforcementLevel.MANDATORY,
    "Every DCN network has an ingress firewall rule allowing its subnet range.",
)
def internal_firewall(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """New custom VPCs deny all ingress: without an allow rule slices cannot talk over DCN."""
    stack = StackView(args.resources)
    networks = stack.of_type(NETWORK)
    firewalls = stack.of_type(FIREWALL)
    targets = {
        firewall.urn: stack.resolve(firewall, "network", at(firewall.props, "network"), networks)
        for firewall in firewalls
    }
    # A firewall whose network cannot be told may be the one a network needs: undecidable.
    some_unresolved = any(target is None for target in targets.values())
    for dcn in dcn_networks(stack):
        if any(not isinstance(r, str) for r in dcn.ranges):
            continue
        verdicts = [
            _allows_ingress_from(firewall, dcn.ranges)
            for firewall in firewalls
            if (target := targets[firewall.urn]) is not None and target.urn == dcn.network.urn
        ]
        if True in verdicts or None in verdicts or (not verdicts and some_unresolved):
            continue
        sources = ", ".join(dcn.ranges) or "its subnet ranges"
        report_violation(
            f"{dcn.label} has no ingress firewall rule allowing traffic from {sources}: a new "
            "custom VPC denies all ingress, so the TPU slices cannot exchange DCN traffic and the "
            "job hangs. Add a gcp.compute.Firewall on this network with direction INGRESS, "
            f"source_ranges [{sources}] and allows for tcp, udp and icmp.",
            dcn.network.urn,
        )
