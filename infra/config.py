"""Reads the stack's config once, from the engine, into validated StackSettings."""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from domain.settings import StackSettings, parse_settings

# The Google provider's keys the program reads, by the name `parse_settings` gives them.
_GCP_KEYS = ("project", "region", "zone")


def _project_keys(project: str) -> set[str]:
    """Every `project:key` the stack sets, so a misspelt key is reported instead of ignored."""
    prefix = f"{project}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    return {key[len(prefix) :] for key in keys if key.startswith(prefix)}


def _secret_keys(project: str, keys: set[str]) -> frozenset[str]:
    """The settings set with `pulumi config set --secret` (their values reach outputs and names
    in clear, so `parse_settings` refuses them)."""
    secret = {key for key in keys if pulumi.runtime.is_config_secret(f"{project}:{key}")}
    secret |= {key for key in _GCP_KEYS if pulumi.runtime.is_config_secret(f"gcp:{key}")}
    return frozenset(secret)


def read_settings() -> StackSettings:
    project = pulumi.get_project()
    config = pulumi.Config()
    gcp = pulumi.Config("gcp")
    keys = _project_keys(project)
    raw = {key: config.get(key) for key in keys}
    raw.update({key: gcp.get(key) for key in _GCP_KEYS})
    return parse_settings(raw, stack=pulumi.get_stack(), project_name=project, secret_keys=_secret_keys(project, keys))
