"""Reads the workloads stack's config once, from the engine, into validated settings."""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from domain.workload_settings import WorkloadSettings, parse_workload_settings


def _project_keys() -> tuple[str, list[str]]:
    prefix = f"{pulumi.get_project()}:"
    keys = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    return prefix, sorted(key[len(prefix) :] for key in keys if key.startswith(prefix))


def read_settings() -> WorkloadSettings:
    """The validated settings; raises WorkloadSettingsError listing every problem, secret
    settings that cannot stay secret included."""
    _, names = _project_keys()
    config = pulumi.Config()
    raw = {name: config.get(name) for name in names}
    return parse_workload_settings(
        raw, stack=pulumi.get_stack(), project_name=pulumi.get_project(), secret_settings=secret_settings()
    )


def secret_settings() -> frozenset[str]:
    """The settings set with `pulumi config set --secret`: what they feed must stay secret."""
    prefix, names = _project_keys()
    return frozenset(name for name in names if pulumi.runtime.is_config_secret(prefix + name))
