"""A project's settings, each declared once: as a field of the project's frozen settings class.

A field made with `setting(...)` carries everything about one setting: its config key (the field's
name in camelCase), its type as `pulumi config` knows it, its default, its description, what is
valid, how one value is checked, and whether a secret value could stay secret. Everything else
derives from that declaration:

- `read` (domain/config/raw_config.py) turns raw engine config (text, as the engine passes it)
  into a `Reading`: typed values and the problems of each value on its own (unknown keys, types,
  choices, ranges, names, secrets);
- `pulumi_yaml_config` is the `config:` block of the project's Pulumi.yaml, and
  `markdown_table` the README's list of settings (`scripts/sync-settings` writes both;
  tests/test_settings_table.py fails when they drift).

Checks that involve several settings (a zone of the region, Spot with a reservation) stay in the
project's parse function. They read the values through the class's partial (`Partial`): the same
attributes, typed `X | None`, None where a value is unset or refused. They name a setting by the
class's own attribute (`StackSettings.zone`, a `Field`), never by a key typed as text, so a
renamed field renames every check and message, and mypy knows each.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Self, overload

Kind = Literal["string", "integer", "boolean", "number", "array", "object"]

SECRET = "[secret]"
_METADATA_KEY = "setting"
# How a value given as text (the engine passes every setting so) reads as a boolean or number:
# the settings here and MaxText's overrides (domain/training/maxtext_config.py) alike.
_INTEGER = re.compile(r"[+-]?[0-9]+(_[0-9]+)*")
_BOOLEANS = {"true": True, "false": False}


def shown(value: Any) -> str:
    """A value as a message shows it: booleans as YAML writes them, numbers as numbers (the engine
    passes settings as text), other text quoted, long values cut."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and as_number(value) is not None:
        return value.strip()
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def as_integer(value: Any) -> int | None:
    """An integer written as one (150, "150", "10_000"), else None: not 1.5, "1e3" or true."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        try:
            return int(value)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            return None
    return None


def as_number(value: Any) -> float | None:
    """A finite number (3e-5, "0.5", 4), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def as_boolean(value: Any) -> bool | None:
    """true or false (any letter case, as YAML and MaxText read them), else None: not yes, on, 1."""
    if isinstance(value, bool):
        return value
    return _BOOLEANS.get(value.strip().lower()) if isinstance(value, str) else None


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting. `check` gets a value of the right type (and choice, and range) and returns
    why it is refused, as the rest of a sentence that starts `KEY = VALUE ` (or None)."""

    kind: Kind
    description: str
    default: Any = None
    unset: str | None = None  # what leaving it unset means, when no default value says it
    required: str | None = None  # set for a setting that must be set: what `pulumi config set KEY ...` takes
    choices: Sequence[str] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None  # an exclusive minimum (a price, a fraction)
    valid: str | None = None  # what to use instead; derived from choices or the range when None
    check: Callable[[Any], str | None] | None = None
    in_clear: str | None = None  # where the value is stored or shown unencrypted: a secret is refused
    namespace: str | None = None  # a provider's setting (gcp:zone): its provider declares it
    # Where the setting does nothing, and why: set there (to anything but its default), the project
    # refuses it. The predicate is the project's, over what it knows of the stack (a name mypy checks).
    ignored_when: tuple[Callable[[Any], bool], str] | None = None
    field: str = ""  # the settings class's attribute, filled in by its `Field`

    @property
    def name(self) -> str:
        return camel_case(self.field)

    @property
    def key(self) -> str:
        """As the user types it after `pulumi config set`."""
        return f"{self.namespace}:{self.name}" if self.namespace else self.name

    @property
    def rule(self) -> str:
        """What a valid value is, as a message ends."""
        if self.valid:
            return self.valid
        if self.choices is not None:
            return f"choose one of: {', '.join(self.choices)}"
        if self.kind == "boolean":
            return "use true or false"
        if self.minimum is not None and self.maximum is not None:
            return f"use {_number(self.minimum)} to {_number(self.maximum)}"
        if self.minimum is not None:
            return f"use {_number(self.minimum)} or more"
        return f"use a {self.kind}"

    def in_range(self, number: float) -> bool:
        return (
            (self.minimum is None or number >= self.minimum)
            and (self.maximum is None or number <= self.maximum)
            and (self.above is None or number > self.above)
        )

    def problem(self, value: Any) -> str | None:
        """Why `value`, already of this setting's kind, is refused, worded as `read` words it
        (`KEY = VALUE is ...`); None when it is valid. For a value that did not come through
        `read` (a function's argument) checked against the same declaration."""
        problem = value_problem(self, value)
        return None if problem is None else f"{self.key} = {_shown(self.kind, value)} {problem}"


class Field[V]:
    """A settings class's field that declares a setting (made by `setting`). On the class it is
    the setting's name (`StackSettings.zone`, which checks and messages name it by); on an
    instance, the value; on a partial (`Partial`), the value as read, None where unset or refused."""

    def __init__(self, declared: Setting) -> None:
        self.setting = declared

    def __set_name__(self, owner: type, name: str) -> None:
        self.setting = dataclasses.replace(self.setting, field=name)

    @property
    def name(self) -> str:
        """The field's name (`min_slices`)."""
        return self.setting.field

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...
    @overload
    def __get__(self, instance: Partial, owner: type) -> V | None: ...
    @overload
    def __get__(self, instance: object, owner: type) -> V: ...
    def __get__(self, instance: object | None, owner: type) -> Any:
        if instance is None:
            return self
        if isinstance(instance, Partial):
            return instance.value_of(self.name)
        return instance.__dict__[self.name]

    def __set__(self, instance: object, value: V) -> None:
        # The class's __init__ sets each field once; a frozen class refuses any later assignment.
        # Left out of the call, a field takes its declared default (dataclasses passes the Field).
        instance.__dict__[self.name] = self.setting.default if isinstance(value, Field) else value


def setting(kind: Kind | Setting, description: str | None = None, **declaration: Any) -> Any:
    """A settings-class field that declares a setting (see `Setting` for what it takes), annotated
    `Field[ITS TYPE]`. Given a `Setting` instead of a kind: that setting, declared where its rule
    belongs (a job's own choices, domain/training/job.py, which checks its arguments with the same
    declaration), with this project's description, default, range and the rest where given."""
    if isinstance(kind, Setting):
        changes = declaration if description is None else {**declaration, "description": description}
        entry = dataclasses.replace(kind, **changes)
    else:
        assert description is not None, "a new setting needs its description"
        entry = Setting(kind, description, **declaration)
    return Field(entry)


class Partial:
    """The base of a settings class's partial, declared with it (`class PartialStackSettings(Partial,
    StackSettings)`): the settings as read so far, for the checks that involve several. Each field
    reads as `X | None` (mypy makes a check test a value before it uses it): None where it is unset
    with no default or was refused, before or after the partial was made (`Reading.refuse`). The
    class's properties hold only where the fields they read are not None. Fields that are not
    settings are not there."""

    def __init__(self, reading: Reading[Any], resolved: Mapping[str, Any]) -> None:
        # The reading's values as they stand (a value the project resolves replacing one as read),
        # and the refusals so far, after which a refusal makes its field None. Set as the frozen
        # class's own __init__ sets its fields: once, here.
        values = {field: None if field in reading.refused else value for field, value in reading.values.items()}
        object.__setattr__(self, "_values", {**values, **{reading.field(name): v for name, v in resolved.items()}})
        object.__setattr__(self, "_reading", reading)
        object.__setattr__(self, "_refused", frozenset(reading.refused))

    _values: dict[str, Any]
    _reading: Reading[Any]
    _refused: frozenset[str]

    def value_of(self, field: str) -> Any:
        return None if field in self._reading.refused - self._refused else self._values[field]


def camel_case(name: str) -> str:
    """A field's name as Pulumi's config keys and stack outputs spell it (`min_slices`: `minSlices`)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings a class declares, in declaration order."""
    return tuple(
        declared.setting
        for field in dataclasses.fields(cls)
        if isinstance(declared := getattr(cls, field.name, None), Field)
    )


@dataclasses.dataclass
class Reading[T]:
    """Raw config read against a settings class: typed values by field name (None where unset or
    refused), and the problems found so far, to which the project's own checks add. `partial` is
    the same values as the class's partial holds them, for the checks that involve several. A
    field is named by the class's attribute (`StackSettings.zone`) or its name."""

    values: dict[str, Any]
    problems: list[str]
    secrets: frozenset[str]  # keys (as the user types them) set with `pulumi config set --secret`
    raw: Mapping[str, Any]
    kinds: Mapping[str, Kind]  # by key
    keys: Mapping[str, str]  # by field
    defaults: Mapping[str, Any]  # by field
    refused: set[str] = dataclasses.field(default_factory=set)  # fields whose value was refused
    cls: type[T] | None = None

    def partial[P: Partial](self, partial: type[P], **resolved: Any) -> P:
        """The values read, as `partial` (the settings class's partial) holds them: a field is None
        where it is unset with no default or was refused (now or later, by `refuse`), so a check
        tests the values it reads (or asks `ok`) first (tests/test_setting_values.py refuses each in
        turn). `resolved` replaces values the project derives (a preset's default shape)."""
        assert self.cls is not None and self.cls in partial.__mro__, "the partial of the class read"
        return partial(self, resolved)

    def complete(self, partial: Partial, **others: Any) -> T:
        """The settings class made from `partial` (once every problem is reported) and `others`, its
        fields that are not settings."""
        assert self.cls is not None, "a Reading made by read() knows its class"
        return self.cls(**{field: partial.value_of(field) for field in self.keys}, **others)

    def refuse(self, field: Field[Any] | str) -> None:
        """Marks a field's value refused by a check of several settings: later checks (and every
        partial) read it as None."""
        self.refused.add(self.field(field))

    def key(self, field: Field[Any] | str) -> str:
        """A field's setting as the user types it (`minSlices`, `gcp:zone`), as messages name it."""
        return self.keys[self.field(field)]

    def stated(self, field: Field[Any] | str, value: Any = None) -> str:
        """A field's setting and value as a message starts: `KEY = VALUE` (see `shown`)."""
        return f"{self.key(field)} = {self.shown(self.key(field), value)}"

    def value(self, field: Field[Any] | str) -> Any:
        """A field's value as read (None where unset with no default or refused by `read`)."""
        return self.values[self.field(field)]

    def is_secret(self, field: Field[Any] | str) -> bool:
        """Whether the field's setting is set with `pulumi config set --secret`."""
        return self.key(field) in self.secrets

    def field(self, field: Field[Any] | str) -> str:
        """A field's name, checked to be a setting's field of the class read."""
        name = field.name if isinstance(field, Field) else field
        if not isinstance(name, str) or name not in self.keys:
            raise KeyError(f"{field!r} is not a setting's field")
        return name

    def shown(self, key: str, value: Any = None) -> str:
        """A setting's value as messages show it (text quoted, even text of digits, numbers and
        booleans bare); a secret's never."""
        if key in self.secrets:
            return SECRET
        return _shown(self.kinds.get(key), self.raw.get(key) if value is None else value)

    def is_set(self, field: Field[Any] | str) -> bool:
        """Whether the stack sets this field's setting, which has no default. The CLI merges every
        default into the config (domain/config/cli_config.py), so a setting with one always looks
        set: ask `changed` of it instead."""
        field = self.field(field)
        if self.defaults[field] is not None:
            raise ValueError(f"{self.keys[field]} has a default, which the CLI sets on every stack; use changed()")
        return self.raw.get(self.keys[field]) is not None

    def changed(self, field: Field[Any] | str) -> bool:
        """Whether this field's value differs from its default: what a user can be told they set."""
        field = self.field(field)
        return self.values[field] not in (None, self.defaults[field])

    def ok(self, *fields: Field[Any] | str) -> bool:
        """Whether these fields were read without a problem."""
        return not self.refused & {self.field(field) for field in fields}

    def raise_problems(self, error: Callable[[list[str]], Exception]) -> None:
        """Raises `error` with every problem, with no secret value repeated."""
        if self.problems:
            hidden = [str(self.raw[key]) for key in self.secrets if self.raw.get(key) not in (None, "")]
            raise error([redacted(problem, hidden) for problem in self.problems])


def _shown(kind: Kind | None, value: Any) -> str:
    """Text quoted, even text of digits; numbers and booleans bare."""
    return repr(value) if kind == "string" and isinstance(value, str) else shown(value)


def value_problem(entry: Setting, value: Any) -> str | None:
    if entry.choices is not None and value not in entry.choices:
        return f"is not valid; {entry.rule}"
    if entry.kind in ("integer", "number") and not entry.in_range(value):
        return f"is out of range; {entry.rule}"
    return entry.check(value) if entry.check else None


def redacted(problem: str, secrets: list[str]) -> str:
    """Messages quote values (`'value'`); a few print them bare (numbers, booleans, and names
    inside longer names), which are hidden too unless too short to tell from other words."""
    for secret in sorted(secrets, key=len, reverse=True):
        problem = problem.replace(repr(secret), SECRET)
        if len(secret) >= 4:
            problem = problem.replace(secret, SECRET)
    return problem


# ---------------------------------------------------------------- what the table documents


def pulumi_yaml_config(cls: type) -> dict[str, dict[str, Any]]:
    """The project's own settings with a default, as Pulumi.yaml's `config:` block declares them
    (domain/config/cli_config.py says what the CLI does with the block). A setting without one is
    left out: the CLI takes a declared key without a default for a required one and stops every
    stack that lacks it. A provider's settings, like gcp:zone, are its provider's to declare."""
    block: dict[str, dict[str, Any]] = {}
    for entry in settings_of(cls):
        if entry.namespace is not None or entry.default is None:
            continue
        # No `type:`: the CLI would check it first and stop with "must be of type 'integer'",
        # naming neither the value nor the range, and refuse a list or map set as text (`pulumi
        # config set capacity spot`); `read` checks every kind and says what would be valid.
        default: Any = entry.default
        if entry.kind == "number":
            default = str(default)  # the CLI merges a float default as JSON, not as its text
        elif entry.kind in ("array", "object"):
            default = list(default) if entry.kind == "array" else dict(default)
        block[entry.name] = {"description": entry.description, "default": default}
    return block


def markdown_table(cls: type) -> str:
    """The README's list of a project's settings."""
    lines = ["| setting | type | default | may be secret | what it does |", "| --- | --- | --- | --- | --- |"]
    for entry in settings_of(cls):
        secret = "no" if entry.in_clear else "yes"
        cells = (f"`{entry.key}`", entry.kind, _markdown(_default_text(entry)), secret, _markdown(entry.description))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _markdown(text: str) -> str:
    """Text for a table cell: `<` and `>` outside code spans would be read as HTML, `|` as a cell."""
    parts = text.replace("|", "\\|").split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _default_text(entry: Setting) -> str:
    if entry.required is not None:
        return "required"
    if entry.default is None or entry.default in ((), {}):
        return entry.unset or ("empty" if entry.kind in ("array", "object") else "unset")
    if isinstance(entry.default, bool):
        return f"`{'true' if entry.default else 'false'}`"
    if isinstance(entry.default, tuple):
        return ", ".join(f"`{item}`" for item in entry.default)
    return f"`{entry.default}`"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
