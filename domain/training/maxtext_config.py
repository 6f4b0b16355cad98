"""MaxText's configuration as data: its `base.yml` keys and defaults, and the checks a set of
overrides must pass before a job is submitted.

`base.yml` ships inside the `maxtext` package (no download); it is read as a file, without
importing MaxText (which would pull in JAX), so the check runs anywhere the package is installed.

Each override is typed by its key's default in `base.yml`: an integer, number, boolean or string
default makes the override one, as MaxText's own config model will insist when the job starts.
A key whose default is null says nothing about its type: its value is passed through as given
(MaxText checks it). A key whose default is a list (or a map) takes a list (a map), or its
YAML text (`[a, b]`), which is how it reaches MaxText's command line.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from domain.compile_cache import COMPILE_CACHE_PREFIX
from domain.setting import as_boolean, as_integer, as_number, shown

# Set by the job itself from the stack (run name, checkpoint root) or by the AOT compiler.
RESERVED_KEYS = {
    "run_name": "set from the job's run name; use the runName setting",
    "base_output_directory": "set from the stack's checkpoint root (the infra stack's checkpointRoot output, or "
    "checkpointRoot on a local stack)",
    "compile_topology": "set by the fit check from the preset's topology",
    "compile_topology_num_slices": "set by the fit check from the slice count",
    "jax_cache_dir": "set by the job to the stack's persistent compilation cache (the checkpoint bucket's "
    f"{COMPILE_CACHE_PREFIX}/ prefix on GKE, beside the runs locally); turn it off with the compileCache setting",
}


def base_config_path() -> Path:
    """Where the installed MaxText keeps `configs/base.yml`."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the maxtext package is not installed; run ./scripts/setup")
    return Path(next(iter(spec.submodule_search_locations))) / "configs" / "base.yml"


@functools.cache
def base_config() -> Mapping[str, Any]:
    return yaml.safe_load(base_config_path().read_text())


def _parallelism(values: Mapping[str, Any], prefix: str) -> dict[str, int]:
    return {key: int(value) for key, value in values.items() if key.startswith(prefix) and key.endswith("_parallelism")}


def _product_problem(axes: dict[str, int], devices: int, what: str) -> str | None:
    """MaxText fills at most one -1 axis with what is left; the rest must multiply to `devices`."""
    wildcards = [key for key, value in axes.items() if value == -1]
    fixed = math.prod(value for value in axes.values() if value != -1)
    described = ", ".join(f"{key}={value}" for key, value in sorted(axes.items()) if value != 1)
    if len(wildcards) > 1:
        return (
            f"maxtextOverrides: {what}: only one axis may be -1 (auto), found {', '.join(wildcards)}; "
            "give all but one of them a number"
        )
    if wildcards and fixed > 0 and devices % fixed == 0:
        return None
    if not wildcards and fixed == devices:
        return None
    valid = (
        f"make the others multiply to a divisor of {devices}"
        if wildcards
        else f"make them multiply to {devices}, or set one of them to -1"
    )
    return f"maxtextOverrides: {what}: {described or 'all 1'} multiply to {fixed}, but there are {devices}; {valid}"


# Ranges that matter before a job starts, beyond the type: (lowest, whether it may be equal, text).
_RANGES: Mapping[str, tuple[float, bool, str]] = {
    "steps": (1, True, "use 1 or more (the job needs a definite step count)"),
    "max_target_length": (1, True, "use 1 or more tokens"),
    "checkpoint_period": (1, True, "use 1 or more steps"),
    "per_device_batch_size": (0, False, "use a number above 0 (fractions are allowed)"),
    "learning_rate": (0, False, "use a number above 0, for example 3e-5"),
}


def is_parallelism_key(key: str) -> bool:
    """The ICI and DCN mesh axes, where MaxText fills one -1 axis per group with what is left."""
    return key.startswith(("ici_", "dcn_")) and key.endswith("_parallelism")


def _default(key: str, default: Any) -> str:
    return f"(MaxText's base.yml: {key}: {shown(default) if not isinstance(default, str) else repr(default)})"


def _structured(value: Any, kind: type) -> bool:
    """A list (map) or its YAML text, as MaxText's command line reads it."""
    if isinstance(value, kind):
        return True
    if not isinstance(value, str):
        return False
    try:
        return isinstance(yaml.safe_load(value), kind)
    except yaml.YAMLError:
        return False


def value_problems(
    overrides: Mapping[str, Any], *, setting: str = "maxtextOverrides", secret: bool = False
) -> list[str]:
    """Every override whose value MaxText would refuse at start-up (its type from base.yml) or
    that cannot run a job (the ranges above). Unknown and reserved keys are left to
    `key_problems`. `secret` leaves the values out of the messages."""
    known = base_config()
    problems = []
    for key, value in overrides.items():
        if key not in known or key in RESERVED_KEYS:
            continue
        default = known[key]
        named = f"{setting}.{key} = {'[secret]' if secret else shown(value)}"
        number: float | None
        if isinstance(default, bool):
            if as_boolean(value) is None:
                problems.append(f"{named} is not a boolean; use true or false {_default(key, default)}")
            continue
        if isinstance(default, int):
            number = as_integer(value)
            if number is None:
                problems.append(f"{named} is not an integer {_default(key, default)}")
                continue
        elif isinstance(default, float):
            number = as_number(value)
            if number is None:
                problems.append(f"{named} is not a number {_default(key, default)}")
                continue
        elif isinstance(default, str):
            if isinstance(value, (list, dict)):
                problems.append(f"{named} is not a single value; give text {_default(key, default)}")
            continue
        elif isinstance(default, (list, dict)):
            kind, what, example = (list, "list", "[a, b]") if isinstance(default, list) else (dict, "map", "{a: 1}")
            if not _structured(value, kind):
                problems.append(
                    f"{named} is not a {what}; give a YAML {what} such as {example} {_default(key, default)}"
                )
            continue
        else:  # null in base.yml: no type to check; MaxText checks the value when the job starts
            continue
        if is_parallelism_key(key):
            if number != -1 and number < 1:
                group = "chips of a slice" if key.startswith("ici_") else "slices"
                problems.append(
                    f"{named} is out of range; use 1 or more, or -1 for the rest of the {group} "
                    f"(at most one {key[:3]} axis)"
                )
        elif key in _RANGES:
            lowest, inclusive, valid = _RANGES[key]
            if number < lowest or (number == lowest and not inclusive):
                problems.append(f"{named} is out of range; {valid}")
    return problems


def key_problems(overrides: Mapping[str, Any], *, setting: str = "maxtextOverrides") -> list[str]:
    """Keys that are not MaxText's (with the closest one) and keys the job sets itself."""
    known = base_config()
    problems = []
    for key in overrides:
        if key in RESERVED_KEYS:
            problems.append(f"{setting}: MaxText key {key!r} cannot be overridden: it is {RESERVED_KEYS[key]}")
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; use a key of MaxText's configs/base.yml"
            problems.append(f"{setting}: {key!r} is not a MaxText setting (not in base.yml){hint}")
    return problems


def override_problems(overrides: Mapping[str, str], *, chips_per_slice: int | None, slices: int) -> list[str]:
    """Every reason `overrides` cannot run on `slices` slices of `chips_per_slice` chips: keys
    MaxText does not have or the job sets, then (when those are fine) a device mesh that does not
    multiply to the devices.

    `chips_per_slice=None` means a CPU run, where the device mesh is not checked.
    """
    problems = key_problems(overrides)
    if problems or chips_per_slice is None:
        return problems
    effective = {**base_config(), **overrides}
    try:
        ici = _parallelism(effective, "ici_")
        dcn = _parallelism(effective, "dcn_")
    except ValueError as error:
        return [f"a parallelism setting is not a whole number ({error})"]
    for problem in (
        _product_problem(ici, chips_per_slice, f"ICI parallelism within a slice of {chips_per_slice} chips"),
        _product_problem(dcn, slices, f"DCN parallelism across {slices} slice(s)"),
    ):
        if problem:
            problems.append(problem)
    return problems
