"""MaxText's configuration as data: its `base.yml` keys and defaults, and the checks a set of
overrides must pass before a job is submitted.

`base.yml` ships inside the `maxtext` package (no download); it is read as a file, without
importing MaxText (which would pull in JAX), so the check runs anywhere the package is installed.
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

# Set by the job itself from the stack (run name, checkpoint root) or by the AOT compiler.
RESERVED_KEYS = {
    "run_name": "set from the job's run name",
    "base_output_directory": "set from the stack's checkpoint root",
    "compile_topology": "set by the fit check from the preset's topology",
    "compile_topology_num_slices": "set by the fit check from the slice count",
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
        return f"{what}: only one axis may be -1 (auto), found {', '.join(wildcards)}"
    if wildcards and devices % fixed == 0:
        return None
    if not wildcards and fixed == devices:
        return None
    return f"{what}: {described or 'all 1'} multiply to {fixed}, but there are {devices}"


def override_problems(overrides: Mapping[str, str], *, chips_per_slice: int | None, slices: int) -> list[str]:
    """Every reason `overrides` cannot run on `slices` slices of `chips_per_slice` chips.

    `chips_per_slice=None` means a CPU run, where the device mesh is not checked.
    """
    known = base_config()
    problems = []
    for key in overrides:
        if key in RESERVED_KEYS:
            problems.append(f"MaxText key {key!r} cannot be overridden: it is {RESERVED_KEYS[key]}")
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{key!r} is not a MaxText setting (not in base.yml){hint}")
    if problems or chips_per_slice is None:
        return problems
    effective = {**known, **overrides}
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
