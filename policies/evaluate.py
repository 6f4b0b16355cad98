"""Runs the pack's policies on a list of resources without the Pulumi engine.

The analyzer the CLI starts (`pulumi_policy`'s `_PolicyAnalyzerServicer`) receives each
resource's properties as a protobuf Struct, deserializes them, wraps them in the SDK's
unknown-checking proxy and calls every policy that is not disabled: resource policies once per
resource (`Analyze`), stack policies once with every resource linked to its parent and
dependencies (`AnalyzeStack`). This module builds the same `ResourceValidationArgs` and
`StackValidationArgs` the same way (properties go through a Struct too, so numbers arrive as
floats exactly as under the engine), and applies the policy config the way the CLI reconciles it
before `Configure`: schema defaults, then `all`, then each policy's own entry.

    evaluate(resources, {"tpu-chip-cap": {"chipCap": 16}, "tpu-hourly-budget": "disabled"})

A resource is a dict with `type`, `name`, `urn` and `props` (camelCase, as the engine sees them),
and optionally `parent` and `provider` (URN references), `dependencies` (URNs) and
`propertyDependencies` (property name -> URNs), which stack policies use to tell which
resource another one refers to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from inspect import isawaitable
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _NotApplicableError  # what `args.not_applicable()` raises
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from domain.stack_identity import integral
from policies.rules import ALL

# PolicyPack's level for a policy that sets none (every policy here sets its own).
PACK_DEFAULT_LEVEL = EnforcementLevel.ADVISORY
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


@dataclass(frozen=True)
class Violation:
    policy_name: str
    enforcement_level: str  # "mandatory" or "advisory", as the engine reports it
    message: str  # the rule's own sentence (the engine prints the description above it)
    urn: str | None  # None: the stack as a whole


def evaluate(
    resources: list[dict],
    config: dict | None = None,
    policies: Sequence[Policy] = ALL,
) -> list[Violation]:
    """Every violation `policies` report on `resources` under `config` (the JSON of
    `pulumi preview --policy-pack-config`: per policy an enforcement level, or an object with
    `enforcementLevel` and the policy's config properties; `all` sets every level).

    Raises ValueError for config naming an unknown policy, level or property, or a property of
    the wrong type, where the CLI would refuse it (or, for an unknown policy, silently ignore it).
    """
    settings = reconcile_config(policies, config)
    wire = [_through_struct(resource.get("props") or {}) for resource in resources]
    by_urn = {resource["urn"]: (resource, props) for resource, props in zip(resources, wire, strict=True)}
    violations: list[Violation] = []
    for policy in policies:
        level, properties = settings[policy.name]
        if level is EnforcementLevel.DISABLED:
            continue
        # The analyzer reports a remediating policy's remaining violations as mandatory.
        reported = EnforcementLevel.MANDATORY if level is EnforcementLevel.REMEDIATE else level
        if isinstance(policy, ResourceValidationPolicy) and policy.has_validation():
            for resource, props in zip(resources, wire, strict=True):
                resource_args = ResourceValidationArgs(*_described(resource, props, by_urn), dict(properties))
                _run(policy.name, partial(policy.validate, resource_args), reported, resource["urn"], violations)
        elif isinstance(policy, StackValidationPolicy):
            stack_args = StackValidationArgs(_stack(resources, wire, by_urn), dict(properties))
            _run(policy.name, partial(policy.validate, stack_args), reported, None, violations)
    return violations


def reconcile_config(
    policies: Sequence[Policy], config: Mapping[str, Any] | None
) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """Each policy's enforcement level and config properties, as the CLI computes them."""
    result = {
        policy.name: (
            policy.enforcement_level or PACK_DEFAULT_LEVEL,
            {
                key: spec["default"]
                for key, spec in (policy.config_schema.properties if policy.config_schema else {}).items()
                if "default" in spec
            },
        )
        for policy in policies
    }
    given = dict(config or {})
    unknown = sorted(set(given) - set(result) - {"all"})
    if unknown:
        raise ValueError(f"policy config names unknown policies {unknown}; the pack has: {sorted(result)}")
    if "all" in given:
        every, _ = _entry("all", given.pop("all"), None)
        if every is not None:
            result = {name: (every, props) for name, (_, props) in result.items()}
    for policy in policies:
        if policy.name in given:
            level, props = _entry(policy.name, given[policy.name], policy)
            current_level, current_props = result[policy.name]
            result[policy.name] = (level or current_level, {**current_props, **props})
    return result


def _entry(name: str, value: Any, policy: Policy | None) -> tuple[EnforcementLevel | None, dict[str, Any]]:
    """(level, properties) of one config entry: a level string, or an object."""
    if isinstance(value, (str, EnforcementLevel)):
        value = {"enforcementLevel": value}
    if not isinstance(value, dict):
        raise ValueError(f"policy config for {name!r} must be an enforcement level or an object, not {value!r}")
    level = value.get("enforcementLevel")
    if level is not None and not isinstance(level, EnforcementLevel):
        try:
            level = EnforcementLevel(level)
        except ValueError:
            valid = ", ".join(member.value for member in EnforcementLevel)
            raise ValueError(f"policy config for {name!r}: enforcementLevel {level!r} is not one of {valid}") from None
    props = {key: item for key, item in value.items() if key != "enforcementLevel"}
    schema = policy.config_schema.properties if policy and policy.config_schema else {}
    for key, item in props.items():
        if key not in schema:
            raise ValueError(f"policy {name!r} has no config property {key!r}; it has: {sorted(schema) or 'none'}")
        wanted = schema[key].get("type")
        ok = wanted not in _JSON_TYPES or (
            isinstance(item, _JSON_TYPES[wanted])
            and (wanted == "boolean" or not isinstance(item, bool))
            and (wanted != "integer" or isinstance(integral(item), int))
        )
        if not ok:
            raise ValueError(f"policy {name!r}: config property {key} = {item!r} is not of type {wanted}")
    return level, props


def _through_struct(props: Mapping[str, Any]) -> dict[str, Any]:
    """Props as the analyzer receives them: a protobuf Struct turned back into JSON values."""
    struct = struct_pb2.Struct()
    struct.update(props)
    return json_format.MessageToDict(struct)


def _proxied(wire: dict[str, Any]) -> Any:
    """Fresh for every call, as the analyzer builds them: no policy sees another's changes."""
    return unknown_checking_proxy(deserialize_properties(wire))


def _options(resource: Mapping[str, Any]) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=resource.get("parent") or None,
    )


def _provider(resource: Mapping[str, Any], by_urn: Mapping[str, Any]) -> PolicyProviderResource | None:
    """The resource's explicit provider (a `URN::ID` reference), with its props if listed."""
    parts = (resource.get("provider") or "").split("::")
    if len(parts) < 4:
        return None
    # urn:pulumi:STACK::PROJECT::PARENT-TYPES$TYPE::NAME, then ::ID in a reference.
    urn = "::".join(parts[:4])
    props = by_urn[urn][1] if urn in by_urn else {}
    return PolicyProviderResource(parts[2].rsplit("$", 1)[-1], _proxied(props), urn, parts[3])


def _described(
    resource: Mapping[str, Any], props: dict[str, Any], by_urn: Mapping[str, Any]
) -> tuple[str, Any, str, str, PolicyResourceOptions, PolicyProviderResource | None]:
    """What the analyzer tells a policy of one resource, in the order both argument kinds take it:
    type, properties, URN, name, options, provider."""
    return (
        resource["type"],
        _proxied(props),
        resource["urn"],
        resource["name"],
        _options(resource),
        _provider(resource, by_urn),
    )


def _stack(
    resources: Sequence[Mapping[str, Any]], wire: Sequence[dict[str, Any]], by_urn: Mapping[str, Any]
) -> list[PolicyResource]:
    """The stack's resources linked to their parents and dependencies, as AnalyzeStack does."""
    built = {
        resource["urn"]: PolicyResource(*_described(resource, props, by_urn), None, [], {})
        for resource, props in zip(resources, wire, strict=True)
    }
    for resource in resources:
        policy_resource = built[resource["urn"]]
        policy_resource.parent = built.get(resource.get("parent") or "")
        policy_resource.dependencies = [built[u] for u in resource.get("dependencies") or [] if u in built]
        policy_resource.property_dependencies = {
            prop: [built[u] for u in urns if u in built]
            for prop, urns in (resource.get("propertyDependencies") or {}).items()
        }
    return list(built.values())


def _run(
    name: str,
    validate: Callable[[ReportViolation], object],
    level: EnforcementLevel,
    default_urn: str | None,
    violations: list[Violation],
) -> None:
    """Runs one policy's `validate` (its args bound), collecting what it reports as `name`."""

    def report_violation(message: str, urn: str | None = None) -> None:
        violations.append(Violation(name, level.value, message, urn or default_urn))

    try:
        result = validate(report_violation)
        if isawaitable(result):
            asyncio.run(_awaited(result))
    except UnknownValueError as error:
        # The analyzer turns an unknown value a policy tripped over into an advisory note.
        violations.append(
            Violation(
                name,
                EnforcementLevel.ADVISORY.value,
                f"can't run policy '{name}' during preview: {error.message}",
                default_urn,
            )
        )
    except _NotApplicableError:
        pass


async def _awaited(result: Any) -> None:
    await result
