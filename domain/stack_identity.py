"""Whose stack it is, named in full (organization, project and stack name), and the one digest
rule for names derived from it.

Two stacks of the same name in other projects or organizations are other stacks: a name derived
from a stack (the Ray job's submission id, the default MaxText run name and so its checkpoint
directory) carries a digest covering all three, so no two of them share one. The digest is of the
full names even where the readable part of a name is cut.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

DIGEST_LENGTH = 16


def integral(value: Any) -> Any:
    """The engine sends every number as a float (8265 arrives as 8265.0): undo that for whole
    numbers, so a digest computed by the program matches the one computed under the engine."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: integral(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [integral(item) for item in value]
    return value


def canonical(value: Any) -> str:
    """One text per value: keys sorted, whole numbers as integers."""
    return json.dumps(integral(value), sort_keys=True, default=str)


def digest(value: Any, length: int = DIGEST_LENGTH) -> str:
    """The first `length` hex digits of the SHA-256 of `value`'s canonical text."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:length]


@dataclass(frozen=True)
class StackIdentity:
    # None where no engine names it: under the SDK's mocks unless given, and in the smoke run,
    # which is not a Pulumi run. A real engine always names one.
    organization: str | None
    project: str
    stack: str

    def as_inputs(self) -> dict[str, str | None]:
        """The identity as resource inputs, keyed `organization`, `project`, `stack`."""
        return asdict(self)

    def digest(self, length: int = DIGEST_LENGTH) -> str:
        return digest(self.as_inputs(), length)
