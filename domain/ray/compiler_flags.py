"""The flags the TPU compiler runs with in a job, declared once: what the RayCluster sets on every
TPU worker, and what a job's own `runtimeEnv` makes of it. The fit check compiles with exactly
these (domain/perf/fit_results.py), so its verdict is about the executable the job runs.

Two variables reach the compiler:

- `LIBTPU_INIT_ARGS`, libtpu's flags: the accelerator's list (`Accelerator.libtpu_init_args`,
  domain/tpu/tpu_catalog.py) on every TPU worker. MaxText's train and train_compile both add
  `--xla_tpu_spmd_rng_bit_generator_unsafe=true` to it in their own process, so both sides get it.
- `XLA_FLAGS`, XLA's own: the workers set none; a job may.

A job's `runtimeEnv.env_vars` apply over the worker's environment as Ray applies them
(`ray._private.utils.update_envs`): each one replaces the variable, after `$NAME` and `${NAME}` are
expanded to the worker's value (a `${NAME}` the worker lacks becomes empty, a bare `$NAME` stays
as written). So `"${LIBTPU_INIT_ARGS} --flag"` adds a flag, and `"--flag"` alone drops the
workers' flags. MaxText's own `compile_xla_flags` setting is a MaxText override: it is part of the
job's configuration, which the fit check compiles as is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.tpu.tpu_catalog import Accelerator

LIBTPU_INIT_ARGS = "LIBTPU_INIT_ARGS"
XLA_FLAGS = "XLA_FLAGS"

# os.path.expandvars' pattern (what Ray expands with), then Ray's removal of what is left in braces.
_REFERENCE = re.compile(r"\$(\w+|\{[^}]*\})")
_UNSET_IN_BRACES = re.compile(r"\$\{[A-Z0-9_]+\}")


@dataclass(frozen=True)
class CompilerFlags:
    """What the TPU compiler is given: libtpu's flags and XLA's, each a space-separated string."""

    libtpu_init_args: str
    xla_flags: str = ""

    def environment(self) -> dict[str, str]:
        """The variables that carry them (XLA_FLAGS only when there are any)."""
        env = {LIBTPU_INIT_ARGS: self.libtpu_init_args}
        if self.xla_flags:
            env[XLA_FLAGS] = self.xla_flags
        return env


def worker_flags(accelerator: Accelerator) -> CompilerFlags:
    """What every TPU worker of the RayCluster runs with."""
    return CompilerFlags(libtpu_init_args=accelerator.libtpu_init_args())


def worker_env(accelerator: Accelerator) -> list[dict[str, str]]:
    """The TPU worker container's `env` entries that carry the compiler's flags."""
    return [{"name": name, "value": value} for name, value in worker_flags(accelerator).environment().items()]


def _expanded(value: str, environ: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1).strip("{}")
        return environ.get(name, match.group(0))

    return _UNSET_IN_BRACES.sub("", _REFERENCE.sub(substitute, value))


def job_flags(accelerator: Accelerator, env_vars: Mapping[str, Any] | None = None) -> CompilerFlags:
    """What a job's processes on the TPU workers compile with: the workers' flags, with the job's
    `runtimeEnv.env_vars` applied over them as Ray applies them. A value that is not a string is
    left out (the settings check refuses it)."""
    workers = worker_flags(accelerator).environment()
    applied = dict(workers)
    for name in (LIBTPU_INIT_ARGS, XLA_FLAGS):
        value = (env_vars or {}).get(name)
        if isinstance(value, str):
            applied[name] = _expanded(value, workers)
    return CompilerFlags(
        libtpu_init_args=" ".join(applied.get(LIBTPU_INIT_ARGS, "").split()),
        xla_flags=" ".join(applied.get(XLA_FLAGS, "").split()),
    )


def added_to_workers(flags: CompilerFlags, accelerator: Accelerator) -> str | None:
    """The libtpu flags `flags` adds after the workers' own ('' when none), or None when it does
    not keep theirs first (a job's LIBTPU_INIT_ARGS that replaces them)."""
    workers = worker_flags(accelerator).libtpu_init_args.split()
    given = flags.libtpu_init_args.split()
    if given[: len(workers)] != workers:
        return None
    return " ".join(given[len(workers) :])
