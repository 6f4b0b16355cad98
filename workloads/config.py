"""Reads the workloads stack's config once, from the engine, into validated settings."""

from __future__ import annotations

import pulumi

from domain.workload_settings import WorkloadSettings, parse_workload_settings
from stack_config import raw_config


def read_settings() -> WorkloadSettings:
    """The validated settings (they name the ones set as secrets); raises WorkloadSettingsError
    listing every problem, secret settings that cannot stay secret included."""
    raw, secrets = raw_config(WorkloadSettings)
    return parse_workload_settings(
        raw, stack=pulumi.get_stack(), project_name=pulumi.get_project(), secret_settings=secrets
    )
