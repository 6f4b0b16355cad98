"""The GKE cluster (Standard or Autopilot), its nodes' least-privilege service account, the
on-demand CPU pool for the Ray head, and an explicit Kubernetes provider for it."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain import gcp_resources
from domain.kubeconfig import gke_kubeconfig
from domain.settings import StackSettings
from infra.components.apis import ProjectApis


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    name: pulumi.Output[str]
    # The full resource name, projects/P/locations/L/clusters/N (the provider's id of the cluster).
    cluster_id: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    # Exec-form kubeconfig (no token): safe to keep in state and to export.
    kubeconfig: pulumi.Output[dict[str, Any]]
    node_service_account_email: pulumi.Output[str]
    provider: k8s.Provider
    # What Kubernetes objects must wait for: the cluster and, on Standard, the head's node pool.
    ready: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        apis: ProjectApis,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:cluster:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        node_account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            **gcp_resources.node_service_account_args(settings),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis]),
        )
        node_roles = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[-1]}",
                project=settings.project,
                role=role,
                member=node_account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=child,
            )
            for role in gcp_resources.NODE_SERVICE_ACCOUNT_ROLES
        ]
        self.cluster = gcp.container.Cluster(
            name,
            **gcp_resources.cluster_args(settings, node_account.email),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis, *node_roles]),
        )
        self.ready = [self.cluster]
        if not settings.is_autopilot:
            head_pool = gcp.container.NodePool(
                f"{name}-{gcp_resources.HEAD_POOL_NAME}",
                **gcp_resources.head_pool_args(settings, self.cluster.name, node_account.email),
                opts=child,
            )
            self.ready.append(head_pool)

        self.name = self.cluster.name
        self.cluster_id = self.cluster.id
        self.endpoint = self.cluster.endpoint
        self.ca_certificate = self.cluster.master_auth.cluster_ca_certificate
        self.node_service_account_email = node_account.email
        self.kubeconfig = pulumi.Output.all(self.cluster.name, self.cluster.endpoint, self.ca_certificate).apply(
            lambda values: gke_kubeconfig(f"gke_{settings.project}_{values[0]}", values[1], values[2])
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig.apply(lambda config: json.dumps(config, sort_keys=True)),
            enable_server_side_apply=True,
            opts=child,
        )
        self.register_outputs(
            {
                "name": self.name,
                "cluster_id": self.cluster_id,
                "endpoint": self.endpoint,
                "ca_certificate": self.ca_certificate,
                "node_service_account_email": self.node_service_account_email,
            }
        )
