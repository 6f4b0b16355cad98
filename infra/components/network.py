"""The extra VPC networks (MTU 8896) that carry cross-slice DCN traffic, with their subnets and
the intra-network firewall rule the manual procedure forgets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from domain.resources import gcp_resources
from domain.stack_settings import StackSettings
from infra.components import child_options


@dataclass(frozen=True)
class DcnNetworkArgs:
    network: Mapping[str, Any]
    # The subnet's and the firewall rule's arguments but their `network`: the component adds the
    # network's id, known once the network exists.
    subnet: Mapping[str, Any]
    firewall: Mapping[str, Any]


@dataclass(frozen=True)
class DcnNetworksArgs:
    # In NIC order.
    networks: tuple[DcnNetworkArgs, ...]

    @classmethod
    def from_settings(cls, settings: StackSettings) -> DcnNetworksArgs:
        return cls(
            tuple(
                DcnNetworkArgs(
                    network=gcp_resources.dcn_network_args(settings, index),
                    subnet=gcp_resources.dcn_subnet_args(settings, index),
                    firewall=gcp_resources.dcn_firewall_args(settings, index),
                )
                for index in range(len(settings.dcn_subnets))
            )
        )


class DcnNetworks(pulumi.ComponentResource):
    network_names: pulumi.Output[list[str]]
    subnet_names: pulumi.Output[list[str]]
    # (network, subnetwork) name pairs, in NIC order, for the TPU node pools.
    attachments: list[tuple[pulumi.Output[str], pulumi.Output[str]]]

    def __init__(self, name: str, args: DcnNetworksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:network:DcnNetworks", name, None, opts)
        child = child_options(self, opts)
        self.attachments = []
        subnets = []
        networks = []
        for number, dcn in enumerate(args.networks, start=1):
            network = gcp.compute.Network(f"{name}-net-{number}", **dcn.network, opts=child)
            subnet = gcp.compute.Subnetwork(f"{name}-subnet-{number}", **dcn.subnet, network=network.id, opts=child)
            gcp.compute.Firewall(f"{name}-net-{number}-allow-internal", **dcn.firewall, network=network.id, opts=child)
            networks.append(network)
            subnets.append(subnet)
            self.attachments.append((network.name, subnet.name))
        self.network_names = pulumi.Output.all(*[n.name for n in networks])
        self.subnet_names = pulumi.Output.all(*[s.name for s in subnets])
        self.register_outputs({"network_names": self.network_names, "subnet_names": self.subnet_names})
