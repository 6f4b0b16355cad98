"""The infra program run under Pulumi mocks with a stack's config."""

from __future__ import annotations

from typing import Any

from infra.config import read_settings
from infra.program import build
from tests.support.pulumi_harness import ProgramRun, run_program


def run_infra(config: dict[str, Any], stack: str = "dev") -> ProgramRun:
    return run_program(lambda: build(read_settings()), config, stack=stack)
