"""Each rule is declared once, on its validator (policies/rules/declare.py): its name, level,
description and config keys. The pack, its config schema, the offline check and docs/policies.md
derive from that declaration; a config key is read through the object that declares it."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies.evaluate import evaluate
from policies.rules import ALL, rayjob, stack
from policies.rules.declare import ConfigKey, ResourceRule, Rules, StackRule

MODULES = [
    "networks",
    "tpu_pools",
    "cluster",
    "storage",
    "raycluster",
    "ray_head",
    "raycluster_pools",
    "rayjob",
    "stack",
]


def test_the_pack_is_every_modules_rules_in_the_order_they_are_written():
    declared = [rule for name in MODULES for rule in importlib.import_module(f"policies.rules.{name}").RULES.policies]
    assert ALL == declared
    assert len({rule.name for rule in ALL}) == len(ALL)


@pytest.mark.parametrize("rule", ALL, ids=lambda rule: rule.name)
def test_each_rule_is_an_sdk_policy_with_an_explicit_level_and_is_its_own_validator(rule):
    """The SDK's public policy classes, so the engine's analyzer and `policies.evaluate` run them
    as any policy; the module names the rule by its validator's name."""
    assert isinstance(rule, ResourceRule | StackRule)
    assert isinstance(rule, ResourceValidationPolicy | StackValidationPolicy)
    assert rule.enforcement_level in (EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY)
    assert callable(rule) and rule.description


def test_a_declared_rule_is_collected_in_order_and_validates_when_called():
    rules = Rules()
    limit = ConfigKey[float]("limit", "number", minimum=0, default=2, description="The most.")

    @rules.resource("toy-resource", EnforcementLevel.MANDATORY, f"At most {limit}.", config=[limit])
    def toy_resource(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.props["count"] > limit.value(args):
            report_violation(f"{toy_resource.name}: over {limit}", args.urn)

    @rules.stack("toy-stack", EnforcementLevel.ADVISORY, "Nothing.")
    def toy_stack(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        report_violation("the stack", None)

    assert rules.policies == [toy_resource, toy_stack]
    assert (toy_resource.name, toy_resource.enforcement_level, toy_resource.description) == (
        "toy-resource",
        EnforcementLevel.MANDATORY,
        "At most limit.",
    )
    assert isinstance(toy_resource.config_schema, PolicyConfigSchema)
    assert toy_resource.config_schema.properties == {
        "limit": {"type": "number", "minimum": 0, "default": 2, "description": "The most."}
    }
    assert toy_stack.config_schema is None
    seen: list[str] = []
    unset = SimpleNamespace(props={"count": 3}, urn="urn:toy", get_config=lambda: {})
    toy_resource(unset, lambda message, urn=None: seen.append(message))
    configured = SimpleNamespace(props={"count": 3}, urn="urn:toy", get_config=lambda: {"limit": 5})
    toy_resource(configured, lambda message, urn=None: seen.append(message))
    assert seen == ["toy-resource: over limit"]


def test_a_config_key_is_its_rules_schema_and_the_value_the_rule_reads():
    """One declaration: the pack's schema for the key, its default when unset, the configured
    value when set (tpu-chip-cap over the shipped dev stack's 16 chips)."""
    assert stack.chip_cap.config_schema is not None
    assert stack.chip_cap.config_schema.properties == {str(stack.CHIP_CAP): stack.CHIP_CAP.schema}
    assert stack.CHIP_CAP.schema == {
        "type": "integer",
        "minimum": 0,
        "default": 64,
        "description": "The most TPU chips one stack may provision.",
    }
    assert rayjob.predicted_mfu.config_schema is not None
    assert list(rayjob.predicted_mfu.config_schema.properties) == ["minShareOfPresetMfu"]
    assert stack.ALLOWED_REGIONS.schema["items"] == {"type": "string"}
    args = SimpleNamespace(get_config=lambda: {})
    assert stack.CHIP_CAP.value(args) == 64
    args = SimpleNamespace(get_config=lambda: {"chipCap": 8.0})
    assert stack.CHIP_CAP.value(args) == 8.0


def test_a_message_names_the_key_and_the_rule_as_declared():
    """tpu-chip-cap's message quotes the config that would raise the cap, built from the key and
    the rule, so renaming either renames it."""
    resources = [
        {
            "type": "gcp:container/nodePool:NodePool",
            "name": "tpu-0",
            "urn": "urn:pulumi:dev::p::gcp:container/nodePool:NodePool::tpu-0",
            "props": {
                "nodeConfig": {"machineType": "ct6e-standard-4t"},
                "placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4"},
                "nodeCount": 4,
                "location": "us-east5-b",
            },
        }
    ]
    violations = [v for v in evaluate(resources, {"tpu-chip-cap": {"chipCap": 8}}) if v.policy_name == "tpu-chip-cap"]
    assert len(violations) == 1
    assert violations[0].message.endswith('in the policy config: {"tpu-chip-cap": {"chipCap": 16}}.')
