"""The one place both programs read the engine's config: whose stack it is (organization,
project and name), the raw values of a settings class's keys, every other key of the project's
namespace (so a misspelt key is reported, not ignored), and which of them were set with `pulumi
config set --secret`.

The SDK has no public call that lists the keys a stack sets. Under the CLI the language host
passes the stack's config in PULUMI_CONFIG, which the public `pulumi.runtime.get_config_env`
reads; the automation API and the SDK's mocks set it with `pulumi.runtime.set_all_config`, which
only `pulumi.runtime.config.CONFIG` holds. tests/test_settings_table.py fails loudly if either
stops carrying the keys.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from domain.setting import settings_of
from domain.stack_identity import StackIdentity


def stack_identity() -> StackIdentity:
    """The running program's organization, project and stack, as the engine names them."""
    return StackIdentity(organization=pulumi.get_organization(), project=pulumi.get_project(), stack=pulumi.get_stack())


def _engine_keys() -> set[str]:
    return set(runtime_config.CONFIG.get()) | set(pulumi.runtime.get_config_env())


def raw_config(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """`cls`'s settings as the engine has them (text), keyed as `domain.config.raw_config.read`
    takes them, plus the project's keys `cls` does not declare; and the keys set as secrets."""
    prefix = f"{pulumi.get_project()}:"
    config = pulumi.Config()
    names = {key[len(prefix) :] for key in _engine_keys() if key.startswith(prefix)}
    raw: dict[str, Any] = {name: config.get(name) for name in names}
    secrets = {name for name in names if pulumi.runtime.is_config_secret(prefix + name)}
    for entry in settings_of(cls):
        if entry.namespace is not None:
            raw[entry.key] = pulumi.Config(entry.namespace).get(entry.name)
            if pulumi.runtime.is_config_secret(entry.key):
                secrets.add(entry.key)
    return raw, frozenset(secrets)
