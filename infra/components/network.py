"""The extra VPC networks (MTU 8896) that carry cross-slice DCN traffic, with their subnets and
the intra-network firewall rule the manual procedure forgets."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from domain import gcp_resources
from domain.settings import StackSettings
from infra.components.apis import ProjectApis


class DcnNetworks(pulumi.ComponentResource):
    network_names: pulumi.Output[list[str]]
    subnet_names: pulumi.Output[list[str]]
    # (network, subnetwork) name pairs, in NIC order, for the TPU node pools.
    attachments: list[tuple[pulumi.Output[str], pulumi.Output[str]]]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        apis: ProjectApis,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:network:DcnNetworks", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.attachments = []
        subnets = []
        networks = []
        for index in range(len(settings.dcn_subnets)):
            network = gcp.compute.Network(
                f"{name}-net-{index + 1}",
                **gcp_resources.dcn_network_args(settings, index),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[apis]),
            )
            subnet = gcp.compute.Subnetwork(
                f"{name}-subnet-{index + 1}",
                **gcp_resources.dcn_subnet_args(settings, index, network.id),
                opts=child,
            )
            gcp.compute.Firewall(
                f"{name}-net-{index + 1}-allow-internal",
                **gcp_resources.dcn_firewall_args(settings, index, network.id),
                opts=child,
            )
            networks.append(network)
            subnets.append(subnet)
            self.attachments.append((network.name, subnet.name))
        self.network_names = pulumi.Output.all(*[n.name for n in networks])
        self.subnet_names = pulumi.Output.all(*[s.name for s in subnets])
        self.register_outputs({"network_names": self.network_names, "subnet_names": self.subnet_names})
