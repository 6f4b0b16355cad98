"""TPU capacity: one multi-host node pool per slice on Standard; on Autopilot, where there are no
node pools, a ComputeClass that lets GKE create TPU nodes for the worker pods, with DRANET and
from the stack's capacity choices in order."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain import gcp_resources, kuberay
from domain.settings import StackSettings
from infra.components.cluster import GkeCluster
from infra.components.network import DcnNetworks


class TpuSlices(pulumi.ComponentResource):
    # What the Ray workers must wait for (node pools or the ComputeClass).
    capacity: list[pulumi.Resource]
    pool_names: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        cluster: GkeCluster,
        networks: DcnNetworks | None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:tpu:TpuSlices", name, None, opts)
        self.capacity = []
        if settings.is_autopilot:
            # Exactly when the worker pods select it (domain/kuberay.py).
            if kuberay.uses_compute_class(settings):
                manifest = kuberay.compute_class(settings)
                self.capacity.append(
                    k8s.apiextensions.CustomResource(
                        f"{name}-compute-class",
                        api_version=manifest["apiVersion"],
                        kind=manifest["kind"],
                        metadata=manifest["metadata"],
                        spec=manifest["spec"],
                        opts=pulumi.ResourceOptions(parent=self, provider=cluster.provider, depends_on=cluster.ready),
                    )
                )
            self.pool_names = pulumi.Output.from_input([])
        else:
            attachments = networks.attachments if networks else []
            for index in range(settings.slices):
                self.capacity.append(
                    gcp.container.NodePool(
                        f"{name}-{index}",
                        **gcp_resources.tpu_pool_args(
                            settings,
                            index,
                            cluster.name,
                            cluster.node_service_account_email,
                            attachments,
                        ),
                        # Fixed pool names, and a replacement must not need twice the TPU quota.
                        opts=pulumi.ResourceOptions(
                            parent=self,
                            depends_on=cluster.ready,
                            delete_before_replace=True,
                            custom_timeouts=_pool_timeouts(settings, index),
                        ),
                    )
                )
            self.pool_names = pulumi.Output.all(*[pool.name for pool in self.capacity])
        self.register_outputs({"pool_names": self.pool_names})


def _pool_timeouts(settings: StackSettings, index: int) -> pulumi.CustomTimeouts:
    """A held slice's create waits for its VMs, and a TPU stockout can keep it waiting for up to
    2 hours. A pool that scales from zero is created empty (its slice comes later, through the
    cluster autoscaler), so its create has nothing to wait for and keeps the provider's timeout.
    An update of either may recreate a slice that is up, so both give it an hour."""
    if gcp_resources.tpu_pool_autoscales(settings, index):
        return pulumi.CustomTimeouts(update="60m")
    return pulumi.CustomTimeouts(create="150m", update="60m")
