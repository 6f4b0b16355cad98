"""Reads the stack's config once, from the engine, into validated StackSettings."""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from domain.settings import StackSettings, parse_settings


def _project_keys(project: str) -> set[str]:
    """Every `project:key` the stack sets, so a misspelt key is reported instead of ignored."""
    prefix = f"{project}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    return {key[len(prefix) :] for key in keys if key.startswith(prefix)}


def read_settings() -> StackSettings:
    project = pulumi.get_project()
    config = pulumi.Config()
    gcp = pulumi.Config("gcp")
    raw = {key: config.get(key) for key in _project_keys(project)}
    raw.update(project=gcp.get("project"), region=gcp.get("region"), zone=gcp.get("zone"))
    return parse_settings(raw, stack=pulumi.get_stack(), project_name=project)
