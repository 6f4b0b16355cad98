"""Raw engine config (text, as the engine passes every setting) read against a settings class's
declarations (domain/setting.py): `read` turns it into typed values and the problems of each value
on its own (unknown keys, types, choices, ranges, names, secrets), as a `Reading` to which the
project's checks of several settings add (domain/config/settings.py, workload_settings.py).
"""

from __future__ import annotations

import json
import math
import sys
import unicodedata
from collections.abc import Mapping, Set
from typing import Any

from domain.setting import Kind, Reading, Setting, as_boolean, as_integer, as_number, settings_of, value_problem


def read[T](
    cls: type[T], raw: Mapping[str, Any], *, project_name: str, secret_keys: Set[str] = frozenset()
) -> Reading[T]:
    """Reads `raw` (project keys bare, a provider's as `namespace:key`) against `cls`'s settings."""
    table = settings_of(cls)
    reading: Reading[T] = Reading(
        cls=cls,
        values={},
        problems=[],
        secrets=frozenset(secret_keys),
        raw=raw,
        kinds={entry.key: entry.kind for entry in table},
        keys={entry.field: entry.key for entry in table},
        defaults={entry.field: entry.default for entry in table},
    )
    problems = reading.problems
    project_keys = [entry.key for entry in table if entry.namespace is None]
    for key in sorted(set(raw) - {entry.key for entry in table}):
        problems.append(
            f"{project_name}:{key} is not a setting of this project; valid settings: {', '.join(project_keys)}"
        )
    for entry in table:
        if entry.in_clear and entry.key in secret_keys and raw.get(entry.key) not in (None, ""):
            problems.append(
                f"{entry.key} is set as a secret, but {entry.in_clear}, so it would appear in clear there; set it "
                f"without --secret (`pulumi config set {entry.key} VALUE`), or keep the value out of this stack"
            )
    for entry in table:
        value = raw.get(entry.key)
        if value is None:
            if entry.required is not None:
                problems.append(f"{entry.key} is not set; run `pulumi config set {entry.key} {entry.required}`")
                reading.refused.add(entry.field)
            reading.values[entry.field] = entry.default
            continue
        # A list or map arrives as JSON text: read, and show, what it says, not how it was sent.
        problem = None
        if entry.kind in ("array", "object"):
            value, problem = _decoded(value, entry.kind)
        typed, problem = (None, problem) if problem else _typed(entry, value)
        if problem is None and typed is not None:
            problem = value_problem(entry, typed)
        if problem is not None:
            problems.append(f"{entry.key} = {reading.shown(entry.key, value)} {problem}")
            reading.refused.add(entry.field)
            typed = None
        reading.values[entry.field] = typed
    return reading


# Python refuses to turn text of more digits than this into an int (a guard against slow
# conversions); a setting that long is out of range, said as such rather than with Python's error.
MAX_DIGITS = sys.get_int_max_str_digits() or 4300


def control_characters(text: str) -> list[str]:
    """The control characters in `text` (a line break, a tab, ...), as messages show them."""
    return sorted({repr(character)[1:-1] for character in text if unicodedata.category(character) == "Cc"})


def _typed(entry: Setting, value: Any) -> tuple[Any, str | None]:
    """The value as its kind, or why it is not one."""
    if entry.kind == "string":
        text = str(value)
        # `printf 'name\n' | pulumi config set KEY` stores the line break: no setting (a name, a
        # version, a path, a URL) has one, and a check written with `$` would not see it.
        hidden = control_characters(text)
        if hidden:
            return None, (
                f"has control characters ({', '.join(hidden)}), which no value of this setting has; set the "
                f"value again without them (`pulumi config set {entry.key} VALUE`, not piped from a command that "
                "ends it with a line break)"
            )
        return text, None
    if entry.kind == "boolean":
        flag = as_boolean(value)
        return (flag, None) if flag is not None else (None, "is not a boolean; use true or false")
    if entry.kind == "integer":
        if isinstance(value, str) and sum(character.isdigit() for character in value) > MAX_DIGITS:
            return None, f"is out of range; {entry.rule}"
        number = as_integer(value)
        return (number, None) if number is not None else (None, f"is not a whole number; {entry.rule}")
    if entry.kind == "number":
        real = as_number(value)
        if real is None and _is_overflow(value):
            return None, f"is out of range; {entry.rule}"
        return (real, None) if real is not None else (None, f"is not a number; {entry.rule}")
    if entry.kind == "array":
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value), None
        return None, "is not a list of strings"
    if isinstance(value, str):
        return None, "is not an object; set it in the stack file as a map"
    if isinstance(value, dict):
        return value, None
    return None, "is not an object (a map of keys to values)"


def _is_overflow(value: Any) -> bool:
    """Text of a number too large for a float (1e999, or thousands of digits)."""
    try:
        return math.isinf(float(value)) and "inf" not in str(value).lower()
    except (TypeError, ValueError):
        return False


def _decoded(value: Any, kind: Kind) -> tuple[Any, str | None]:
    """JSON text as what it says; other text of a list as `pulumi config set` types one (a, b);
    anything else as it is. Or why it cannot be read: a number inside of more digits than
    Python converts."""
    if not isinstance(value, str):
        return value, None
    try:
        return json.loads(value), None
    except json.JSONDecodeError:
        return ([part.strip() for part in value.split(",") if part.strip()] if kind == "array" else value), None
    except ValueError:  # Python's limit on the digits of an integer
        return value, (
            f"has a number of more than {MAX_DIGITS} digits, more than any value of it can use; give numbers "
            "of a sensible size"
        )
