"""The Ray cluster on GKE: waits for the Ray operator's CRD, then creates the DRANET claim
template and the RayCluster built by `domain.resources.kuberay`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from domain.resources import kuberay
from domain.stack_settings import StackSettings
from infra.components import child_options, manifest_resource
from infra.crd_wait import CrdEstablished


@dataclass(frozen=True)
class KubeRayArgs:
    # The DRANET ResourceClaimTemplate the workers claim their DCN interfaces through, if any.
    claim_template: Mapping[str, Any] | None
    ray_cluster: Mapping[str, Any]
    kubeconfig: pulumi.Input[dict[str, Any]]
    kubernetes: k8s.Provider

    @classmethod
    def from_settings(
        cls,
        settings: StackSettings,
        *,
        bucket_name: pulumi.Input[str],
        image: pulumi.Input[str],
        compile_cache: pulumi.Input[str],
        kubeconfig: pulumi.Input[dict[str, Any]],
        kubernetes: k8s.Provider,
    ) -> KubeRayArgs:
        return cls(
            claim_template=kuberay.resource_claim_template(settings) if kuberay.uses_dranet(settings) else None,
            # The bucket name, the cache in it and a built image are outputs: they ride inside the manifest as
            # opaque values, and the image's build becomes a dependency of the RayCluster.
            ray_cluster=kuberay.ray_cluster(settings, bucket_name, image, compile_cache),
            kubeconfig=kubeconfig,
            kubernetes=kubernetes,
        )


class KubeRay(pulumi.ComponentResource):
    ray_cluster_name: pulumi.Output[str]
    head_service_name: pulumi.Output[str]
    dashboard_port: pulumi.Output[int]
    # The name of the Secret KubeRay generates the Ray auth token into (key
    # kuberay.RAY_AUTH_TOKEN_KEY), in the RayCluster's namespace: a name, never the token.
    auth_secret_name: pulumi.Output[str]

    def __init__(self, name: str, args: KubeRayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:ray:KubeRay", name, None, opts)
        child = child_options(self, opts)
        crd_ready = CrdEstablished(f"{name}-crd-ready", kubeconfig=args.kubeconfig, opts=child)
        k8s_opts = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(provider=args.kubernetes))
        claim_templates = []
        if args.claim_template is not None:
            claim_templates.append(manifest_resource(f"{name}-netdev-claim", args.claim_template, k8s_opts))
        manifest_resource(
            f"{name}-cluster",
            args.ray_cluster,
            pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=[crd_ready, *claim_templates])),
        )
        self.ray_cluster_name = pulumi.Output.from_input(kuberay.RAY_CLUSTER_NAME)
        self.head_service_name = pulumi.Output.from_input(kuberay.head_service_name())
        self.dashboard_port = pulumi.Output.from_input(kuberay.DASHBOARD_PORT)
        self.auth_secret_name = pulumi.Output.from_input(kuberay.ray_auth_secret_name())
        self.register_outputs(
            {
                "ray_cluster_name": self.ray_cluster_name,
                "head_service_name": self.head_service_name,
                "dashboard_port": self.dashboard_port,
                "auth_secret_name": self.auth_secret_name,
            }
        )
