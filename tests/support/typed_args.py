"""Converts nested keyword dicts into the SDK's typed `*Args` classes.

pulumi-gcp accepts plain dicts for nested inputs and, under mocks or in the engine, drops a
misspelt key without a word. The typed classes take keyword-only arguments, so building them
from our dicts turns any misspelling into a TypeError in a test.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any


def _nested_args_class(annotation: Any, home_module: str) -> tuple[type | None, bool]:
    """The `*Args` class an annotation names (if any) and whether it is a list of them."""
    text = str(annotation)
    match = re.search(r"ForwardRef\('(\w+Args)'\)|'(\w+Args)'|\.(\w+Args)\b", text)
    if match is None:
        return None, False
    name = next(group for group in match.groups() if group)
    module = sys.modules[home_module]
    cls = getattr(module, name, None)
    if cls is None:
        inputs = sys.modules[home_module.rsplit(".", 1)[0] + "._inputs"]
        cls = getattr(inputs, name)
    return cls, "Sequence[" in text


def to_typed_args(args_class: type, values: dict[str, Any]) -> Any:
    """Builds `args_class(**values)`, recursing into nested `*Args`; raises on unknown keys."""
    parameters = inspect.signature(args_class.__init__).parameters
    converted: dict[str, Any] = {}
    for key, value in values.items():
        if key not in parameters:
            raise TypeError(f"{args_class.__name__} has no input {key!r}")
        nested, is_list = _nested_args_class(parameters[key].annotation, args_class.__module__)
        if nested is not None and is_list and isinstance(value, list):
            value = [to_typed_args(nested, item) if isinstance(item, dict) else item for item in value]
        elif nested is not None and isinstance(value, dict):
            value = to_typed_args(nested, value)
        converted[key] = value
    return args_class(**converted)
