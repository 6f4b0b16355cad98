"""Reads the workloads stack's config once, from the engine, into validated settings."""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from domain.workload_settings import WorkloadSettings, parse_workload_settings


def read_settings() -> WorkloadSettings:
    project = pulumi.get_project()
    prefix = f"{project}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    config = pulumi.Config()
    raw = {key[len(prefix):]: config.get(key[len(prefix):]) for key in keys if key.startswith(prefix)}
    return parse_workload_settings(raw, stack=pulumi.get_stack(), project_name=project)
