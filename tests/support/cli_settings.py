"""Settings parsed from the config the Pulumi CLI would hand the program, for tests that parse
settings without running a program: the project file's defaults merged in, every value as text
(domain/config/cli_config.py), then read as stack_config/__init__.py reads the engine's config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.config import cli_config
from domain.config.setting import settings_of
from domain.config.settings import StackSettings, parse_settings
from domain.config.workload_settings import WorkloadSettings, parse_workload_settings
from domain.paths import PROJECT_ROOT

WORKLOADS_DIR = PROJECT_ROOT / "workloads"


def as_the_cli_hands_it(raw: Mapping[str, Any], cls: type, project_dir: Path, stack: str = "dev") -> dict[str, str]:
    """`raw` (project keys bare, a provider's as `namespace:key`; None for unset) as the program
    reads it under the CLI: the project's keys bare and the provider keys `cls` declares."""
    document = cli_config.project_document(project_dir)
    project = document["name"]
    stack_file = {key if ":" in key else f"{project}:{key}": value for key, value in raw.items() if value is not None}
    config = cli_config.engine_text(cli_config.merged(document, stack, stack_file))
    provider_keys = {entry.key for entry in settings_of(cls) if entry.namespace is not None}
    return {
        key.removeprefix(f"{project}:"): value
        for key, value in config.items()
        if key.startswith(f"{project}:") or key in provider_keys
    }


def infra_settings(raw: Mapping[str, Any], stack: str = "dev") -> StackSettings:
    config = as_the_cli_hands_it(raw, StackSettings, PROJECT_ROOT, stack)
    return parse_settings(config, stack=stack, project_name=cli_config.project_document(PROJECT_ROOT)["name"])


def workload_settings(raw: Mapping[str, Any], stack: str = "dev") -> WorkloadSettings:
    config = as_the_cli_hands_it(raw, WorkloadSettings, WORKLOADS_DIR, stack)
    return parse_workload_settings(config, stack=stack, project_name=cli_config.project_document(WORKLOADS_DIR)["name"])
