"""Pulumi.yaml and stack files, checked the way the Pulumi CLI checks them, without the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.shared import PROJECT_ROOT, require_shared

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
def test_every_stack_key_is_declared_by_its_project(stack_file):
    project = yaml.safe_load((stack_file.parent / "Pulumi.yaml").read_text())
    declared = set(project.get("config") or {})
    stack = yaml.safe_load(stack_file.read_text())
    for key in stack.get("config") or {}:
        namespace, _, name = key.partition(":")
        if namespace in FOREIGN_NAMESPACES:
            continue
        assert namespace == project["name"], f"{stack_file.name}: {key} is not in namespace {project['name']}"
        assert name in declared, f"{stack_file.name}: {key} is not declared in Pulumi.yaml"


def test_kubernetes_default_provider_is_disabled():
    config = yaml.safe_load((PROJECT_ROOT / "Pulumi.yaml").read_text())["config"]
    assert "kubernetes" in config["pulumi:disable-default-providers"]["value"]
