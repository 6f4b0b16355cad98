"""The config a program gets from the Pulumi CLI, made the way the CLI makes it.

Before every preview and update the CLI checks the project file's `config:` block, merges it into
the stack's config and checks the result (`Project.Validate` and `ValidateConfigValue` in
pulumi/pulumi's sdk/go/common/workspace/project.go, `mergeConfig` in config.go there):

- a key of the project's namespace that the stack lacks gets the block's `default:` (or
  `value:`): the program cannot tell a default from a value the user set;
- a key of the project's namespace declared with neither is a missing value: the CLI stops
  before the program starts, so every optional setting without a default stays undeclared;
- a typed key's value must be of its type: an integer's text must parse, a boolean's must be
  `true` or `false`, a list or map must be one in the stack file (`pulumi config set KEY TEXT`
  always stores text, which a key declared as a list refuses).

Tests, the offline policy check and the smoke run hand a program its config through `merged`,
so what they run is what the CLI would run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from domain.problems import ProblemsError
from domain.setting import settings_of

_GO_INTEGER = re.compile(r"[+-]?[0-9]+")


class CliConfigError(ProblemsError):
    """What the Pulumi CLI refuses before the program starts."""

    heading = "the Pulumi CLI stops before the program runs"


@dataclass(frozen=True)
class ConfigValue:
    """One config value as the CLI stores it: its text (JSON for a list or map), and whether the
    stack file holds it as a list or map (the CLI's object value)."""

    text: str
    structured: bool = False

    def content(self) -> Any:
        """What the CLI checks against a declared type: a structured value decoded, text as is."""
        return json.loads(self.text) if self.structured else self.text


def stored(value: Any) -> ConfigValue:
    """A stack file's value (as YAML loads it) as the CLI stores it."""
    if isinstance(value, ConfigValue):
        return value
    if isinstance(value, (list, dict)):
        return ConfigValue(json.dumps(value), structured=True)
    if isinstance(value, bool):
        return ConfigValue("true" if value else "false")
    return ConfigValue(str(value))


def _default_value(value: Any) -> ConfigValue:
    """A project default as the CLI merges it (`createConfigValue`): a string, integer or boolean
    as its text, anything else (a float, a list, a map) as JSON."""
    if isinstance(value, bool):
        return ConfigValue("true" if value else "false")
    if isinstance(value, (str, int)):
        return ConfigValue(str(value))
    return ConfigValue(json.dumps(value), structured=True)


def project_document(directory: Path) -> dict[str, Any]:
    return yaml.safe_load((directory / "Pulumi.yaml").read_text())


def _full_key(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _declarations(document: Mapping[str, Any], project: str) -> dict[str, dict[str, Any]]:
    """The `config:` block with its shorthand spelled out (`RewriteShorthandConfigValues`): a bare
    value is a default in the project's namespace and a value in another."""
    block = document.get("config") or {}
    declarations = {}
    for key, declaration in block.items():
        if not isinstance(declaration, dict):
            in_project = ":" not in key or key.startswith(f"{project}:")
            declaration = {"default" if in_project else "value": declaration}
        declarations[key] = declaration
    return declarations


def _type_name(type_name: str, items: Mapping[str, Any] | None) -> str:
    """How the CLI names a declared type (`InferFullTypeName`): array<string>, integer, ..."""
    return type_name if items is None else f"array<{_type_name(items.get('type', ''), items.get('items'))}>"


def matches(type_name: str, items: Mapping[str, Any] | None, value: Any) -> bool:
    """The CLI's check of a value against a declared type (`ValidateConfigValue`)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return True
        if isinstance(value, str):
            # Go's Atoi: an optional sign and ASCII digits, within 64 bits.
            return _GO_INTEGER.fullmatch(value) is not None and -(2**63) <= int(value[:21]) < 2**63
        return False
    if type_name == "boolean":
        return value in ("true", "false") or isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(matches(items.get("type", ""), items.get("items"), item) for item in value)


def project_problems(document: Mapping[str, Any], project: str) -> list[str]:
    """What the CLI refuses in a project file's `config:` block (`Project.Validate`)."""
    problems = []
    for key, declaration in _declarations(document, project).items():
        typed = "type" in declaration
        if "default" in declaration and "value" in declaration:
            problems.append(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        if ":" not in key or key.startswith(f"{project}:"):
            if typed and declaration["type"] == "array" and declaration.get("items") is None:
                problems.append(f"The configuration key '{key}' declares an array but does not specify the items")
            if typed and "default" in declaration:
                if not matches(declaration["type"], declaration.get("items"), declaration["default"]):
                    problems.append(
                        f"The default value specified for configuration key '{key}' is not of the expected type "
                        f"'{_type_name(declaration['type'], declaration.get('items'))}'"
                    )
        elif typed or "default" in declaration or "value" not in declaration:
            problems.append(f"Configuration key '{key}' is not namespaced by the project and must give only a 'value'")
    return problems


def merged(
    document: Mapping[str, Any], stack: str, stack_config: Mapping[str, Any], *, project: str | None = None
) -> dict[str, ConfigValue]:
    """The config the CLI hands the program of `document`'s project (named `project` when given)
    for a stack whose file holds `stack_config` (keys qualified, values as YAML loads them, or
    ConfigValues). Raises CliConfigError with what the CLI would refuse instead."""
    name = project or document["name"]
    problems = project_problems(document, name)
    if problems:  # the CLI does not load such a project
        raise CliConfigError(problems)
    config = {key: stored(value) for key, value in stack_config.items()}
    declarations = _declarations(document, name)
    missing = []
    for key in sorted(declarations):
        declaration, full = declarations[key], _full_key(name, key)
        if full in config:
            continue
        if "default" in declaration or "value" in declaration:
            config[full] = _default_value(declaration.get("default", declaration.get("value")))
        elif full.split(":", 1)[0] == name:
            missing.append(key)
    problems += [f"Stack '{stack}' is missing configuration value '{key}'" for key in missing]
    for key in sorted(declarations):
        declaration, full = declarations[key], _full_key(name, key)
        if "type" in declaration and full in config:
            if not matches(declaration["type"], declaration.get("items"), config[full].content()):
                problems.append(
                    f"Stack '{stack}' with configuration key '{key}' must be of type '{_type_name(declaration['type'], declaration.get('items'))}'"
                )
    if problems:
        raise CliConfigError(problems)
    return config


def engine_text(config: Mapping[str, ConfigValue]) -> dict[str, str]:
    """The config as the language host passes it to the program: every value as text."""
    return {key: value.text for key, value in config.items()}


def settings_raw(directory: Path, stack: str, stack_config: Mapping[str, Any], cls: type) -> dict[str, str]:
    """What a program reading `cls`'s settings gets under the CLI for a stack file holding
    `stack_config` (project keys bare or qualified, a provider's as `namespace:key`; None for
    unset), keyed as stack_config/__init__.py's raw_config keys it: the project's keys bare and
    the provider keys `cls` declares."""
    document = project_document(directory)
    project = document["name"]
    stack_file = {_full_key(project, key): value for key, value in stack_config.items() if value is not None}
    config = engine_text(merged(document, stack, stack_file))
    provider_keys = {entry.key for entry in settings_of(cls) if entry.namespace is not None}
    return {
        key.removeprefix(f"{project}:"): value
        for key, value in config.items()
        if key.startswith(f"{project}:") or key in provider_keys
    }
