"""The infra program: validated settings in, components wired, stack outputs out.

Settings are parsed before the first resource is registered, so bad config never leaves a
half-created stack behind.
"""

from __future__ import annotations

from typing import Any

import pulumi

from domain.compile_cache import compile_cache_dir
from domain.config.settings import image_streaming_note, settings_cost
from domain.config.stack_outputs import ExportedOutputs, InfraOutputs, exported
from domain.paths import PROJECT_ROOT
from domain.resources import kuberay
from domain.stack_settings import StackSettings
from infra.components.apis import ProjectApis, ProjectApisArgs
from infra.components.cluster import GkeCluster, GkeClusterArgs
from infra.components.kuberay import KubeRay, KubeRayArgs
from infra.components.network import DcnNetworks, DcnNetworksArgs
from infra.components.storage import CheckpointStorage, CheckpointStorageArgs
from infra.components.tpu_slices import TpuSlices, TpuSlicesArgs
from infra.components.worker_image import WorkerImage, WorkerImageArgs


def _after(*components: pulumi.ComponentResource) -> pulumi.ResourceOptions:
    """Waits for every resource of `components` (the SDK expands a component into its children)."""
    return pulumi.ResourceOptions(depends_on=list(components))


def build(settings: StackSettings) -> dict[str, Any]:
    """Creates every resource of the procedure; returns the stack outputs by their stable names
    (declared in domain/config/stack_outputs.py: every declared output gets a value here)."""
    # Priced first: a price no number can hold stops the program before any resource exists.
    cost = settings_cost(settings)
    if cost.price is None:
        pulumi.log.warn(f"TPU cost: {cost.basis}")
    streaming_note = image_streaming_note(settings)
    if streaming_note is not None:
        pulumi.log.warn(f"Image streaming: {streaming_note}")
    apis = ProjectApis("apis", ProjectApisArgs.from_settings(settings))
    networks = (
        DcnNetworks("dcn", DcnNetworksArgs.from_settings(settings), _after(apis))
        if settings.uses_dcn_networks
        else None
    )
    cluster = GkeCluster(settings.cluster_name, GkeClusterArgs.from_settings(settings), _after(apis))
    slices = TpuSlices(
        "tpu",
        TpuSlicesArgs.from_settings(
            settings,
            cluster_name=cluster.name,
            node_service_account_email=cluster.node_service_account_email,
            dcn_networks=networks.attachments if networks else [],
            kubernetes=cluster.provider,
        ),
        _after(cluster),
    )
    # The bucket's IAM binding names the cluster's Workload Identity pool: after the cluster.
    storage = CheckpointStorage(
        "checkpoints", CheckpointStorageArgs.from_settings(settings, kubernetes=cluster.provider), _after(apis, cluster)
    )
    # A configured image is used as-is; otherwise the stack builds and pushes its own, from the
    # repository root (domain/, trainer/, the trainer lock).
    image: pulumi.Input[str]
    if settings.ray_image is None:
        image = WorkerImage("worker-image", WorkerImageArgs.from_settings(settings, PROJECT_ROOT), _after(apis)).image
    else:
        image = settings.ray_image
    # The Ray cluster waits for the cluster (the Ray CRD), its pods' identity and bucket access and
    # their TPU capacity; for a built image through the image, an output of the build.
    bucket_url = storage.bucket_name.apply(lambda bucket: f"gs://{bucket}")
    ray = KubeRay(
        "ray",
        KubeRayArgs.from_settings(
            settings,
            bucket_name=storage.bucket_name,
            image=image,
            compile_cache=bucket_url.apply(compile_cache_dir),
            kubeconfig=cluster.kubeconfig,
            kubernetes=cluster.provider,
        ),
        _after(cluster, storage, slices),
    )
    shape = settings.slice_shape
    outputs: ExportedOutputs = InfraOutputs(
        cluster_name=cluster.name,
        cluster_id=cluster.cluster_id,
        cluster_location=settings.cluster_location,
        cluster_endpoint=cluster.endpoint,
        cluster_ca_certificate=cluster.ca_certificate,
        kubeconfig=cluster.kubeconfig,
        mode=settings.mode,
        namespace=settings.namespace,
        service_account=storage.service_account_name,
        ray_cluster_name=ray.ray_cluster_name,
        head_service_name=ray.head_service_name,
        dashboard_port=ray.dashboard_port,
        # The token itself is generated in the cluster by KubeRay and never enters the stack's
        # state: the output only names the Secret.
        ray_auth_secret=ray.auth_secret_name,
        ray_image=image,
        bucket_name=storage.bucket_name,
        checkpoint_root=kuberay.CHECKPOINT_MOUNT,
        checkpoint_bucket_url=bucket_url,
        dataset_root=kuberay.DATASET_MOUNT if settings.dataset_bucket is not None else None,
        dataset_uri=settings.dataset_uri,
        preset=settings.preset.name,
        accelerator=settings.accelerator.name,
        slices=settings.slices,
        topology=settings.topology,
        hosts_per_slice=shape.vms,
        chips_per_host=shape.chips_per_vm,
        total_chips=settings.total_chips,
        capacity=list(settings.capacity),
        min_slices=settings.min_slices,
        price_per_chip_hour_usd=cost.price_per_chip_hour,
        training_dollars_per_hour=cost.training_dollars_per_hour,
        idle_dollars_per_hour=cost.idle_dollars_per_hour,
        idle_dollars_per_day=cost.idle_dollars_per_day,
        cost_basis=cost.basis,
        tpu_pools=slices.pool_names,
        dcn_networks=networks.network_names if networks else [],
    )
    return exported(outputs)
