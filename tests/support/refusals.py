"""The refusal harness the settings tests share: a bad case (one or more settings on a shipped
stack, and what the refusal must say), the run of a program that must refuse it, and the
assertions on the refusal: the program's own error type, no SDK wrapping, one problem naming the
setting, its value and what would be valid, and nothing registered."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from domain.config.settings import SettingsError
from domain.problems import ProblemsError
from tests.support.pulumi_harness import INFRA_PROJECT, PROJECT_ROOT, RecordingMonitor, run_program, stack_config
from tests.support.workloads_program import INFRA_OUTPUTS, INFRA_STACK, PROJECT, WORKLOADS_DIR

UNSET = object()  # removes a setting the stack file has


@dataclass(frozen=True)
class Bad:
    id: str
    settings: dict[str, Any]  # project keys bare, a provider's as PROVIDER:KEY; UNSET removes one
    problem: str | None  # the whole problem, exactly, where the case pins it
    names: tuple[str, ...]  # what one problem must name: the setting (and its value), what is valid
    stack: str = "dev"
    secrets: Collection[str] = ()  # keys set with --secret
    infra: dict[str, Any] | None = None  # the infra stack's outputs, for the workloads program
    error: type[ProblemsError] | None = None  # the refusal's exact type; None: the program's settings error


def engine_key(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def run_refused(
    bad: Bad,
    program: Callable[[], Any],
    *,
    project: str,
    project_dir: Path = PROJECT_ROOT,
    config_stack: str | None = None,
    stack_outputs: dict[str, dict[str, Any]] | None = None,
    raises: type[ProblemsError] = ProblemsError,
) -> tuple[ProblemsError, RecordingMonitor]:
    """Runs `program` under mocks on the stack file of `config_stack` (default: the case's stack)
    with the case's settings; fails unless it raises `raises`. Returns the error and the monitor
    that recorded (or did not) each registration."""
    config = stack_config(config_stack or bad.stack, project_dir)
    for key, value in bad.settings.items():
        if value is UNSET:
            config.pop(engine_key(project, key))
        else:
            config[engine_key(project, key)] = value
    monitor = RecordingMonitor(stack_outputs=stack_outputs)
    with pytest.raises(raises) as caught:
        run_program(
            program,
            config,
            project=project,
            stack=bad.stack,
            monitor=monitor,
            secret_keys=frozenset(engine_key(project, key) for key in bad.secrets),
        )
    return caught.value, monitor


def assert_refused(bad: Bad, error: ProblemsError, monitor: RecordingMonitor, expected: type[ProblemsError]) -> None:
    """The refusal is `expected` itself (no SDK wrapping, no object reprs), one of its problems
    names every part the case names (the case's exact problem, and only it, where it pins one),
    and nothing was registered."""
    assert type(error) is expected
    assert str(error).startswith(f"{expected.heading}:\n  - ")
    assert "While processing" not in str(error) and " object at 0x" not in str(error)
    if bad.problem is not None:
        assert error.problems == [bad.problem]
        assert str(error) == f"{expected.heading}:\n  - {bad.problem}"
    assert any(all(name in problem for name in bad.names) for problem in error.problems), error.problems
    assert monitor.registrations == []


def assert_distinct_cases(cases: Sequence[Bad], at_least: int) -> None:
    assert len(cases) >= at_least
    assert len({bad.id for bad in cases}) == len(cases)


def refused_by_infra(bad: Bad) -> tuple[ProblemsError, RecordingMonitor]:
    """The infra program on dev's stack file (under the case's stack name) with the case's
    settings: it must raise its SettingsError."""
    from infra.config import read_settings
    from infra.program import build

    return run_refused(
        bad, lambda: build(read_settings()), project=INFRA_PROJECT, config_stack="dev", raises=SettingsError
    )


def refused_by_workloads(bad: Bad) -> tuple[ProblemsError, RecordingMonitor]:
    """The workloads program on the case's stack file with the case's settings, reading the case's
    infra outputs (default: tests/support/workloads_program.py's): it must raise a ProblemsError."""
    from workloads.config import read_settings
    from workloads.program import build

    infra = INFRA_OUTPUTS if bad.infra is None else bad.infra
    return run_refused(
        bad,
        lambda: build(read_settings()),
        project=PROJECT,
        project_dir=WORKLOADS_DIR,
        stack_outputs={INFRA_STACK: infra},
    )


def assert_names(
    message: str,
    *,
    setting: str,
    value: str | None = None,
    fix: str | None = None,
    phrase: str | None = None,
) -> None:
    """A refusal's message names the parts that carry its meaning, whatever the wording around
    them: the setting, the bad value as the message shows it (right after the setting where the
    message opens `setting = value`), what would be valid or what to run, and one phrase that
    tells this refusal from the others. A refusal whose exact wording matters (the README quotes
    it) keeps an exact test of its own."""
    assert setting in message, (setting, message)
    if value is not None:
        assert value in message, (value, message)
        if message.startswith(f"{setting} = "):
            assert message.startswith(f"{setting} = {value}"), (setting, value, message)
    if fix is not None:
        assert fix in message, (fix, message)
    if phrase is not None:
        assert phrase in message, (phrase, message)


def assert_one_problem(problems: Sequence[str], **parts: Any) -> str:
    """Exactly one problem, naming `parts` (see `assert_names`); returns it."""
    assert len(problems) == 1, problems
    assert_names(problems[0], **parts)
    return problems[0]
