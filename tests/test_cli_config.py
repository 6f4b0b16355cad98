"""The config the Pulumi CLI hands a program (domain/config/cli_config.py), checked case by case
against what the CLI's own code does (pulumi/pulumi, sdk/go/common/workspace: mergeConfig,
ValidateConfigValue, Project.Validate)."""

from __future__ import annotations

import pytest

from domain.config import cli_config
from domain.config.cli_config import CliConfigError, ConfigValue, merged

PROJECT = {
    "name": "demo",
    "runtime": "python",
    "config": {
        "pulumi:disable-default-providers": {"value": ["kubernetes"]},
        "timeout": {"type": "integer", "default": 300},
        "elastic": {"type": "boolean", "default": False},
        "mode": {"description": "untyped", "default": "standard"},
        "capacity": {"default": ["on-demand"]},
        "ratio": {"default": 0.4},
        "overrides": {"default": {}},
    },
}


def declared(**config):
    return {**PROJECT, "config": {**PROJECT["config"], **config}}


def test_every_default_the_stack_lacks_is_merged_in_as_the_cli_stores_it():
    config = merged(PROJECT, "dev", {"demo:mode": "autopilot"})
    assert cli_config.engine_text(config) == {
        "demo:mode": "autopilot",  # the stack's value wins
        "demo:timeout": "300",
        "demo:elastic": "false",
        "demo:capacity": '["on-demand"]',
        "demo:ratio": "0.4",  # a float is merged as JSON, which reads the same
        "demo:overrides": "{}",
        "pulumi:disable-default-providers": '["kubernetes"]',
    }
    assert config["demo:capacity"].structured and not config["demo:timeout"].structured


def test_a_stack_file_value_is_stored_as_text_and_a_list_or_map_as_json():
    config = merged(PROJECT, "dev", {"demo:timeout": 600, "demo:elastic": True, "demo:capacity": ["spot", "on-demand"]})
    assert config["demo:timeout"] == ConfigValue("600")
    assert config["demo:elastic"] == ConfigValue("true")
    assert config["demo:capacity"] == ConfigValue('["spot", "on-demand"]', structured=True)


def test_a_project_key_declared_without_a_default_is_required_of_every_stack():
    project = declared(slices={"type": "integer"}, topology={"description": "no default"})
    with pytest.raises(CliConfigError) as refused:
        merged(project, "dev", {})
    assert refused.value.problems == [
        "Stack 'dev' is missing configuration value 'slices'",
        "Stack 'dev' is missing configuration value 'topology'",
    ]
    assert merged(project, "dev", {"demo:slices": "2", "demo:topology": "4x4"})["demo:slices"].text == "2"


@pytest.mark.parametrize(
    "type_name, text, accepted",
    [
        ("integer", "2", True),
        ("integer", "-2", True),
        ("integer", "two", False),
        ("integer", "1.5", False),
        ("integer", " 2", False),
        ("integer", "1_000", False),
        ("integer", "9" * 30, False),  # beyond 64 bits: Atoi fails
        ("boolean", "true", True),
        ("boolean", "True", False),
        ("boolean", "yes", False),
        ("string", "anything", True),
    ],
)
def test_a_typed_key_takes_only_text_of_its_type(type_name, text, accepted):
    project = declared(value={"type": type_name})
    config = {"demo:value": text}
    if accepted:
        assert merged(project, "dev", config)["demo:value"].text == text
    else:
        with pytest.raises(CliConfigError) as refused:
            merged(project, "dev", config)
        assert refused.value.problems == [f"Stack 'dev' with configuration key 'value' must be of type '{type_name}'"]


def test_a_key_typed_as_a_list_refuses_text_which_is_all_pulumi_config_set_stores():
    project = declared(zones={"type": "array", "items": {"type": "string"}, "default": ["a"]})
    assert merged(project, "dev", {"demo:zones": ["b", "c"]})["demo:zones"].structured
    with pytest.raises(CliConfigError, match="configuration key 'zones' must be of type 'array<string>'"):
        merged(project, "dev", {"demo:zones": "b"})
    # Untyped, as this product declares its lists: both reach the program, which reads both.
    assert merged(PROJECT, "dev", {"demo:capacity": "spot"})["demo:capacity"].text == "spot"


def test_the_project_file_itself_is_checked_first():
    with pytest.raises(CliConfigError) as refused:
        merged(
            declared(
                timeout={"type": "integer", "default": "soon"},
                both={"default": 1, "value": 2},
                zones={"type": "array"},
                **{"gcp:zone": {"type": "string", "value": "us-east5-b"}},
            ),
            "dev",
            {"demo:zones": ["a"]},
        )
    assert refused.value.problems == [
        "The default value specified for configuration key 'timeout' is not of the expected type 'integer'",
        "project config 'both' cannot have both a 'default' and 'value' attribute",
        "The configuration key 'zones' declares an array but does not specify the items",
        "Configuration key 'gcp:zone' is not namespaced by the project and must give only a 'value'",
    ]


def test_shorthand_is_a_default_in_the_project_and_a_value_elsewhere():
    project = {"name": "demo", "config": {"size": "small", "gcp:region": "us-east5"}}
    assert cli_config.engine_text(merged(project, "dev", {})) == {"demo:size": "small", "gcp:region": "us-east5"}
    assert cli_config.engine_text(merged(project, "dev", {"gcp:region": "europe-west4"}))["gcp:region"] == (
        "europe-west4"
    )
