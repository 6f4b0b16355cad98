"""Shared fixtures: the infra program run under Pulumi mocks with a stack's config."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from infra.config import read_settings
from infra.program import build
from tests.support.pulumi_harness import ProgramRun, run_program, stack_config


def run_infra(config: dict[str, Any], stack: str = "dev") -> ProgramRun:
    return run_program(lambda: build(read_settings()), config, stack=stack)


@pytest.fixture
def infra_run() -> Callable[..., ProgramRun]:
    """Runs the infra program with the dev stack's config plus `overrides` (project keys)."""

    def run(stack: str = "dev", **overrides: Any) -> ProgramRun:
        config = stack_config(stack)
        config.update({f"maxtext-tpu-infra:{key}": value for key, value in overrides.items()})
        return run_infra(config, stack=stack)

    return run


@pytest.fixture(scope="session")
def local_ray_head():
    """One loopback-only Ray head for the whole test session, from the trainer environment;
    stopped by its pid at the end."""
    from workloads.local_ray import LocalRayHead

    with LocalRayHead() as head:
        yield head
