"""TPU capacity: one multi-host node pool per slice on Standard; on Autopilot, where there are no
node pools, a ComputeClass that lets GKE create TPU nodes for the worker pods, with DRANET and
from the stack's capacity choices in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain.resources import gcp_resources, kuberay
from domain.stack_settings import StackSettings
from infra.components import child_options, manifest_resource


@dataclass(frozen=True)
class TpuPoolArgs:
    pool: Mapping[str, Any]
    # Scales 0 <-> all its VMs (beyond minSlices) rather than holding its slice.
    autoscales: bool


@dataclass(frozen=True)
class TpuSlicesArgs:
    # One per slice on Standard; none on Autopilot.
    pools: tuple[TpuPoolArgs, ...]
    # Autopilot's ComputeClass manifest, exactly when the worker pods select it
    # (domain/resources/kuberay.py).
    compute_class: Mapping[str, Any] | None
    kubernetes: k8s.Provider

    @classmethod
    def from_settings(
        cls,
        settings: StackSettings,
        *,
        cluster_name: pulumi.Input[str],
        node_service_account_email: pulumi.Input[str],
        dcn_networks: Sequence[tuple[pulumi.Input[str], pulumi.Input[str]]],
        kubernetes: k8s.Provider,
    ) -> TpuSlicesArgs:
        """`dcn_networks`: the (network, subnetwork) name pairs each pool attaches, in NIC order."""
        if settings.is_autopilot:
            compute_class = kuberay.compute_class(settings) if kuberay.uses_compute_class(settings) else None
            return cls(pools=(), compute_class=compute_class, kubernetes=kubernetes)
        pools = tuple(
            TpuPoolArgs(
                pool=gcp_resources.tpu_pool_args(
                    settings, index, cluster_name, node_service_account_email, list(dcn_networks)
                ),
                autoscales=gcp_resources.tpu_pool_autoscales(settings, index),
            )
            for index in range(settings.slices)
        )
        return cls(pools=pools, compute_class=None, kubernetes=kubernetes)


class TpuSlices(pulumi.ComponentResource):
    pool_names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: TpuSlicesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:tpu:TpuSlices", name, None, opts)
        child = child_options(self, opts)
        if args.compute_class is not None:
            manifest_resource(
                f"{name}-compute-class",
                args.compute_class,
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(provider=args.kubernetes)),
            )
        pools = [
            gcp.container.NodePool(
                f"{name}-{index}",
                **slice_pool.pool,
                # Fixed pool names, and a replacement must not need twice the TPU quota.
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions(
                        delete_before_replace=True, custom_timeouts=_pool_timeouts(slice_pool.autoscales)
                    ),
                ),
            )
            for index, slice_pool in enumerate(args.pools)
        ]
        self.pool_names = pulumi.Output.all(*[pool.name for pool in pools]) if pools else pulumi.Output.from_input([])
        self.register_outputs({"pool_names": self.pool_names})


def _pool_timeouts(autoscales: bool) -> pulumi.CustomTimeouts:
    """A held slice's create waits for its VMs, and a TPU stockout can keep it waiting for up to
    2 hours. A pool that scales from zero is created empty (its slice comes later, through the
    cluster autoscaler), so its create has nothing to wait for and keeps the provider's timeout.
    An update of either may recreate a slice that is up, so both give it an hour."""
    if autoscales:
        return pulumi.CustomTimeouts(update="60m")
    return pulumi.CustomTimeouts(create="150m", update="60m")
