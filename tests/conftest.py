"""Shared fixtures: the infra program run under Pulumi mocks with a stack's config, and a RayJob
provider that polls fast."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings

from domain.compile_cache import COMPILE_CACHE_ENV, COMPILE_CACHE_PREFIX
from domain.paths import INFRA_PROJECT, PROJECT_ROOT
from tests.support.infra_program import run_infra
from tests.support.pulumi_harness import ProgramRun, stack_config
from workloads.ray_job import wait as job_wait

# What runs on a real Ray cluster or waits on the clock is `timed`: ./scripts/test runs it in the
# foreground, and the rest beside it at a lower priority (docs/testing.md).
TIMED_FIXTURES = frozenset({"local_ray_head", "fast_polling"})
FITCHECK_GROUP = "fitcheck"


# The suite is the compilation cache's first user: every local Ray cluster the tests start
# inherits this, so the jobs of every test share one persistent cache (domain/compile_cache.py),
# as a stack's runs do. Only timings change with it: a test that needs an empty cache sets its own.
TEST_COMPILE_CACHE = PROJECT_ROOT / ".cache" / f"{COMPILE_CACHE_PREFIX}-tests"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(COMPILE_CACHE_ENV, str(TEST_COMPILE_CACHE))


# Hypothesis' default deadline (200 ms an example) is a bound on the clock, and the property tests
# are not `timed`: they run at a lower priority beside the timed ones, where one example of pure
# arithmetic once took 352 ms and failed a fresh clone's run. What they assert is the property.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks `timed` every `slow` test (each runs real Ray clusters) and every test that uses a
    real Ray head or the provider's fast polling, before `-m` selects; groups the `fitcheck`
    tests for pytest-xdist."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("slow") is not None or uses & TIMED_FIXTURES:
            item.add_marker(pytest.mark.timed)
        # Under pytest-xdist (`-n 2 --dist loadgroup`, ./scripts/test), every `fitcheck` test runs
        # in one process, in order: one compiles what the next reads from the cache, never both
        # at once.
        if item.get_closest_marker("fitcheck") is not None:
            item.add_marker(pytest.mark.xdist_group(FITCHECK_GROUP))


@pytest.fixture
def infra_run() -> Callable[..., ProgramRun]:
    """Runs the infra program with the dev stack's config plus `overrides` (project keys)."""

    def run(stack: str = "dev", **overrides: Any) -> ProgramRun:
        config = stack_config(stack)
        config.update({f"{INFRA_PROJECT}:{key}": value for key, value in overrides.items()})
        return run_infra(config, stack=stack)

    return run


@pytest.fixture(autouse=True)
def _own_fit_check_cache(request, tmp_path_factory, monkeypatch):
    """Estimates and policies read this checkout's fit-check cache: a test sees an empty one of
    its own, so a fit check run before it (by hand, or by a `fitcheck` test) cannot change what
    it asserts. `fitcheck` tests keep the real cache: they are the compiles it saves."""
    if request.node.get_closest_marker("fitcheck") is None:
        from domain.perf import fit_results

        monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path_factory.mktemp("fit-check-cache"))


@pytest.fixture(autouse=True)
def _own_run_pages(tmp_path_factory, monkeypatch):
    """The pages of runs whose checkpoints are not on this machine (GKE jobs, fakes of them) go
    under the checkout's .runs/pages/: a test's go to a directory of its own."""
    from workloads.ray_job import report

    monkeypatch.setattr(report, "RUN_PAGES", tmp_path_factory.mktemp("run-pages"))


@pytest.fixture(scope="session")
def local_ray_head():
    """One loopback-only Ray head for the whole test session, from the trainer environment;
    stopped by its pid at the end. It requires its own token: while it lives, this process's
    environment points Ray's clients at the token file (RAY_AUTH_TOKEN_PATH, with
    RAY_AUTH_MODE=token, without which Ray's clients send no token), as a user's shell would,
    so code under test and the subprocesses tests start find it; the old values come back
    after. A test that starts another head must use that head's auth_headers or
    client_environment()."""
    from workloads.local_ray import LocalRayHead

    with LocalRayHead() as head, head.client_environment():
        yield head


@pytest.fixture
def fast_polling(monkeypatch):
    """The RayJob provider's wait, polling every 0.2 s and giving up on a silent API after 3 s."""
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.2)
    monkeypatch.setattr(job_wait, "LOST_CONTACT_SECONDS", 3.0)
