"""The Google Cloud APIs the stack needs, enabled before anything else is created."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from domain import gcp_resources
from domain.settings import StackSettings


class ProjectApis(pulumi.ComponentResource):
    services: list[gcp.projects.Service]

    def __init__(self, name: str, settings: StackSettings, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:project:ProjectApis", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{api.split('.')[0]}",
                **gcp_resources.project_service_args(settings, api),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for api in gcp_resources.REQUIRED_APIS
        ]
        self.register_outputs({"services": [service.service for service in self.services]})
