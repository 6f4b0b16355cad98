"""What the workloads stack's runtimeEnv may hold: nothing Ray installs at every job start unless
allowRuntimeInstall says so, no environment variable that takes over what a setting owns (the
queue deadline, the compilation cache), JAX kept on the TPUs, no libtpu flag the job's TPUs
refuse. Rules on that one value, given what they weigh it against; domain/config/
workload_settings.py calls them among its checks of several settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domain.compile_cache import COMPILE_CACHE_ENV, COMPILE_CACHE_PREFIX, JAX_CACHE_ENV
from domain.ray.queueing import WORKER_GROUP_START_TIMEOUT_ENV
from domain.setting import shown

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

# Where the stack's compilation cache is, as messages say it.
CACHE_WHERE = (
    f"the checkpoint bucket's {COMPILE_CACHE_PREFIX}/ prefix on GKE, checkpointRoot/{COMPILE_CACHE_PREFIX} locally"
)


def runtime_env_problems(runtime_env: Mapping[str, Any], *, allow_install: bool, secret: bool) -> list[str]:
    def named(key: str, value: Any) -> str:
        return f"runtimeEnv.{key} = {'[secret]' if secret else shown(value)}"

    problems = []
    for key, value in runtime_env.items():
        what = _install_of(key, value)
        if what is not None and not allow_install:
            problems.append(
                f"{named(key, value)} {what} at every job start, on every worker, before the first "
                f"step (gigabytes for MaxText's dependencies, paid in TPU time); {_OPT_IN}"
            )
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and not isinstance(env_vars, dict):
        problems.append(f"{named('env_vars', env_vars)} is not a map; give names and their values as text")
    elif env_vars:
        for name, value in env_vars.items():
            if name == WORKER_GROUP_START_TIMEOUT_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} is the job's queue deadline, which queueTimeoutSeconds "
                    "sets; remove it from runtimeEnv and set queueTimeoutSeconds instead (`pulumi config set "
                    "queueTimeoutSeconds SECONDS`)"
                )
            elif name == JAX_CACHE_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} does nothing: MaxText sets JAX's compilation cache itself "
                    f"(its jax_cache_dir), which the job points at the stack's persistent cache ({CACHE_WHERE}); "
                    "remove it (`pulumi config set compileCache false` trains without a cache)"
                )
            elif name == COMPILE_CACHE_ENV:
                problems.append(
                    f"{named(f'env_vars.{name}', value)} would move the job's compilation cache, which is the "
                    f"cluster's ({CACHE_WHERE}): anyone who can write a cache can run code in the job; remove it "
                    "(`pulumi config set compileCache false` trains without a cache)"
                )
            elif not isinstance(value, str):
                problems.append(
                    f"{named(f'env_vars.{name}', value)} is not text; quote it (Ray sets environment variables as text)"
                )
    return problems


def _install_of(key: str, value: Any) -> str | None:
    """What a runtime env field installs at every job start, or None."""
    if key in RUNTIME_INSTALLS:
        return RUNTIME_INSTALLS[key]
    if key == "working_dir" and "://" in str(value):
        return "downloads and unpacks a remote archive"
    return None


def installs(runtime_env: Mapping[str, Any]) -> bool:
    return any(_install_of(key, value) is not None for key, value in runtime_env.items())


# JAX's platform choice: a list in JAX_PLATFORMS (in order of preference), one name in the older
# JAX_PLATFORM_NAME. Without tpu in it, JAX on a TPU host computes on the host's CPUs.
JAX_PLATFORM_VARIABLES = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")


def platform_problems(runtime_env: Mapping[str, Any], *, secret: bool) -> list[str]:
    """JAX told to use other platforms than the TPUs a GKE job pays for."""
    env_vars = runtime_env.get("env_vars")
    if not isinstance(env_vars, dict):
        return []  # refused on its own (runtime_env_problems)
    problems = []
    for name in JAX_PLATFORM_VARIABLES:
        value = env_vars.get(name)
        if isinstance(value, str) and "tpu" not in [part.strip().lower() for part in value.split(",")]:
            shown = "[secret]" if secret else repr(value)
            problems.append(
                f"runtimeEnv.env_vars.{name} = {shown} keeps JAX off the TPUs: the job would train on the hosts' "
                "CPUs while every chip of its slices sits idle, billed; remove it (JAX finds the TPUs itself), or "
                "list tpu first"
            )
    return problems


def libtpu_problems(runtime_env: Mapping[str, Any], accelerators: list[Any], *, secret: bool) -> list[str]:
    """Flags in the job's own LIBTPU_INIT_ARGS that every accelerator the job can run on refuses
    (domain/tpu/tpu_catalog.py): the job would fail at its first step."""
    env_vars = runtime_env.get("env_vars")
    init_args = env_vars.get("LIBTPU_INIT_ARGS") if isinstance(env_vars, dict) else None
    if not isinstance(init_args, str) or not accelerators:
        return []
    problems = []
    for flag, why in accelerators[0].refused_libtpu_flags(init_args):
        if all(flag in dict(other.refused_libtpu_flags(flag)) for other in accelerators[1:]):
            problems.append(
                f"runtimeEnv.env_vars.LIBTPU_INIT_ARGS has the flag {'[secret]' if secret else repr(flag)}: {why}; "
                f"remove that flag (the workers already run with the catalog's flags for TPU {accelerators[0].name})"
            )
    return problems
