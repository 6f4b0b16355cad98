"""How a rule is declared: on its validator function, with its name, enforcement level and
description, and the config keys it reads.

    RULES = Rules()

    @RULES.resource("tpu-pool-gvnic", EnforcementLevel.MANDATORY, "TPU node pools enable gVNIC.")
    def gvnic(args: ResourceValidationArgs, report_violation: ReportViolation) -> None: ...

The decorated name is the pack's policy (an SDK `ResourceValidationPolicy` or
`StackValidationPolicy`), still callable as its validator; `RULES.policies` holds a module's
policies in the order they are written, which is the pack's order and docs/policies.md's.

A config key is declared once, as a `ConfigKey`: the rule's config schema is built from it, a
validator reads its value through it, and a description or message names it by formatting it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

ResourceCheck = Callable[[ResourceValidationArgs, ReportViolation], None]
StackCheck = Callable[[StackValidationArgs, ReportViolation], None]


@dataclass(frozen=True)
class ConfigKey[T]:
    """One property of a rule's policy config, as `pulumi preview --policy-pack-config` sets it.
    `str(key)` is its name, so text that names the key formats it."""

    name: str
    type: str  # the JSON schema type the CLI checks the value against
    default: T
    description: str
    items: Mapping[str, Any] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def __str__(self) -> str:
        return self.name

    @property
    def schema(self) -> dict[str, Any]:
        """The property's JSON schema, as the engine receives it in the pack's config schema."""
        fields = {
            "type": self.type,
            "items": self.items,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "default": self.default,
            "description": self.description,
        }
        return {key: value for key, value in fields.items() if value is not None}

    def value(self, args: ResourceValidationArgs | StackValidationArgs) -> T:
        """The configured value, or the default when the engine sent none (the CLI fills defaults
        in, but an analyzer configured by hand may not). The CLI has checked it against `schema`;
        JSON numbers arrive as floats, so an integer key is typed `float`."""
        config = args.get_config()
        value = config.get(self.name) if config else None
        return self.default if value is None else value


def _config_schema(keys: Sequence[ConfigKey[Any]]) -> PolicyConfigSchema | None:
    return PolicyConfigSchema(properties={key.name: key.schema for key in keys}) if keys else None


class ResourceRule(ResourceValidationPolicy):
    """A resource policy that is its validator: calling it validates, as the engine would."""

    def __call__(self, args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        self.validate(args, report_violation)


class StackRule(StackValidationPolicy):
    """A stack policy that is its validator: calling it validates, as the engine would."""

    def __call__(self, args: StackValidationArgs, report_violation: ReportViolation) -> None:
        self.validate(args, report_violation)


class Rules:
    """The policies one module declares, in the order it declares them."""

    def __init__(self) -> None:
        self.policies: list[Policy] = []

    def resource(
        self, name: str, level: EnforcementLevel, description: str, config: Sequence[ConfigKey[Any]] = ()
    ) -> Callable[[ResourceCheck], ResourceRule]:
        """Declares the decorated function a resource policy: run once per resource."""

        def declare(check: ResourceCheck) -> ResourceRule:
            rule = ResourceRule(
                name=name,
                description=description,
                validate=check,
                enforcement_level=level,
                config_schema=_config_schema(config),
            )
            self.policies.append(rule)
            return rule

        return declare

    def stack(
        self, name: str, level: EnforcementLevel, description: str, config: Sequence[ConfigKey[Any]] = ()
    ) -> Callable[[StackCheck], StackRule]:
        """Declares the decorated function a stack policy: run once with every resource."""

        def declare(check: StackCheck) -> StackRule:
            rule = StackRule(
                name=name,
                description=description,
                validate=check,
                enforcement_level=level,
                config_schema=_config_schema(config),
            )
            self.policies.append(rule)
            return rule

        return declare
