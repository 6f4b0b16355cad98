"""The Ray cluster on GKE: waits for the Ray operator's CRD, then creates the DRANET claim
template and the RayCluster built by `domain.kuberay`."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from domain import kuberay
from domain.settings import StackSettings
from infra.components.cluster import GkeCluster
from infra.components.storage import CheckpointStorage
from infra.components.tpu_slices import TpuSlices
from infra.crd_wait import CrdEstablished


def _custom_resource(name: str, manifest: dict, opts: pulumi.ResourceOptions):
    """Any manifest (built-in kinds too) as a resource; its type token comes from apiVersion/kind."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest["spec"],
        opts=opts,
    )


class KubeRay(pulumi.ComponentResource):
    ray_cluster_name: pulumi.Output[str]
    head_service_name: pulumi.Output[str]
    dashboard_port: pulumi.Output[int]
    # The name of the Secret KubeRay generates the Ray auth token into (key
    # kuberay.RAY_AUTH_TOKEN_KEY), in the RayCluster's namespace: a name, never the token.
    auth_secret_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        cluster: GkeCluster,
        storage: CheckpointStorage,
        slices: TpuSlices,
        image: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:ray:KubeRay", name, None, opts)
        crd_ready = CrdEstablished(
            f"{name}-crd-ready",
            kubeconfig=cluster.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=cluster.ready),
        )
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=cluster.provider)
        claim_templates = []
        if kuberay.uses_dranet(settings):
            claim_templates.append(
                _custom_resource(
                    f"{name}-netdev-claim",
                    kuberay.resource_claim_template(settings),
                    pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=storage.ready)),
                )
            )
        _custom_resource(
            f"{name}-cluster",
            # The bucket name and a built image are outputs: they ride inside the manifest as
            # opaque values, and the image's build becomes a dependency of the RayCluster.
            kuberay.ray_cluster(settings, storage.bucket_name, image),
            pulumi.ResourceOptions.merge(
                k8s_opts,
                pulumi.ResourceOptions(depends_on=[crd_ready, *storage.ready, *slices.capacity, *claim_templates]),
            ),
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
