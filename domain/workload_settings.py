"""The workloads stack's settings, parsed once from raw stack config and validated.

A workloads stack reaches its Ray cluster one of two ways: `infraStack` names the infra stack
whose outputs (cluster endpoint, head service, preset, shape) it reads, or `address` is a Ray
dashboard URL reached directly (the local stack).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.presets import PRESETS
from domain.problems import ProblemsError

DEFAULTS: Mapping[str, Any] = {
    "infraStack": None,
    "address": None,
    "preset": None,  # the infra stack's, or required with `address`
    "runName": None,  # <preset>-<stack>: a stable name, so a re-run resumes its checkpoints
    "elastic": False,
    "minSlices": 1,
    "maxFailures": None,  # the trainer's default (0 multislice, 3 elastic)
    "maxtextOverrides": {},
    "runtimeEnv": {},  # nothing is installed at job start unless asked for here
    "timeoutSeconds": 6 * 60 * 60,
    "checkpointRoot": ".runs",  # local stacks only; GKE stacks use the infra stack's
    # Model FLOPs utilization assumed for the cost estimate; MaxText's published v6e Llama 3
    # results reach 46-48%.
    "assumedMfu": "0.40",
}


class WorkloadSettingsError(ProblemsError):
    """Workloads stack config that cannot run a job."""

    heading = "invalid workloads stack configuration"


@dataclass(frozen=True)
class WorkloadSettings:
    stack: str
    infra_stack: str | None
    address: str | None
    preset: str | None
    run_name: str | None
    elastic: bool
    min_slices: int
    max_failures: int | None
    maxtext_overrides: Mapping[str, str] = field(default_factory=dict)
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    timeout_seconds: int = DEFAULTS["timeoutSeconds"]
    checkpoint_root: str = ".runs"
    assumed_mfu: float = 0.40

    def run_name_for(self, preset: str) -> str:
        return self.run_name or f"{preset}-{self.stack}".lower()


def _json_object(key: str, value: Any, problems: list[str]) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            problems.append(f"{key} = {value!r} is not an object; set it in the stack file as a map")
            return {}
    if not isinstance(value, dict):
        problems.append(f"{key} = {value!r} is not an object (a map of keys to values)")
        return {}
    return value


def _integer(key: str, value: Any, problems: list[str]) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        problems.append(f"{key} = {value!r} is not a whole number")
        return None


def parse_workload_settings(raw: Mapping[str, Any], *, stack: str, project_name: str) -> WorkloadSettings:
    problems: list[str] = []
    for key in sorted(set(raw) - set(DEFAULTS)):
        problems.append(f"{project_name}:{key} is not a setting of this project; valid settings: {', '.join(DEFAULTS)}")
    values = {key: DEFAULTS[key] if raw.get(key) is None else raw[key] for key in DEFAULTS}

    infra_stack, address = values["infraStack"], values["address"]
    if (infra_stack is None) == (address is None):
        problems.append(
            "set exactly one of infraStack (the infra stack to train on, e.g. "
            "organization/maxtext-tpu-infra/dev) or address (a Ray dashboard URL such as "
            "http://127.0.0.1:8265)"
        )
    if address is not None and not str(address).startswith(("http://", "https://")):
        problems.append(f"address = {address!r} is not a URL; use http://HOST:8265")
    preset = values["preset"]
    if preset is not None and preset not in PRESETS:
        problems.append(f"preset = {preset!r} is not valid; choose one of: {', '.join(PRESETS)}")
    if address is not None and preset is None:
        problems.append("preset is required with address (the infra stack's preset is used otherwise)")

    elastic = str(values["elastic"]).lower()
    if elastic not in ("true", "false"):
        problems.append(f"elastic = {values['elastic']!r} is not a boolean; use true or false")
    min_slices = _integer("minSlices", values["minSlices"], problems) or 1
    max_failures = _integer("maxFailures", values["maxFailures"], problems)
    timeout = _integer("timeoutSeconds", values["timeoutSeconds"], problems) or 0
    if timeout <= 0 and not any(p.startswith("timeoutSeconds") for p in problems):
        problems.append(f"timeoutSeconds = {values['timeoutSeconds']!r} must be a positive number of seconds")
    try:
        assumed_mfu = float(str(values["assumedMfu"]))
    except ValueError:
        assumed_mfu = -1.0
    if not 0 < assumed_mfu <= 1:
        problems.append(f"assumedMfu = {values['assumedMfu']!r} must be a fraction in (0, 1], for example 0.4")
    overrides = _json_object("maxtextOverrides", values["maxtextOverrides"], problems)
    runtime_env = _json_object("runtimeEnv", values["runtimeEnv"], problems)
    if problems:
        raise WorkloadSettingsError(problems)
    return WorkloadSettings(
        stack=stack,
        infra_stack=infra_stack,
        address=str(address).rstrip("/") if address else None,
        preset=preset,
        run_name=values["runName"],
        elastic=elastic == "true",
        min_slices=min_slices,
        max_failures=max_failures,
        maxtext_overrides={str(k): str(v) for k, v in overrides.items()},
        runtime_env=runtime_env,
        timeout_seconds=timeout,
        checkpoint_root=str(values["checkpointRoot"]),
        assumed_mfu=assumed_mfu,
    )
