"""Settings parsed from the config the Pulumi CLI would hand the program, for tests that parse
settings without running a program: the project file's defaults merged in, every value as text
(domain/config/cli_config.py), then read as stack_config/__init__.py reads the engine's config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.config import cli_config
from domain.config.settings import parse_settings
from domain.config.workload_settings import parse_workload_settings
from domain.paths import PROJECT_ROOT
from domain.stack_settings import StackSettings
from domain.workload_settings import WorkloadSettings

WORKLOADS_DIR = PROJECT_ROOT / "workloads"


def infra_settings(raw: Mapping[str, Any], stack: str = "dev") -> StackSettings:
    config = cli_config.settings_raw(PROJECT_ROOT, stack, raw, StackSettings)
    return parse_settings(config, stack=stack, project_name=cli_config.project_document(PROJECT_ROOT)["name"])


def workload_settings(raw: Mapping[str, Any], stack: str = "dev") -> WorkloadSettings:
    config = cli_config.settings_raw(WORKLOADS_DIR, stack, raw, WorkloadSettings)
    return parse_workload_settings(config, stack=stack, project_name=cli_config.project_document(WORKLOADS_DIR)["name"])
