"""Reads the workloads stack's config once, from the engine, into validated settings."""

from __future__ import annotations

from domain.config.workload_settings import parse_workload_settings
from domain.workload_settings import WorkloadSettings
from stack_config import raw_config, stack_identity


def read_settings() -> WorkloadSettings:
    """The validated settings of this stack (named in full: its default run name derives from its
    organization, project and name); they name the settings set as secrets. Raises
    WorkloadSettingsError listing every problem, secret settings that cannot stay secret included."""
    identity = stack_identity()
    raw, secrets = raw_config(WorkloadSettings)
    return parse_workload_settings(
        raw,
        stack=identity.stack,
        project_name=identity.project,
        organization=identity.organization,
        secret_settings=secrets,
    )
