"""A worker group's start, phase by phase: from the moment it is asked for to its first step.

Every start of a job is cold in part: a first run, a restart after a preemption or a failure, a
slice scaled back from zero. Each pays, in turn:

- queued: the group asked for (the job's start; for a restart, the previous group's last step)
  until Ray has placed it and started its worker's process. On GKE, a slice scaled to zero boots
  and pulls the worker image before Ray can place anything on it, so node boot and image pull
  are in this phase there;
- worker_start: that process until the trainer's loop runs on it (Ray Train's worker set-up,
  `jax.distributed` on CPU workers);
- trainer_start: MaxText's set-up (its config, the mesh, the model, the optimizer state, the data
  pipeline), without the restore;
- restore: reading the latest checkpoint and the data position; zero on a fresh run;
- compile: the train step's compile (MaxText compiles it ahead of the first step), and whether the
  persistent compilation cache served it: hit, miss, or off; for a miss, why (`cache_why`);
- first_step: the first step, until MaxText logs it.

The names follow the badput kinds of Google's ml-goodput-measurement where they mean the same
(docs/training.md, "Cold start, phase by phase", lists where they differ). The trainer writes one
`phase` event as each of its own phases ends (trainer_start, restore, compile, first_step); the
job's reader (domain/training/job_log.py, domain/training/goodput.py) derives queued and
worker_start from the `attempt` event's times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Phase = Literal["queued", "worker_start", "trainer_start", "restore", "compile", "first_step"]
PHASES: tuple[Phase, ...] = ("queued", "worker_start", "trainer_start", "restore", "compile", "first_step")
# The phases the trainer times itself and writes as `phase` events.
TrainerPhase = Literal["trainer_start", "restore", "compile", "first_step"]
TRAINER_PHASES: tuple[TrainerPhase, ...] = ("trainer_start", "restore", "compile", "first_step")
# What the persistent compilation cache did for the train step: served it, missed (JAX compiled
# and wrote it), or the job runs without one.
CacheResult = Literal["hit", "miss", "off"]
CACHE_RESULTS: tuple[CacheResult, ...] = ("hit", "miss", "off")

# The module JAX names the train step's compile after (MaxText's jitted `train_step`).
TRAIN_STEP_MODULE = "jit_train_step"


def not_written(minimum_seconds: float, compile_seconds: float) -> str:
    """Why JAX did not write a compiled train step to the cache: it writes only programs that took
    at least `jax_persistent_cache_min_compile_time_secs` (1 s by default) to compile."""
    return (
        f"compiled in {compile_seconds:.2f} s, under JAX's {minimum_seconds:.2f} s minimum "
        "(jax_persistent_cache_min_compile_time_secs)"
    )


@dataclass(frozen=True)
class CacheLookup:
    """What the persistent cache did for one group's train step, as the trainer saw it: JAX's
    result and key (JAX logs the key with each lookup; None where it did not), the group's
    workers, and why JAX did not write what it compiled (None: written, or a hit)."""

    result: CacheResult
    key: str | None = None
    workers: int | None = None
    not_written: str | None = None


def _workers(count: int | None) -> str:
    return f"{count} worker{'' if count == 1 else 's'}"


def cache_why(lookup: CacheLookup, earlier: Sequence[CacheLookup]) -> str | None:
    """Why the cache missed this group's train step, from JAX's key against the job's earlier
    groups': the key holds the program, its flags, the JAX and libtpu versions and the devices, so
    a group of another size (an elastic job that shrank) compiles a program of its own once. None
    for a hit, a job without a cache, or a miss whose key JAX did not log."""
    if lookup.result != "miss" or lookup.key is None:
        return None
    keyed = [before for before in earlier if before.key is not None]
    same = [before for before in keyed if before.key == lookup.key]
    if same and same[-1].not_written is not None:
        why = f"an earlier start compiled this program and JAX did not write it: {same[-1].not_written}"
    elif same:
        why = "an earlier start compiled this program, but its entry was not found (emptied, expired or unreadable)"
    elif keyed and None not in (keyed[-1].workers, lookup.workers) and keyed[-1].workers != lookup.workers:
        why = f"a program of its own for {_workers(lookup.workers)} (the start before had {keyed[-1].workers})"
    elif keyed:
        why = "the program's key changed since the start before (its flags, versions or the program itself)"
    else:
        why = "no entry yet for this program, its flags, JAX and libtpu versions and devices"
    if lookup.not_written is not None:
        why += f"; not written ({lookup.not_written}), so the next start compiles it again"
    return why


@dataclass
class StartPhases:
    """One worker group's start: each phase's seconds, None where the log does not say (a phase
    the group never reached, or a trainer that did not time it)."""

    queued: float | None = None
    worker_start: float | None = None
    trainer_start: float | None = None
    restore: float | None = None
    compile: float | None = None
    compile_cache: CacheResult | None = None
    compile_cache_why: str | None = None  # for a miss: why (`cache_why`)
    first_step: float | None = None

    def seconds(self, phase: Phase) -> float | None:
        return getattr(self, phase)

    def line(self) -> str:
        """The phases reached, as a progress line shows them: `queued 3.1 s, worker_start ...`."""
        parts = []
        for phase in PHASES:
            seconds = self.seconds(phase)
            if seconds is None:
                continue
            cache = ""
            if phase == "compile" and self.compile_cache:
                why = f": {self.compile_cache_why}" if self.compile_cache_why else ""
                cache = f" (cache {self.compile_cache}{why})"
            parts.append(f"{phase} {seconds:.1f} s{cache}")
        return ", ".join(parts)
