"""Checkpoint storage: a private bucket, the Kubernetes service account the Ray pods run as, and
the bucket-scoped role for that account's Workload Identity principal (no Google service
account, no key)."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain import gcp_resources
from domain.settings import StackSettings
from infra.components.apis import ProjectApis
from infra.components.cluster import GkeCluster


class CheckpointStorage(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    service_account_name: pulumi.Output[str]
    member: pulumi.Output[str]
    # What pods that mount the bucket must wait for.
    ready: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        apis: ProjectApis,
        cluster: GkeCluster,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:storage:CheckpointStorage", name, None, opts)
        bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            **gcp_resources.bucket_args(settings),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis]),
        )

        k8s_opts = pulumi.ResourceOptions(parent=self, provider=cluster.provider, depends_on=cluster.ready)
        namespace_ready: list[pulumi.Resource] = []
        if settings.namespace != "default":
            namespace_ready.append(
                k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": settings.namespace}, opts=k8s_opts)
            )
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata={"name": settings.service_account, "namespace": settings.namespace},
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=namespace_ready)),
        )

        project = gcp.organizations.get_project_output(project_id=settings.project)
        self.member = project.number.apply(
            lambda number: gcp_resources.workload_identity_principal(
                number, settings.project, settings.namespace, settings.service_account
            )
        )
        # The principal's workload pool only exists once the cluster does: order after it.
        binding = gcp.storage.BucketIAMMember(
            f"{name}-checkpoint-access",
            bucket=bucket.name,
            role=gcp_resources.CHECKPOINT_ROLE,
            member=self.member,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster.cluster]),
        )
        self.bucket_name = bucket.name
        self.service_account_name = service_account.metadata.name
        self.ready = [service_account, binding, *namespace_ready]
        self.register_outputs(
            {
                "bucket_name": self.bucket_name,
                "service_account_name": self.service_account_name,
                "member": self.member,
            }
        )
