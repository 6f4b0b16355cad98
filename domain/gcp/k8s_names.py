"""Kubernetes' naming rules as pure checks, in the form of domain/gcp/gcp_names.py: each
`*_problems(value)` returns every reason `value` is not a valid name of its kind (empty when it
is), phrased to follow "<setting> = <value> ...: "; each `*_RULE` says what is valid, to follow
"use ".

Source: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/
- a namespace is an RFC 1123 label: at most 63 lowercase letters, digits and '-', starting and
  ending with a letter or digit (a digit may come first, unlike the RFC 1035 labels of Google
  Cloud's resource names);
- a service account (like most objects) is a DNS subdomain name: at most 253 characters of
  lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, each
  dot-separated part an RFC 1123 label.
"""

from __future__ import annotations

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")

NAMESPACE_RULE = (
    f"at most {LABEL_MAX} lowercase letters, digits and '-', starting and ending with a letter or digit "
    "(an RFC 1123 label, as Kubernetes names namespaces)"
)
SUBDOMAIN_RULE = (
    f"at most {SUBDOMAIN_MAX} lowercase letters, digits, '-' and '.', starting and ending with a letter or "
    f"digit, each part between dots at most {LABEL_MAX} characters (a DNS subdomain name, as Kubernetes names "
    "service accounts)"
)


def _quoted(characters: set[str]) -> str:
    return " ".join(repr(character) for character in sorted(characters))


def _part_problems(part: str, *, allowed: frozenset[str], what: str) -> list[str]:
    problems = []
    if any(character.isupper() for character in part):
        problems.append("has uppercase letters")
    others = {character for character in part.lower() if character not in allowed}
    if others:
        problems.append(f"has characters other than {what}: {_quoted(others)}")
    if not (part[0].isascii() and part[0].isalnum()) or not (part[-1].isascii() and part[-1].isalnum()):
        problems.append("does not start and end with a letter or digit")
    return problems


def label_problems(name: str) -> list[str]:
    """An RFC 1123 label (a namespace)."""
    if not name:
        return ["is empty"]
    if _LABEL.fullmatch(name) and len(name) <= LABEL_MAX:
        return []
    problems = [f"is {len(name)} characters long (at most {LABEL_MAX})"] if len(name) > LABEL_MAX else []
    return problems + _part_problems(name, allowed=_LABEL_CHARACTERS, what="lowercase letters, digits and '-'")


def subdomain_problems(name: str) -> list[str]:
    """A DNS subdomain name (a service account)."""
    if not name:
        return ["is empty"]
    parts = name.split(".")
    if len(name) <= SUBDOMAIN_MAX and all(_LABEL.fullmatch(part) and len(part) <= LABEL_MAX for part in parts):
        return []
    problems = [f"is {len(name)} characters long (at most {SUBDOMAIN_MAX})"] if len(name) > SUBDOMAIN_MAX else []
    if any(not part for part in parts):
        problems.append("has an empty part between dots (starts or ends with '.', or has '..')")
    if any(len(part) > LABEL_MAX for part in parts):
        problems.append(f"has a part between dots longer than {LABEL_MAX} characters")
    for reason in _part_problems(
        name, allowed=_LABEL_CHARACTERS | {"."}, what="lowercase letters, digits, '-' and '.'"
    ):
        if reason not in problems:
            problems.append(reason)
    inner = [part for part in parts if part and not _LABEL.fullmatch(part)]
    if inner and not problems:
        problems.append("has a part between dots that starts or ends with '-'")
    return problems
