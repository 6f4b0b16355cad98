"""Offline stand-in for the Kubernetes API server's admission checks, for tests.

Mocked Pulumi runs never reach a cluster, so nothing would notice a misspelt field, an out-of-range
int32 or a value a CEL rule forbids until a real `pulumi up`. This module checks manifests the
way the API server does on create, against the upstream schemas kept in `../shared/schemas`
(never copied into the project) and, for built-in kinds, the OpenAPI-derived schemas bundled by
`kubernetes-validate`.

For a custom resource the API server, in this order: drops `null`s from non-nullable fields and
applies structural-schema defaults, reports undeclared fields (strict field validation), then
validates the OpenAPI schema and the `x-kubernetes-validations` CEL rules on the defaulted
object. The functions below follow that order.

Known gaps: string `format`s (date-time, used only in status fields) are not checked;
`x-kubernetes-embedded-resource` and the CEL rule fields `messageExpression`, `fieldPath` and
`reason` are ignored (none appear in the shared schemas); `optionalOldSelf` rules raise.
Callers holding values captured from Pulumi mocks should pass them through `normalize_numbers`
first.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from celpy import celtypes
from jsonschema import ValidationError

from tests.support.shared import shared_dir

K8S_VERSION = "1.34"  # GKE control-plane minor the product targets.

# --------------------------------------------------------------------------- locating schemas


def schemas_dir() -> Path:
    """Upstream schemas are read in place, never vendored, so their location is configurable."""
    return Path(os.environ.get("SHARED_SCHEMAS_DIR") or shared_dir() / "schemas")


def require_schema(name: str) -> Path:
    """A checkout without the shared schemas should skip conformance tests, not fail them."""
    path = schemas_dir() / name
    if not path.is_file():
        pytest.skip(f"{name} not found at {path}; set SHARED_SCHEMAS_DIR")
    return path


@functools.cache
def _load(path: Path) -> Any:
    """CRDs are large (the RayCluster one is ~1 MB of YAML): parse each once per test session.

    The returned object is shared; nothing in this module mutates it.
    """
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def crd_schema(crd_path: Path, version: str = "v1") -> dict:
    """The openAPIV3Schema of one version of a CRD, for `apply_defaults` and ad-hoc checks."""
    return _crd_version(_load(Path(crd_path)), version)["schema"]["openAPIV3Schema"]


def _crd_version(crd: dict, version: str) -> dict:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry
    raise ValueError(f"CRD {crd['metadata']['name']} has no version {version!r}")


# --------------------------------------------------------------------------- public checks


def normalize_numbers(value: Any) -> Any:
    """Turn integral floats back into ints, recursively.

    Pulumi carries every number as a double (protobuf `Struct`), so mocks hand back an input of 2
    as 2.0. On a real deployment the provider serializes it to JSON as `2` and the API server sees
    an integer, so without this step integer fields would be falsely rejected. 2.5 stays a float:
    a truly fractional value must still fail an integer field.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: normalize_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalize_numbers(item) for item in value]
    return value


def validate_custom_resource(obj: dict, crd_path: Path, version: str = "v1") -> list[str]:
    """Errors the API server would return when creating `obj` from the CRD at `crd_path`."""
    crd = _load(Path(crd_path))
    entry = _crd_version(crd, version)
    api_version = f"{crd['spec']['group']}/{version}"
    kind = crd["spec"]["names"]["kind"]
    errors = []
    if obj.get("apiVersion") != api_version:
        errors.append(f"apiVersion: must be {api_version!r}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != kind:
        errors.append(f"kind: must be {kind!r}, got {obj.get('kind')!r}")
    if not entry.get("served", False):
        errors.append(f"apiVersion: {api_version} is not served by this CRD")
    if "status" in entry.get("subresources", {}):
        # With the status subresource the API server discards status sent on create.
        obj = {key: value for key, value in obj.items() if key != "status"}
    return errors + validate_against_schema(obj, entry["schema"]["openAPIV3Schema"])


def validate_against_schema(obj: dict, schema: dict) -> list[str]:
    """Same checks as `validate_custom_resource` for a bare openAPIV3 / JSON schema.

    A top-level `metadata` that the schema leaves opaque (`type: object`, as CRDs must) is
    ObjectMeta to the API server, so it is checked as such instead of being reported as unknown.
    """
    _compile_all_rules(schema)
    errors = []
    properties = schema.get("properties", {})
    metadata_schema = properties.get("metadata")
    if "metadata" in obj and metadata_schema is not None and "properties" not in metadata_schema:
        errors += _object_meta_errors(obj["metadata"])
        opaque = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        schema = {**schema, "properties": {**properties, "metadata": opaque}}
    defaulted = apply_defaults(obj, schema)
    errors += [_error_line(path, "unknown field") for path in _unknown_fields(defaulted, schema)]
    errors += [
        _error_line(error.absolute_path, error.message) for error in _StructuralValidator(schema).iter_errors(defaulted)
    ]
    return errors


def validate_builtin(obj: dict, k8s_version: str = K8S_VERSION) -> list[str]:
    """Check a built-in kind strictly (unknown fields rejected) against that Kubernetes minor.

    kubernetes-validate stops at the first error, so the list holds at most one entry. It checks
    the OpenAPI schema only: no int32 ranges, list-map keys or server-side semantic validation.
    """
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [_error_line(error.path, error.message)]
    except kubernetes_validate.SchemaNotFoundError as error:
        raise LookupError(error.message) from error  # a kind we cannot check is a test bug
    return []


def validate_pod_template(template: dict, k8s_version: str = K8S_VERSION) -> list[str]:
    """Check a PodTemplateSpec (`metadata` + `spec`) as Kubernetes' own PodTemplate would.

    CRDs embed a copy of the PodSpec schema from the Kubernetes release they were generated
    against; validating the template as the built-in kind of the cluster's version catches
    fields that release does not know. Paths are relative to the template.
    """
    wrapper = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "template"},
        "template": template,
    }
    return [error.removeprefix("template.") for error in validate_builtin(wrapper, k8s_version)]


def apply_defaults(obj: dict, schema: dict) -> dict:
    """A copy of `obj` defaulted as the API server does before validating it.

    Omitted fields (and nulls in non-nullable fields) take their schema `default`, recursively,
    including inside defaults just applied; remaining nulls in non-nullable fields are dropped.
    That is why a `required` field with a default may be omitted.
    """
    defaulted = copy.deepcopy(obj)
    _default_in_place(defaulted, schema)
    return defaulted


# --------------------------------------------------------------------------- structural walk


def _entries(value: Any) -> list[tuple[str | int, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value))
    return []


def _child_schema(schema: dict, key: str | int) -> dict | None:
    """The schema of a field or list item in the structural skeleton; None if undeclared."""
    if isinstance(key, int):
        return schema.get("items")
    properties = schema.get("properties", {})
    if key in properties:
        return properties[key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _default_in_place(value: Any, schema: dict) -> None:
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            unset = name not in value or (value[name] is None and not prop.get("nullable"))
            if unset and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
        for name in list(value):
            prop = _child_schema(schema, name)
            if value[name] is None and prop is not None and not prop.get("nullable"):
                del value[name]
    for key, child in _entries(value):
        child_schema = _child_schema(schema, key)
        if child_schema is not None:
            _default_in_place(child, child_schema)


def _unknown_fields(value: Any, schema: dict, path: tuple = ()) -> Iterator[tuple]:
    """Fields the API server would prune, which strict field validation reports instead.

    `additionalProperties: false` (added by datree's JSON-schema export, not allowed in CRDs)
    means the same as no `additionalProperties`: only declared fields are kept.
    """
    keeps_unknown = (
        schema.get("x-kubernetes-preserve-unknown-fields") is True or schema.get("additionalProperties") is True
    )
    for key, child in _entries(value):
        child_schema = _child_schema(schema, key)
        if child_schema is not None:
            yield from _unknown_fields(child, child_schema, (*path, key))
        elif isinstance(value, dict) and not keeps_unknown:
            yield (*path, key)


def _object_meta_errors(metadata: Any) -> list[str]:
    """kubernetes-validate only takes whole objects: ConfigMap is the simplest one with an
    ObjectMeta and no required fields, so its errors are exactly ObjectMeta's."""
    return validate_builtin({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})


_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*")


def _error_line(path: Iterable[str | int], message: str) -> str:
    """`spec.workerGroupSpecs[0].numOfHosts: message`; map keys such as annotation names that
    contain dots or slashes are bracketed, as the API server prints them."""
    text = ""
    for part in path:
        if isinstance(part, str) and _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part}]"
    return f"{text or '(root)'}: {message}"


# --------------------------------------------------------------------------- CEL rules


class CELRuleError(Exception):
    """A rule this checker cannot evaluate faithfully: a gap in the checker, not a verdict."""


def _split(text: str, separator: str, limit: int = -1) -> celtypes.ListType:
    """Kubernetes' CEL strings extension `split`, missing from cel-python; `limit` as in Go's
    strings.SplitN."""
    if limit == 0:
        return celtypes.ListType()
    parts = text.split(separator) if limit < 0 else text.split(separator, limit - 1)
    return celtypes.ListType(celtypes.StringType(part) for part in parts)


# Functions the Kubernetes CEL environment has and cel-python lacks. `size()` on maps, `dyn()`,
# `startsWith` and the list macros are native to cel-python 0.5.
_KUBERNETES_FUNCTIONS = {"split": _split}
_MACROS = {"has", "dyn", "all", "exists", "exists_one", "map", "filter"}
_KNOWN_FUNCTIONS = set(celpy.base_functions) | set(_KUBERNETES_FUNCTIONS) | _MACROS
_CEL = celpy.Environment()


@functools.cache
def _compile_rule(rule: str) -> celpy.Runner | None:
    """Compile a rule once; None for a transition rule.

    Rules reading `oldSelf` compare an update with the stored object and the API server skips
    them on create, which is all this checker models. cel-python resolves function names only
    when a call is evaluated, so every call is checked here: an unknown function must fail the
    checker even when the branch calling it is not reached by the object under test.
    """
    try:
        ast = _CEL.compile(rule)
    except celpy.CELParseError as error:
        raise CELRuleError(f"cel-python cannot parse rule {rule!r}: {error}") from error
    nodes = list(ast.iter_subtrees())
    if any(node.data == "ident" and node.children[0] == "oldSelf" for node in nodes):
        return None
    for node in nodes:
        if node.data == "member_dot_arg":
            name = node.children[1]
        elif node.data in ("ident_arg", "dot_ident_arg"):
            name = node.children[0]
        else:
            continue
        if name not in _KNOWN_FUNCTIONS:
            raise CELRuleError(
                f"rule {rule!r} calls {name}(), which cel-python lacks; add a shim to _KUBERNETES_FUNCTIONS"
            )
    return _CEL.program(ast, functions=_KUBERNETES_FUNCTIONS)


def _compile_all_rules(schema: Any) -> None:
    """Compile every rule up front so an unsupported one fails whatever object is checked."""
    if isinstance(schema, dict):
        for rule in schema.get("x-kubernetes-validations", []):
            _compile_rule(rule["rule"])
        schema = list(schema.values())
    if isinstance(schema, list):
        for item in schema:
            _compile_all_rules(item)


def _cel_validations(validator, rules, instance, schema) -> Iterator[ValidationError]:
    self_value = celpy.json_to_cel(instance)
    for rule in rules:
        if rule.get("optionalOldSelf"):
            raise CELRuleError(f"rule {rule['rule']!r} needs CEL optionals, which cel-python lacks")
        program = _compile_rule(rule["rule"])
        if program is None:
            continue
        try:
            result = program.evaluate({"self": self_value})
        except celpy.CELEvalError as error:
            yield ValidationError(f"rule {rule['rule']!r} failed to evaluate: {error.args[0]}")
            continue
        if not isinstance(result, celtypes.BoolType):
            yield ValidationError(f"rule {rule['rule']!r} did not evaluate to a bool")
        elif not result:
            yield ValidationError(rule.get("message") or f"failed rule: {rule['rule']}")


# --------------------------------------------------------------------------- schema keywords

_DRAFT4 = jsonschema.Draft4Validator.VALIDATORS
_INT_BOUNDS = {"int32": 2**31, "int64": 2**63}


def _type(validator, types, instance, schema) -> Iterator[ValidationError]:
    """`nullable: true` is OpenAPI's way to admit null; draft 4 JSON Schema has no such keyword."""
    if instance is None and schema.get("nullable"):
        return
    yield from _DRAFT4["type"](validator, types, instance, schema)


def _required(validator, required, instance, schema) -> Iterator[ValidationError]:
    """Name the missing field in the path, as the API server does."""
    if isinstance(instance, dict):
        for name in required:
            if name not in instance:
                yield ValidationError("Required value", path=(name,))


def _additional_properties(validator, extra, instance, schema) -> Iterator[ValidationError]:
    """Only schema-valued `additionalProperties` validates here; `false` leaves the undeclared
    fields to `_unknown_fields`, which reports each at its own path."""
    if isinstance(extra, dict):
        yield from _DRAFT4["additionalProperties"](validator, extra, instance, schema)


def _integer_format(validator, fmt, instance, schema) -> Iterator[ValidationError]:
    """Go decodes int32 fields into int32: larger values are rejected, not truncated."""
    bound = _INT_BOUNDS.get(fmt)
    if bound and isinstance(instance, int) and not isinstance(instance, bool):
        if not -bound <= instance < bound:
            yield ValidationError(f"{instance} is out of range for {fmt} ({-bound}..{bound - 1})")


def _int_or_string(validator, enabled, instance, schema) -> Iterator[ValidationError]:
    if enabled and (isinstance(instance, bool) or not isinstance(instance, (int, str))):
        yield ValidationError(f"{instance!r} must be an integer or a string")


def _list_type(validator, list_type, instance, schema) -> Iterator[ValidationError]:
    """`set` items and `map` items' key tuples must be unique; controllers and server-side apply
    merge such lists by those keys, so the API server refuses duplicates."""
    if not isinstance(instance, list) or list_type not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen = set()
    for index, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue  # the items schema reports the wrong type
            item = {key: item.get(key) for key in keys}
        identity = json.dumps(item, sort_keys=True)
        if identity in seen:
            yield ValidationError(f"Duplicate value: {identity}", path=(index,))
        seen.add(identity)


_StructuralValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    validators={
        "type": _type,
        "required": _required,
        "additionalProperties": _additional_properties,
        "format": _integer_format,
        "x-kubernetes-int-or-string": _int_or_string,
        "x-kubernetes-list-type": _list_type,
        "x-kubernetes-validations": _cel_validations,
    },
)
