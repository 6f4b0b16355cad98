"""The Google Cloud APIs the stack needs, enabled before anything else is created."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from domain.resources import gcp_resources
from domain.stack_settings import StackSettings
from infra.components import child_options


@dataclass(frozen=True)
class ProjectApisArgs:
    # One `gcp.projects.Service`'s arguments per API, as domain/resources/gcp_resources.py builds them.
    services: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_settings(cls, settings: StackSettings) -> ProjectApisArgs:
        return cls(tuple(gcp_resources.project_service_args(settings, api) for api in gcp_resources.REQUIRED_APIS))


class ProjectApis(pulumi.ComponentResource):
    services: list[gcp.projects.Service]

    def __init__(self, name: str, args: ProjectApisArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:project:ProjectApis", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{service['service'].split('.')[0]}",
                **service,
                opts=child_options(self, opts),
            )
            for service in args.services
        ]
        self.register_outputs({"services": [service.service for service in self.services]})
