"""Each setting is declared once (a `setting(...)` field of its project's settings class); the
reader, Pulumi.yaml's `config:` block and docs/reference.md's tables all derive from that declaration."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pulumi
import pytest

from domain.config.raw_config import read
from domain.config.settings import SettingsError, parse_settings
from domain.setting import SECRET, markdown_table, pulumi_yaml_config, setting, settings_of
from domain.stack_settings import StackSettings
from domain.workload_settings import WorkloadSettings
from stack_config import raw_config
from tests.support.cli_settings import workload_settings
from tests.support.pulumi_harness import INFRA_PROJECT, run_program, stack_config
from tools.sync_settings import (
    PROJECTS,
    REFERENCE,
    project_file,
    project_file_text,
    synced_project_file,
    synced_reference,
)

GCP = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Example:
    name: str = setting(
        "string", "A name.", default="ray", check=lambda v: None if v.islower() else "is not lowercase; use a-z"
    )
    count: int = setting("integer", "How many.", default=2, minimum=1, maximum=8)
    ratio: float | None = setting("number", "A fraction.", above=0, maximum=1, valid="use a fraction in (0, 1]")
    flag: bool = setting("boolean", "On or off.", default=False)
    ranges: tuple[str, ...] = setting("array", "Some ranges.", default=("a",))
    extra: Mapping[str, Any] = setting("object", "A map.", default={})
    color: str = setting("string", "A colour.", default="red", choices=("red", "blue"), in_clear="it is exported")
    project: str = setting(
        "string", "The provider's.", namespace="gcp", required="<project-id>", in_clear="it is exported"
    )


def example(raw: dict[str, Any], secrets: frozenset[str] = frozenset()):
    return read(Example, {"gcp:project": "p", **raw}, project_name="demo", secret_keys=secrets)


# ---------------------------------------------------------------- the generic reader


def test_engine_text_becomes_typed_values_and_defaults_fill_the_rest():
    reading = example({"count": "3", "ratio": "0.5", "flag": "TRUE", "ranges": '["x", "y"]', "extra": '{"k": 1}'})
    assert reading.problems == []
    assert reading.values == {
        "name": "ray",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "ranges": ("x", "y"),
        "extra": {"k": 1},
        "color": "red",
        "project": "p",
    }
    assert example({"ranges": "x, y"}).values["ranges"] == ("x", "y")  # as `pulumi config set` types a list


@pytest.mark.parametrize(
    "raw, problem",
    [
        ({"count": "two"}, "count = 'two' is not a whole number; use 1 to 8"),
        ({"count": "1.5"}, "count = 1.5 is not a whole number; use 1 to 8"),
        ({"count": "9"}, "count = 9 is out of range; use 1 to 8"),
        ({"ratio": "0"}, "ratio = 0 is out of range; use a fraction in (0, 1]"),
        ({"ratio": "half"}, "ratio = 'half' is not a number; use a fraction in (0, 1]"),
        ({"flag": "yes"}, "flag = 'yes' is not a boolean; use true or false"),
        ({"ranges": "[1, 2]"}, "ranges = [1, 2] is not a list of strings"),
        ({"extra": "[1]"}, "extra = [1] is not an object (a map of keys to values)"),
        ({"extra": "k: v"}, "extra = 'k: v' is not an object; set it in the stack file as a map"),
        ({"color": "green"}, "color = 'green' is not valid; choose one of: red, blue"),
        ({"name": "Ray"}, "name = 'Ray' is not lowercase; use a-z"),
        ({"name": "123"}, "name = '123' is not lowercase; use a-z"),  # text stays quoted, even digits
        (
            {"colour": "red"},
            "demo:colour is not a setting of this project; valid settings: name, count, ratio, flag, ranges, extra, color",
        ),
        ({"gcp:project": None}, "gcp:project is not set; run `pulumi config set gcp:project <project-id>`"),
    ],
)
def test_each_value_is_checked_on_its_own(raw, problem):
    reading = example(raw)
    assert reading.problems == [problem]


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("count", 9, "count = 9 is out of range; use 1 to 8"),
        ("count", 0, "count = 0 is out of range; use 1 to 8"),
        ("ratio", 0.0, "ratio = 0.0 is out of range; use a fraction in (0, 1]"),
        ("color", "green", "color = 'green' is not valid; choose one of: red, blue"),
        ("name", "123", "name = '123' is not lowercase; use a-z"),
        ("count", 8, None),
        ("name", "ray", None),
    ],
)
def test_a_value_that_did_not_come_through_the_reader_is_checked_against_the_same_declaration(field, value, problem):
    entry = {entry.field: entry for entry in settings_of(Example)}[field]
    assert entry.problem(value) == problem
    if problem is not None:  # the reader says the same of the value as text
        assert example({entry.key: str(value) if field != "name" else value}).problems == [problem]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Narrower:
    """Settings declared from another class's: the rule kept, this project's documentation and a
    narrower range given."""

    count: int = setting(settings_of(Example)[1], "How many, here.", maximum=4, default=3)
    color: str = setting(settings_of(Example)[6])


def test_a_setting_declared_from_another_keeps_its_rule_and_takes_the_changes_given():
    count, color = settings_of(Narrower)
    assert (count.key, count.description, count.minimum, count.maximum, count.default) == (
        "count",
        "How many, here.",
        1,
        4,
        3,
    )
    assert count.problem(5) == "count = 5 is out of range; use 1 to 4"
    assert color == dataclasses.replace(settings_of(Example)[6], field="color")
    assert read(Narrower, {"count": "0"}, project_name="demo").problems == ["count = 0 is out of range; use 1 to 4"]


def test_a_setting_without_a_default_is_set_when_the_stack_gives_it_a_value():
    reading = example({"ratio": "0.5"})
    assert reading.is_set("project") and reading.is_set("ratio")  # gcp:project, by its field
    assert not example({"ratio": None}).is_set("ratio")
    with pytest.raises(KeyError):
        reading.is_set("colour")  # not a field: a mistake, not "unset"


def test_a_setting_with_a_default_is_asked_whether_it_changed_never_whether_it_is_set():
    """The CLI sets every default on every stack (domain/config/cli_config.py): `is_set` of such a
    setting would be true for a stack that never mentions it, so asking it is a mistake."""
    with pytest.raises(ValueError, match="count has a default, which the CLI sets on every stack"):
        example({"count": "2"}).is_set("count")
    assert not example({"count": "2"}).changed("count")  # the default, as the CLI merges it
    assert not example({}).changed("count")
    assert example({"count": "3"}).changed("count")
    assert not example({"count": "9"}).changed("count")  # refused: reported as out of range instead


def test_a_refused_value_is_none_and_marked_refused_so_later_checks_can_skip_it():
    reading = example({"count": "9", "name": "Ray"})
    assert reading.values["count"] is None and not reading.ok("count") and not reading.ok("name")
    assert reading.ok("flag", "color")


def test_a_secret_that_would_be_shown_in_clear_is_refused_and_never_repeated():
    reading = example({"color": "green-secret", "name": "Sekrit"}, frozenset({"color", "name"}))
    assert reading.problems == [
        "color is set as a secret, but it is exported, so it would appear in clear there; set it without --secret "
        "(`pulumi config set color VALUE`), or keep the value out of this stack",
        f"name = {SECRET} is not lowercase; use a-z",
        f"color = {SECRET} is not valid; choose one of: red, blue",
    ]
    with pytest.raises(SettingsError) as caught:
        reading.problems.append("a later check quotes 'green-secret' and Sekrit")
        reading.raise_problems(SettingsError)
    assert "green-secret" not in str(caught.value) and "Sekrit" not in str(caught.value)


def test_a_secret_that_may_stay_secret_is_not_refused():
    assert example({"name": "ray"}, frozenset({"name"})).problems == []


# ---------------------------------------------------------------- what the declarations document


@pytest.mark.parametrize("directory, cls, name", PROJECTS, ids=[name for _, _, name in PROJECTS])
def test_pulumi_yaml_declares_exactly_the_settings_classes_settings(directory, cls, name):
    """Pulumi.yaml is what `pulumi config` shows users; `./scripts/sync-settings` writes it."""
    on_disk = project_file(directory).read_text()
    assert on_disk == project_file_text(synced_project_file(directory, cls)), "run ./scripts/sync-settings"


def test_readme_tables_are_the_settings_classes_tables():
    text = REFERENCE.read_text()
    assert text == synced_reference(text), "run ./scripts/sync-settings"
    for _, cls, _ in PROJECTS:
        assert markdown_table(cls) in text
    # Markdown would take <preset> for an HTML tag and hide it; inside a code span it is literal.
    row = next(line for line in markdown_table(WorkloadSettings).splitlines() if line.startswith("| `runName`"))
    assert "| `<preset>-<stack>-<digest>` |" in row and "defaults to &lt;preset&gt;-&lt;stack&gt;-&lt;digest&gt;" in row


def test_every_project_setting_has_a_description_and_a_declared_default_where_it_has_one():
    for _, cls, _ in PROJECTS:
        for entry in settings_of(cls):
            assert entry.description.endswith("."), entry.key
            if entry.default is None and entry.required is None:
                assert entry.unset or entry.kind == "string", f"{entry.key}: say what unset means"


@pytest.mark.parametrize("stack", ["dev", "local"])
def test_shipped_workloads_stack_files_read_cleanly(stack):
    from tests.support.shared import PROJECT_ROOT

    config = stack_config(stack, PROJECT_ROOT / "workloads")
    raw = {key.split(":", 1)[1]: value for key, value in config.items()}
    assert workload_settings(raw, stack=stack).stack == stack


def test_a_new_setting_is_one_declaration():
    """A made-up setting added to the infra class is read, typed, range-checked, documented in
    Pulumi.yaml's block and the reference table, and known to the misspelling check: nothing else
    was written for it."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithWarmup(StackSettings):
        warmup_minutes: int = setting(
            "integer", "Minutes of warm-up.", default=5, minimum=0, in_clear="it is exported as the warmup output"
        )

    assert pulumi_yaml_config(WithWarmup)["warmupMinutes"] == {"description": "Minutes of warm-up.", "default": 5}
    assert "| `warmupMinutes` | integer | `5` | no | Minutes of warm-up. |" in markdown_table(WithWarmup)
    good = read(WithWarmup, {**GCP, "warmupMinutes": "7"}, project_name=INFRA_PROJECT)
    assert good.problems == [] and good.values["warmup_minutes"] == 7
    bad = read(WithWarmup, {**GCP, "warmupMinutes": "-1"}, project_name=INFRA_PROJECT, secret_keys={"warmupMinutes"})
    assert bad.problems == [
        "warmupMinutes is set as a secret, but it is exported as the warmup output, so it would appear in clear "
        "there; set it without --secret (`pulumi config set warmupMinutes VALUE`), or keep the value out of this stack",
        f"warmupMinutes = {SECRET} is out of range; use 0 or more",
    ]
    # The real class does not know it: a stack that sets it is told so.
    with pytest.raises(SettingsError, match="maxtext-tpu-infra:warmupMinutes is not a setting of this project"):
        parse_settings({**GCP, "warmupMinutes": "7"}, stack="dev", project_name=INFRA_PROJECT)


# ---------------------------------------------------------------- the engine's config, read once


def _read_through_the_engine(config: dict[str, Any], secret_keys: frozenset[str] = frozenset()):
    seen: dict[str, Any] = {}

    def program():
        seen["raw"], seen["secrets"] = raw_config(StackSettings)
        return {}

    run_program(program, config, secret_keys=secret_keys)
    return seen["raw"], seen["secrets"]


def test_every_key_of_the_projects_namespace_and_the_providers_declared_keys_are_read():
    """Through `pulumi.runtime.set_all_config`, as the CLI's language host, the automation API
    and the mocks set config. If the SDK stops keeping the keys where stack_config looks, this
    fails: a misspelt key would otherwise be ignored without a word."""
    raw, secrets = _read_through_the_engine(
        {**stack_config("dev"), f"{INFRA_PROJECT}:slicse": "4", "gcp:credentials": "{}"},
        secret_keys=frozenset({"gcp:zone"}),
    )
    assert raw["slicse"] == "4"
    assert raw["gcp:project"] == "my-gcp-project" and raw["gcp:zone"] == "us-east5-b"
    assert "gcp:credentials" not in raw and "credentials" not in raw  # a provider key it does not declare
    assert secrets == {"gcp:zone"}


def test_keys_passed_in_pulumi_config_alone_are_read_too(monkeypatch):
    """The language host also passes the stack's config in PULUMI_CONFIG (the public
    `pulumi.runtime.get_config_env`): a key there and nowhere else is still seen."""
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({f"{INFRA_PROJECT}:topolgy": "4x4"}))
    assert pulumi.runtime.get_config_env() == {f"{INFRA_PROJECT}:topolgy": "4x4"}
    raw, _ = _read_through_the_engine(stack_config("dev"))
    assert raw["topolgy"] == "4x4"
