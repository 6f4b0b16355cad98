"""How long a worker group takes from being asked for to its first step, phase by phase, with the
persistent compilation cache empty, warm, after a kill, and off: the table in docs/training.md,
"Cold start: measured on this machine".

    .venv/bin/python -m benchmarks.cold_start

The tiny preset (`tiny-cpu`, with steps and checkpoint_period set so a kill can land mid-run; the
same settings for every run, so they compile the same train step) runs four times, one after the
other, on a loopback-only Ray head this benchmark starts from .venv-trainer and stops by its pid,
through the path `./scripts/smoke` takes (the local stack's settings, the job resolved and its
RayJob inputs built as `pulumi up` builds them, the RayJob provider's create):

1. cold: a fresh checkpoint root in a temp dir, so an empty compilation cache (the local stack's
   cache is `<checkpointRoot>/jax-cache`);
2. warm: the same job under a new run name (it trains from scratch) in the same root, so the
   same train step is in the cache;
3. restart: a fresh root of its own, maxFailures 1; once its first checkpoint has committed, its
   Ray Train worker is SIGKILLed by its pid and Ray Train starts a new worker group, which
   restores that checkpoint (the row is that group's start, the second of `start_phases`; the
   cache it finds is the one its first group wrote);
4. off: a fresh root, `compileCache` false.

Each row is the run's `start_phases` output as the job's log reader gives it, the cache result as
the trainer reported it; "to first step" is the sum of the row's phases (for a first group it
is the job's `seconds_to_first_step`, printed below the table as the job reports it). The checks
the issue asks for are computed and printed, not asserted; the exit status is non-zero only when
a run fails. Takes 4 to 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ray.util.state import list_actors

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.config.workload_settings import WorkloadSettingsError, parse_workload_settings
from domain.training.job import JobError, JobSpec
from domain.training.start_phases import PHASES, StartPhases
from domain.workload_settings import WorkloadSettings
from workloads import job_resolution
from workloads.jobs_api.errors import JobsApiError
from workloads.local_ray import LocalRayError, LocalRayHead
from workloads.ray_job import RayJobProvider
from workloads.ray_job.record import JobResult, RayJobError
from workloads.smoke import PROJECT, local_job_props, local_stack_config

PRESET = "tiny-cpu"
# Enough steps after the first checkpoint (step 0) that the kill lands before the job ends, and
# few checkpoints, so the runs stay short.
OVERRIDES = {"steps": "40", "checkpoint_period": "20"}
TIMEOUT_SECONDS = 900
CHECKPOINT_WAIT_SECONDS = 600
COLUMNS = ("queued", "worker start", "trainer start", "restore", "compile", "cache", "first step", "to first step")


class BenchmarkError(RuntimeError):
    """A run that did not do what its row needs."""


@dataclass(frozen=True)
class Row:
    label: str
    phases: StartPhases  # one group of the job's start_phases


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    root: str  # the checkpoint root's folder in the benchmark's temp dir
    compile_cache: bool = True
    kill: bool = False


COLD = Scenario("cold", "1. fresh run, empty cache", "shared")
WARM = Scenario("warm", "2. same job again, warm cache", "shared")
RESTART = Scenario("restart", "3. restart after a kill (its second group)", "killed", kill=True)
OFF = Scenario("off", "4. fresh run, cache off", "off", compile_cache=False)


@dataclass(frozen=True)
class Runs:
    """Each scenario's outputs, as the RayJob gave them."""

    cold: JobResult
    warm: JobResult
    restart: JobResult
    off: JobResult


@dataclass(frozen=True)
class Groups:
    """The worker group each scenario's row shows (the restart's second), what the checks read."""

    cold: StartPhases
    warm: StartPhases
    restart: StartPhases
    off: StartPhases


def to_first_step(phases: StartPhases) -> float | None:
    """The group's phases added up; None when it timed none."""
    known = [seconds for phase in PHASES if (seconds := phases.seconds(phase)) is not None]
    return round(sum(known), 1) if known else None


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(rows: Sequence[Row]) -> str:
    """The rows as a markdown table, seconds to one decimal; "-" where the log does not say."""
    lines = [
        "| run | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" if column == "cache" else "---:" for column in COLUMNS) + " |",
    ]
    for row in rows:
        cells = [_seconds(row.phases.seconds(phase)) for phase in PHASES]
        cells.insert(PHASES.index("compile") + 1, str(row.phases.compile_cache or "-"))
        cells.append(_seconds(to_first_step(row.phases)))
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checks(groups: Groups) -> list[str]:
    """What the issue asks of the runs, computed from their reported phases: the warm compile at
    least 50% shorter than the cold one, the warm run and the restart reporting `hit`, the run
    without a cache reporting `off`."""
    cold, warm = groups.cold.compile, groups.warm.compile
    if cold is None or warm is None:
        shorter = f"unknown (cold compile {_seconds(cold)} s, warm {_seconds(warm)} s)"
    else:
        saved = 100 * (1 - warm / cold) if cold > 0 else 0.0
        verdict = "yes" if cold > 0 and warm <= 0.5 * cold else "NO"
        shorter = f"{verdict}: {cold:.1f} s cold, {warm:.1f} s warm, {saved:.0f}% shorter"
    hits = "yes" if groups.warm.compile_cache == groups.restart.compile_cache == "hit" else "NO"
    off = "yes" if groups.off.compile_cache == "off" else "NO"
    return [
        f"- warm compile at least 50% shorter than cold: {shorter}",
        f"- warm run and restart report a cache hit: {hits} (warm {groups.warm.compile_cache}, restart "
        f"{groups.restart.compile_cache}; cold {groups.cold.compile_cache})",
        f"- cache-off run reports off: {off} ({groups.off.compile_cache})",
    ]


def machine() -> str:
    """The date, the core count and the CPU model (/proc/cpuinfo where there is one)."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def settings_for(address: str, root: Path, run_name: str, scenario: Scenario) -> WorkloadSettings:
    """The local stack's settings, as `./scripts/smoke` reads them, with this run's root, name,
    cache and failure budget."""
    config = local_stack_config()
    config.update(
        address=address,
        checkpointRoot=str(root),
        compileCache=scenario.compile_cache,
        maxtextOverrides=dict(OVERRIDES),
        timeoutSeconds=TIMEOUT_SECONDS,
    )
    if scenario.kill:
        config["maxFailures"] = 1  # the kill is charged to it
    settings = parse_workload_settings(config, stack="local", project_name=PROJECT)
    return replace(settings, run_name=run_name)


def committed_checkpoints(job: JobSpec) -> list[int]:
    """The steps Orbax has committed (it writes into a temporary directory, renamed to the step
    when it commits)."""
    directory = Path(job.run_directory) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


def train_worker_pid(address: str) -> int:
    """The pid of the one live Ray Train worker on the head at `address` (this benchmark's own)."""
    workers = list_actors(address=address, filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")])
    pids = [worker.pid for worker in workers if worker.pid is not None]
    if len(pids) != 1:
        raise BenchmarkError(f"expected one live Ray Train worker with a pid, found {len(pids)} of {len(workers)}")
    return pids[0]


def run_job(
    head: LocalRayHead, job: JobSpec, settings: WorkloadSettings, during: Callable[[Callable[[], bool]], None] | None
) -> JobResult:
    """The job through the RayJob provider's check and create, as the smoke run does; `during`
    runs while create waits, given a function that says whether create still waits. Returns the
    job's outputs; raises what create raised."""
    provider = RayJobProvider()
    checked = provider.check({}, local_job_props(job, settings, head.address))
    if checked.failures:
        raise BenchmarkError("; ".join(f"{failure.property}: {failure.reason}" for failure in checked.failures))
    # What create returned or raised, set by its thread.
    outs: dict[str, Any] | None = None
    create_error: Exception | None = None

    def create() -> None:
        nonlocal outs, create_error
        try:
            outs = provider.create(checked.inputs).outs
        except Exception as error:  # raised again in the caller's thread
            create_error = error

    thread = threading.Thread(target=create, name=f"create {job.run_name}", daemon=True)
    thread.start()
    during_error: Exception | None = None
    if during is not None:
        try:
            during(thread.is_alive)
        except Exception as error:  # the job's own failure, if any, says more
            during_error = error
    thread.join()
    if create_error is not None:
        raise create_error
    if during_error is not None:
        raise during_error
    if outs is None:
        raise BenchmarkError(f"run {job.run_name}: the provider returned no outputs")
    return JobResult.from_props(outs)


def kill_after_first_checkpoint(job: JobSpec, address: str) -> Callable[[Callable[[], bool]], None]:
    """SIGKILLs the job's Ray Train worker, by its pid, once the job's first checkpoint has
    committed (as tests/test_data_resume.py does): Ray Train then starts a new worker group,
    charged to maxFailures, which restores that checkpoint."""

    def kill(waiting: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CHECKPOINT_WAIT_SECONDS
        while not committed_checkpoints(job):
            if not waiting():
                return  # the job ended first: its outputs say how
            if time.monotonic() > deadline:
                raise BenchmarkError(f"run {job.run_name}: no checkpoint committed within {CHECKPOINT_WAIT_SECONDS} s")
            time.sleep(0.2)
        pid = train_worker_pid(address)
        os.kill(pid, signal.SIGKILL)
        print(
            f"checkpoint at step {committed_checkpoints(job)[0]} committed: SIGKILLed the Ray Train worker (pid {pid})",
            file=sys.stderr,
            flush=True,
        )

    return kill


def run_scenario(head: LocalRayHead, workdir: Path, scenario: Scenario) -> JobResult:
    """The scenario's job, run to its end."""
    run_name = f"cold-start-{scenario.key}-{os.getpid()}"
    settings = settings_for(head.address, workdir / scenario.root, run_name, scenario)
    job = job_resolution.resolve_local(settings, warn=lambda warning: print(f"warning: {warning}", file=sys.stderr))
    print(f"{scenario.label}: run {run_name}", file=sys.stderr, flush=True)
    during = kill_after_first_checkpoint(job, head.address) if scenario.kill else None
    started = time.monotonic()
    result = run_job(head, job, settings, during)
    print(f"{scenario.label}: {result.status} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return result


def run_scenarios(head: LocalRayHead, workdir: Path) -> Runs:
    """Each scenario's outputs, run one after the other (keyword arguments are evaluated in order)."""
    return Runs(
        cold=run_scenario(head, workdir, COLD),
        warm=run_scenario(head, workdir, WARM),
        restart=run_scenario(head, workdir, RESTART),
        off=run_scenario(head, workdir, OFF),
    )


def scenario_rows(scenario: Scenario, result: JobResult) -> list[Row]:
    """The scenario's rows, the last the group its checks read; raises BenchmarkError for a run
    whose outputs lack the group its row needs (a killed run that never restarted)."""
    starts = [StartPhases(**entry) for entry in result.start_phases or []]
    wanted = 2 if scenario.kill else 1
    if len(starts) < wanted:
        raise BenchmarkError(
            f"{scenario.label}: start_phases has {len(starts)} group(s), {wanted} needed (restarts {result.restarts})"
        )
    first = [Row("3a. the killed run's first group", starts[0])] if scenario.kill else []
    return [*first, Row(scenario.label, starts[wanted - 1])]


def rows(runs: Runs) -> tuple[list[Row], Groups]:
    """The table's rows, in the scenarios' order, and the group each scenario's checks read."""
    cold = scenario_rows(COLD, runs.cold)
    warm = scenario_rows(WARM, runs.warm)
    restart = scenario_rows(RESTART, runs.restart)
    off = scenario_rows(OFF, runs.off)
    groups = Groups(cold=cold[-1].phases, warm=warm[-1].phases, restart=restart[-1].phases, off=off[-1].phases)
    return [*cold, *warm, *restart, *off], groups


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    if os.environ.pop(COMPILE_CACHE_ENV, None) is not None:
        # The head inherits this process's environment; the cache must be each run's own root's.
        print(f"{COMPILE_CACHE_ENV} is set here: the benchmark's Ray head runs without it", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory(prefix="cold-start-") as workdir:
            with LocalRayHead() as head, head.client_environment():
                runs = run_scenarios(head, Path(workdir))
            found, groups = rows(runs)
    except (BenchmarkError, RayJobError, JobsApiError, LocalRayError, JobError, WorkloadSettingsError) as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1
    print(table(found))
    print()
    print(f"Measured {machine()}: `.venv/bin/python -m benchmarks.cold_start`, the {PRESET} preset with {OVERRIDES}.")
    first = ", ".join(
        f"{scenario.key} {_seconds(result.seconds_to_first_step)} s"
        for scenario, result in ((COLD, runs.cold), (WARM, runs.warm), (OFF, runs.off))
    )
    print(f"seconds_to_first_step as the jobs report it: {first}.")
    print("Checks (issue 33):")
    print("\n".join(checks(groups)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
