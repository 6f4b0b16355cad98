"""The GKE cluster (Standard or Autopilot), its nodes' least-privilege service account, the
on-demand CPU pool for the Ray head, and an explicit Kubernetes provider for it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from domain.gcp.kubeconfig import gke_kubeconfig
from domain.resources import gcp_resources
from domain.stack_settings import StackSettings
from infra.components import child_options


@dataclass(frozen=True)
class GkeClusterArgs:
    project: str
    node_account: Mapping[str, Any]
    # The cluster's and the Ray head pool's arguments (the pool None on Autopilot, which has no
    # node pools). The component fills in the nodes' service account (the
    # gcp_resources.NODE_SERVICE_ACCOUNT slot) and the pool's `cluster`, known once those exist.
    cluster: Mapping[str, Any]
    head_pool: Mapping[str, Any] | None

    @classmethod
    def from_settings(cls, settings: StackSettings) -> GkeClusterArgs:
        return cls(
            project=settings.project,
            node_account=gcp_resources.node_service_account_args(settings),
            cluster=gcp_resources.cluster_args(settings),
            head_pool=None if settings.is_autopilot else gcp_resources.head_pool_args(settings),
        )


class GkeCluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    # The full resource name, projects/P/locations/L/clusters/N (the provider's id of the cluster).
    cluster_id: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    # Exec-form kubeconfig (no token): safe to keep in state and to export.
    kubeconfig: pulumi.Output[dict[str, Any]]
    node_service_account_email: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:cluster:GkeCluster", name, None, opts)
        child = child_options(self, opts)

        node_account = gcp.serviceaccount.Account(f"{name}-nodes", **args.node_account, opts=child)
        node_roles = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[-1]}",
                project=args.project,
                role=role,
                member=node_account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=child,
            )
            for role in gcp_resources.NODE_SERVICE_ACCOUNT_ROLES
        ]
        # The nodes run as the account just created: its email fills the slot the args hold for it.
        cluster = gcp.container.Cluster(
            name,
            **gcp_resources.fill(args.cluster, gcp_resources.NODE_SERVICE_ACCOUNT, node_account.email),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=node_roles)),
        )
        if args.head_pool is not None:
            gcp.container.NodePool(
                f"{name}-{gcp_resources.HEAD_POOL_NAME}",
                **gcp_resources.fill(args.head_pool, gcp_resources.NODE_SERVICE_ACCOUNT, node_account.email),
                cluster=cluster.name,
                opts=child,
            )

        self.name = cluster.name
        self.cluster_id = cluster.id
        self.endpoint = cluster.endpoint
        self.ca_certificate = cluster.master_auth.cluster_ca_certificate
        self.node_service_account_email = node_account.email
        self.kubeconfig = pulumi.Output.all(cluster.name, cluster.endpoint, self.ca_certificate).apply(
            lambda values: gke_kubeconfig(f"gke_{args.project}_{values[0]}", values[1], values[2])
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
