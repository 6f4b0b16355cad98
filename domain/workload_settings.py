"""The workloads stack's settings, parsed once from raw stack config and validated.

A workloads stack reaches its Ray cluster one of two ways: `infraStack` names the infra stack
whose outputs (cluster endpoint, head service, preset, shape) it reads, or `address` is a Ray
dashboard URL reached directly (the local stack, a CPU-only Ray head on this machine).

Every problem the stack file alone shows is reported at once, each naming the setting, the value
and what would be valid; what needs the infra stack's outputs (its accelerator, slices and
topology) is checked when the job is resolved (domain/job.py), still before anything is
submitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from domain import maxtext_config
from domain.job import run_name_problem
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
    "allowRuntimeInstall": False,  # and even then only with this opt-in
    "timeoutSeconds": 6 * 60 * 60,
    "checkpointRoot": ".runs",  # local stacks only; GKE stacks use the infra stack's
    # Model FLOPs utilization assumed for the cost estimate; MaxText's published v6e Llama 3
    # results reach 46-48%.
    "assumedMfu": "0.40",
}

# Settings whose value cannot be kept secret: Pulumi would store or show it in clear anyway.
# (A secret runtimeEnv, or any other secret setting, stays secret: see workloads/program.py.)
NOT_SECRET = {
    "runName": "it is exported as the runName output and names the checkpoint directory",
    "preset": "it is exported as the preset output and names the default run (<preset>-<stack>)",
    "infraStack": "it names the StackReference resource, which the state and every preview show",
    "address": "it is the job's target, kept in clear in the resources' inputs and state",
}

# Runtime env fields that make Ray download or install something on every worker at every job
# start, before the first step (https://docs.ray.io/en/latest/ray-core/handling-dependencies.html).
RUNTIME_INSTALLS = {
    "pip": "installs Python packages with pip",
    "uv": "installs Python packages with uv",
    "conda": "creates a conda environment",
    "py_modules": "downloads and installs Python modules",
    "container": "pulls and runs a container image",
    "image_uri": "pulls and runs a container image",
    "java_jars": "downloads Java archives",
}
_OPT_IN = (
    "the worker image already holds MaxText and the trainer; remove it, or opt in with "
    "allowRuntimeInstall: true (pulumi config set allowRuntimeInstall true)"
)


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
    allow_runtime_install: bool = False

    def run_name_for(self, preset: str) -> str:
        return self.run_name or f"{preset}-{self.stack}".lower()


class _Reader:
    """Reads raw values (text, as the Pulumi engine passes them), collecting every problem and
    leaving secret values out of the messages."""

    def __init__(self, values: Mapping[str, Any], secrets: AbstractSet[str]):
        self.values = values
        self.secrets = secrets
        self.problems: list[str] = []

    def named(self, key: str) -> str:
        """`key = value`, as a message starts."""
        shown = "[secret]" if key in self.secrets else maxtext_config.shown(self.values[key])
        return f"{key} = {shown}"

    def boolean(self, key: str) -> bool:
        value = maxtext_config.as_boolean(self.values[key])
        if value is None:
            self.problems.append(f"{self.named(key)} is not a boolean; use true or false")
            return bool(DEFAULTS[key])
        return value

    def integer(self, key: str, lowest: int, valid: str) -> int | None:
        """A whole number of at least `lowest`; `valid` says what to use instead."""
        value = self.values[key]
        if value is None:
            return None
        number = maxtext_config.as_integer(str(value))
        if number is None:
            self.problems.append(f"{self.named(key)} is not a whole number; {valid}")
        elif number < lowest:
            self.problems.append(f"{self.named(key)} is out of range; {valid}")
            return None
        return number

    def json_object(self, key: str) -> dict[str, Any]:
        value = self.values[key]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                self.problems.append(f"{self.named(key)} is not an object; set it in the stack file as a map")
                return {}
        if not isinstance(value, dict):
            shown = "[secret]" if key in self.secrets else maxtext_config.shown(value)
            self.problems.append(f"{key} = {shown} is not an object (a map of keys to values)")
            return {}
        return value


def _runtime_env_problems(runtime_env: Mapping[str, Any], *, allow_install: bool, secret: bool) -> list[str]:
    def named(key: str, value: Any) -> str:
        return f"runtimeEnv.{key} = {'[secret]' if secret else maxtext_config.shown(value)}"

    problems = []
    for key, value in runtime_env.items():
        if key in RUNTIME_INSTALLS:
            what = RUNTIME_INSTALLS[key]
        elif key == "working_dir" and "://" in str(value):
            what = "downloads and unpacks a remote archive"
        else:
            continue
        if not allow_install:
            problems.append(
                f"{named(key, value)} {what} at every job start, on every worker, before the first "
                f"step (gigabytes for MaxText's dependencies, paid in TPU time); {_OPT_IN}"
            )
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and not isinstance(env_vars, dict):
        problems.append(f"{named('env_vars', env_vars)} is not a map; give names and their values as text")
    elif env_vars:
        for name, value in env_vars.items():
            if not isinstance(value, str):
                problems.append(
                    f"{named(f'env_vars.{name}', value)} is not text; quote it (Ray sets environment variables as text)"
                )
    return problems


def parse_workload_settings(
    raw: Mapping[str, Any],
    *,
    stack: str,
    project_name: str,
    secret_settings: AbstractSet[str] = frozenset(),
) -> WorkloadSettings:
    """Validates raw stack config (`project_name:key` keys stripped to `key`); `secret_settings`
    names the settings set with `pulumi config set --secret`. Raises WorkloadSettingsError listing
    every problem."""
    values = {key: DEFAULTS[key] if raw.get(key) is None else raw[key] for key in DEFAULTS}
    reader = _Reader(values, secret_settings)
    problems = reader.problems
    for key in sorted(set(raw) - set(DEFAULTS)):
        problems.append(f"{project_name}:{key} is not a setting of this project; valid settings: {', '.join(DEFAULTS)}")

    for key, why in NOT_SECRET.items():
        if key in secret_settings and raw.get(key) is not None:
            problems.append(
                f"{key} = [secret] cannot be a secret: {why}; set it in clear "
                f"(pulumi config set {key} VALUE, without --secret)"
            )

    infra_stack, address = values["infraStack"], values["address"]
    # Where the job runs decides which presets fit; with both or neither set, that is the problem.
    local, on_infra = (address is not None and infra_stack is None), (infra_stack is not None and address is None)
    if (infra_stack is None) == (address is None):
        problems.append(
            "set exactly one of infraStack (the infra stack to train on, e.g. "
            "organization/maxtext-tpu-infra/dev) or address (a Ray dashboard URL such as "
            "http://127.0.0.1:8265)"
        )
    if address is not None and not str(address).startswith(("http://", "https://")):
        problems.append(f"{reader.named('address')} is not a URL; use http://HOST:8265")
    preset = values["preset"]
    chosen = PRESETS.get(preset) if preset is not None else None
    tpu_presets = ", ".join(p.name for p in PRESETS.values() if p.runs_on_tpu)
    cpu_presets = ", ".join(p.name for p in PRESETS.values() if not p.runs_on_tpu)
    if preset is not None and chosen is None:
        problems.append(f"{reader.named('preset')} is not valid; choose one of: {', '.join(PRESETS)}")
    if local and preset is None:
        problems.append(
            f"preset is required with address (the infra stack's preset is used otherwise); use {cpu_presets}"
        )
    if chosen is not None and local and chosen.runs_on_tpu:
        problems.append(
            f"{reader.named('preset')} trains on TPU {chosen.accelerator_name} slices, but address is a "
            f"Ray head on this machine, which has CPUs only; use {cpu_presets} with address, or set "
            "infraStack (instead of address) to train on the infra stack's TPU cluster"
        )
    if chosen is not None and on_infra and not chosen.runs_on_tpu:
        problems.append(
            f"{reader.named('preset')} runs on CPU through a local Ray head, not on the infra stack's "
            f"GKE TPU cluster; unset preset (the infra stack's is used) or choose a TPU preset: "
            f"{tpu_presets} (or set address instead of infraStack for a local run)"
        )
    run_name = values["runName"]
    if run_name is not None and "runName" not in secret_settings:
        problem = run_name_problem(str(run_name))
        if problem:
            problems.append(problem)

    elastic = reader.boolean("elastic")
    allow_install = reader.boolean("allowRuntimeInstall")
    min_slices = reader.integer(
        "minSlices", 1, "use 1 to the slice count (the fewest slices an elastic job keeps training on)"
    )
    max_failures = reader.integer(
        "maxFailures", 0, "use 0 or more (worker errors Ray Train recovers from; Spot preemptions are not counted)"
    )
    timeout = reader.integer("timeoutSeconds", 1, "use 1 or more seconds (default 21600, 6 hours)")
    assumed_mfu = maxtext_config.as_number(str(values["assumedMfu"]))
    if assumed_mfu is None or not 0 < assumed_mfu <= 1:
        problems.append(f"{reader.named('assumedMfu')} must be a fraction in (0, 1], for example 0.4")
    overrides = reader.json_object("maxtextOverrides")
    secret_overrides = "maxtextOverrides" in secret_settings
    problems += maxtext_config.key_problems(overrides)
    problems += maxtext_config.value_problems(overrides, secret=secret_overrides)
    runtime_env = reader.json_object("runtimeEnv")
    problems += _runtime_env_problems(runtime_env, allow_install=allow_install, secret="runtimeEnv" in secret_settings)
    if problems:
        raise WorkloadSettingsError(problems)
    assert min_slices is not None and timeout is not None and assumed_mfu is not None
    return WorkloadSettings(
        stack=stack,
        infra_stack=infra_stack,
        address=str(address).rstrip("/") if address else None,
        preset=preset,
        run_name=run_name,
        elastic=elastic,
        min_slices=min_slices,
        max_failures=max_failures,
        maxtext_overrides={str(k): str(v) for k, v in overrides.items()},
        runtime_env=runtime_env,
        timeout_seconds=timeout,
        checkpoint_root=str(values["checkpointRoot"]),
        assumed_mfu=assumed_mfu,
        allow_runtime_install=allow_install,
    )
