"""Reads the stack's config once, from the engine, into validated StackSettings."""

from __future__ import annotations

import pulumi

from domain.config.settings import parse_settings
from domain.stack_settings import StackSettings
from stack_config import raw_config


def read_settings() -> StackSettings:
    raw, secrets = raw_config(StackSettings)
    return parse_settings(raw, stack=pulumi.get_stack(), project_name=pulumi.get_project(), secret_keys=secrets)
