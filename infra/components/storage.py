"""Checkpoint storage: a private bucket, the Kubernetes service account the Ray pods run as, and
the bucket-scoped role for that account's Workload Identity principal (no Google service
account, no key). With a dataset bucket (datasetBucket), the same principal also gets read-only
access to that existing bucket alone; the stack never creates it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain.resources import gcp_resources
from domain.stack_settings import StackSettings
from infra.components import child_options


@dataclass(frozen=True)
class CheckpointStorageArgs:
    project: str
    bucket: Mapping[str, Any]
    namespace: str
    service_account: str
    kubernetes: k8s.Provider
    # The dataset bucket's read-only grant (bucket and role), or None without one.
    dataset_access: Mapping[str, Any] | None = None

    @classmethod
    def from_settings(cls, settings: StackSettings, *, kubernetes: k8s.Provider) -> CheckpointStorageArgs:
        return cls(
            project=settings.project,
            bucket=gcp_resources.bucket_args(settings),
            namespace=settings.namespace,
            service_account=settings.service_account,
            kubernetes=kubernetes,
            dataset_access=gcp_resources.dataset_access_args(settings),
        )


class CheckpointStorage(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    service_account_name: pulumi.Output[str]
    member: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointStorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:storage:CheckpointStorage", name, None, opts)
        child = child_options(self, opts)
        bucket = gcp.storage.Bucket(f"{name}-bucket", **args.bucket, opts=child)

        k8s_opts = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(provider=args.kubernetes))
        namespace_ready: list[pulumi.Resource] = []
        if args.namespace != "default":
            namespace_ready.append(
                k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": args.namespace}, opts=k8s_opts)
            )
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa",
            metadata={"name": args.service_account, "namespace": args.namespace},
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=namespace_ready)),
        )

        project = gcp.organizations.get_project_output(project_id=args.project)
        self.member = project.number.apply(
            lambda number: gcp_resources.workload_identity_principal(
                number, args.project, args.namespace, args.service_account
            )
        )
        # The principal's workload pool only exists once the cluster does: the component waits for
        # the cluster's (infra/program.py), and so does this binding.
        gcp.storage.BucketIAMMember(
            f"{name}-checkpoint-access",
            bucket=bucket.name,
            role=gcp_resources.CHECKPOINT_ROLE,
            member=self.member,
            opts=child,
        )
        if args.dataset_access is not None:
            gcp.storage.BucketIAMMember(f"{name}-dataset-access", **args.dataset_access, member=self.member, opts=child)
        self.bucket_name = bucket.name
        self.service_account_name = service_account.metadata.name
        self.register_outputs(
            {
                "bucket_name": self.bucket_name,
                "service_account_name": self.service_account_name,
                "member": self.member,
            }
        )
