"""Each infra stack output is declared once (an `output(...)` field of `InfraOutputs`); the
export (tests/test_infra_program.py checks it), the workloads reader (workloads/infra_outputs.py),
the workloads tests' fake outputs and docs/reference.md's table derive from or are checked against
that declaration."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from domain.config.stack_outputs import (
    OPTIONAL_FOR_WORKLOADS,
    REQUIRED_BY_WORKLOADS,
    STACK_OUTPUTS,
    I,
    InfraOutputs,
    exported,
    markdown_table,
    output,
    outputs_of,
)
from domain.training.job import JobError
from tests.support.refusals import assert_one_problem
from tests.support.workloads_program import INFRA_OUTPUTS as FAKE_INFRA_OUTPUTS
from tools.sync_settings import (
    OUTPUTS_END,
    OUTPUTS_START,
    PROJECTS,
    REFERENCE,
    end_marker,
    start_marker,
    synced_reference,
)
from workloads.infra_outputs import read_infra_outputs

NAMES = [entry.name for entry in STACK_OUTPUTS]


def test_readme_lists_exactly_the_declared_outputs():
    """Run ./scripts/sync-settings after changing an output; docs/reference.md says where the table goes."""
    text = REFERENCE.read_text()
    assert OUTPUTS_START in text and OUTPUTS_END in text, "docs/reference.md needs the outputs:infra markers"
    assert text.split(OUTPUTS_START, 1)[1].split(OUTPUTS_END, 1)[0] == markdown_table()
    assert synced_reference(text) == text


def test_sync_writes_the_outputs_table_between_its_markers():
    stale = f"intro\n{OUTPUTS_START}| `clusterName` | old |\n{OUTPUTS_END}after\n"
    settings_tables = "".join(start_marker(name) + end_marker(name) for _, _, name in PROJECTS)
    synced = synced_reference(settings_tables + stale)
    assert synced.endswith(f"intro\n{OUTPUTS_START}{markdown_table()}{OUTPUTS_END}after\n")


def test_each_output_is_named_once_and_described_for_a_table_cell():
    assert len(set(NAMES)) == len(NAMES)
    for entry in STACK_OUTPUTS:
        assert re.fullmatch(r"[a-z][A-Za-z]*", entry.name), entry.name
        assert entry.description.endswith("."), entry.name
        # Outside code spans, `<` and `>` would be read as HTML and `|` would end the cell.
        assert not re.search(r"[<>|]", re.sub(r"`[^`]*`", "", entry.description)), entry.name


def test_the_workloads_stack_reads_only_declared_outputs():
    assert set(REQUIRED_BY_WORKLOADS) | set(OPTIONAL_FOR_WORKLOADS) <= set(NAMES)
    assert not set(REQUIRED_BY_WORKLOADS) & set(OPTIONAL_FOR_WORKLOADS)


def test_the_workloads_tests_fake_infra_outputs_are_declared_outputs_with_every_required_one():
    assert set(FAKE_INFRA_OUTPUTS) <= set(NAMES)
    assert set(REQUIRED_BY_WORKLOADS) <= set(FAKE_INFRA_OUTPUTS)


@pytest.mark.parametrize("name", REQUIRED_BY_WORKLOADS)
def test_an_infra_stack_without_a_required_output_is_refused_naming_it(name):
    without = {key: value for key, value in FAKE_INFRA_OUTPUTS.items() if key != name}
    with pytest.raises(JobError) as refused:
        read_infra_outputs("infra", without)
    assert_one_problem(
        refused.value.problems,
        setting=f"the infra stack infra has no output {name}",
        fix="check that infraStack names a deployed infra stack and run pulumi up on it",
    )


@pytest.mark.parametrize("name", OPTIONAL_FOR_WORKLOADS)
def test_an_infra_stack_without_an_optional_output_is_read_without_it(name):
    complete = {**FAKE_INFRA_OUTPUTS, "clusterId": "projects/p/locations/l/clusters/c", "costBasis": "list price"}
    read = read_infra_outputs("infra", {key: value for key, value in complete.items() if key != name})
    (field,) = (entry.field for entry in STACK_OUTPUTS if entry.name == name)
    assert getattr(read, field) is None


def test_the_outputs_are_read_typed_whole_numbers_as_the_engine_sends_them_included():
    read = read_infra_outputs("infra", {**FAKE_INFRA_OUTPUTS, "slices": 2.0, "capacity": ["spot"]})
    assert (read.slices, read.dashboard_port, read.price_per_chip_hour_usd) == (2, 8265, 2.70)
    assert type(read.slices) is int and read.capacity == ["spot"] and read.topology == "4x4"


@pytest.mark.parametrize(
    "name, value, valid",
    [
        ("slices", 2.5, "a whole number of at least 1"),
        ("dashboardPort", 0, "a whole number of at least 1"),
        ("pricePerChipHourUsd", "cheap", "a number"),
        ("capacity", "spot", "a list"),
        ("topology", 4, "a string"),
    ],
)
def test_an_output_of_the_wrong_kind_is_refused_naming_it_its_value_and_its_kind(name, value, valid):
    with pytest.raises(JobError) as refused:
        read_infra_outputs("infra", {**FAKE_INFRA_OUTPUTS, name: value})
    assert refused.value.problems == [f"the infra stack infra's output {name} = {value!r} is not {valid}"]


def _values(cls: type, **extra: Any) -> Any:
    return cls(**{field.name: field.name for field in dataclasses.fields(InfraOutputs)}, **extra)


def test_a_new_output_is_one_declaration():
    """A made-up output added to the record is exported by its camelCase name and documented in the
    reference table, its kind read from its type; a program that gives it no value fails before
    returning."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithWarmup(InfraOutputs[Any, Any, Any, Any, Any]):
        warmup_minutes: I | None = output("Minutes of warm-up.")

    entry = outputs_of(WithWarmup)[-1]
    assert (entry.name, entry.kind, entry.workloads) == ("warmupMinutes", "integer", None)
    assert exported(_values(WithWarmup, warmup_minutes=5))["warmupMinutes"] == 5
    assert "| `warmupMinutes` | integer | no | Minutes of warm-up. |" in markdown_table(WithWarmup)
    with pytest.raises(TypeError, match="warmup_minutes"):
        _values(WithWarmup)


def test_an_output_that_is_not_declared_cannot_be_exported():
    with pytest.raises(TypeError, match="warmup_minutes"):
        _values(InfraOutputs, warmup_minutes=5)
    assert list(exported(_values(InfraOutputs))) == NAMES
