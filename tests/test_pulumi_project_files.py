"""Pulumi.yaml and stack files, checked the way the Pulumi CLI checks them, without the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from domain.config import cli_config
from domain.setting import settings_of
from tests.support.shared import PROJECT_ROOT, require_shared
from tools.sync_settings import PROJECTS, project_file

# Namespaces of the providers and the engine: their keys belong to them, not to the project.
FOREIGN_NAMESPACES = {"gcp", "kubernetes", "pulumi"}


def project_files() -> list[Path]:
    return sorted(path for path in PROJECT_ROOT.glob("**/Pulumi.yaml") if ".venv" not in path.parts)


def stack_files(project_file: Path) -> list[Path]:
    return sorted(project_file.parent.glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module")
def project_schema():
    return json.loads(require_shared("schemas/pulumi-project.json").read_text())


def test_both_project_files_exist():
    assert {PROJECT_ROOT / "Pulumi.yaml", PROJECT_ROOT / "workloads" / "Pulumi.yaml"} <= set(project_files())


@pytest.mark.parametrize("project_file", project_files(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_project_file_matches_the_cli_schema(project_file, project_schema):
    jsonschema.validate(yaml.safe_load(project_file.read_text()), project_schema)


def test_schema_rejects_a_broken_project_file(project_schema):
    broken = yaml.safe_load((PROJECT_ROOT / "Pulumi.yaml").read_text())
    broken["runtime"] = {"name": "python", "option": {"virtualenv": ".venv"}}  # `options` misspelt
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, project_schema)
    broken = yaml.safe_load((PROJECT_ROOT / "Pulumi.yaml").read_text())
    broken["config"]["slices"] = {"type": "integer", "defualt": 2}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, project_schema)


@pytest.mark.parametrize(
    "stack_file",
    [stack for project in project_files() for stack in stack_files(project)],
    ids=lambda p: str(p.relative_to(PROJECT_ROOT)),
)
def test_every_stack_file_is_one_the_cli_runs(stack_file):
    """Its keys are its project's settings, and the CLI's merge of the project's defaults
    (domain/config/cli_config.py) neither misses a value nor refuses a type."""
    project = yaml.safe_load((stack_file.parent / "Pulumi.yaml").read_text())
    settings = {entry.key for _, cls, _ in PROJECTS for entry in settings_of(cls)}
    stack = yaml.safe_load(stack_file.read_text())
    for key in stack.get("config") or {}:
        namespace, _, name = key.partition(":")
        if namespace in FOREIGN_NAMESPACES:
            continue
        assert namespace == project["name"], f"{stack_file.name}: {key} is not in namespace {project['name']}"
        assert name in settings, f"{stack_file.name}: {key} is not a setting of {project['name']}"
    stack_name = stack_file.name.split(".")[1]
    merged = cli_config.merged(project, stack_name, stack.get("config") or {})
    declared_defaults = [key for key, entry in project["config"].items() if "default" in entry]
    assert {f"{project['name']}:{key}" for key in declared_defaults} <= set(merged)


@pytest.mark.parametrize("directory, cls, name", PROJECTS, ids=[name for _, _, name in PROJECTS])
def test_the_project_file_declares_no_key_the_cli_would_require(directory, cls, name):
    """A project key declared without a default is one the CLI requires of every stack
    ("Stack 'dev' is missing configuration value ..."): only required settings may be declared so."""
    project = yaml.safe_load(project_file(directory).read_text())
    assert cli_config.project_problems(project, project["name"]) == []
    with pytest.raises(cli_config.CliConfigError) as refused:
        cli_config.merged({**project, "config": {**project["config"], "bucketName": {"type": "string"}}}, "dev", {})
    assert refused.value.problems == ["Stack 'dev' is missing configuration value 'bucketName'"]
    by_name = {entry.name: entry for entry in settings_of(cls) if entry.namespace is None}
    for key, declaration in project["config"].items():
        if ":" in key:
            continue
        assert "default" in declaration or by_name[key].required is not None, key


def test_kubernetes_default_provider_is_disabled():
    config = yaml.safe_load((PROJECT_ROOT / "Pulumi.yaml").read_text())["config"]
    assert "kubernetes" in config["pulumi:disable-default-providers"]["value"]
