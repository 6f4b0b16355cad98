"""The cold-start benchmark's table and checks, from start_phases as the RayJob gives them (the
benchmark itself runs four real jobs: `python -m benchmarks.cold_start`)."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from benchmarks.cold_start import BenchmarkError, Row, Runs, checks, rows, table
from domain.training.start_phases import PHASES, CacheResult, Phase, StartPhases
from workloads.ray_job.record import JobRequest, JobResult
from workloads.smoke import PROJECT

# The job one of the benchmark's runs submits to its local head, as the provider records it.
REQUEST = JobRequest(
    project=PROJECT,
    stack="local",
    entrypoint="python -m trainer.maxtext_multi_slice_trainer --job '{...}'",
    address="http://127.0.0.1:8265",
    checkpoint_dir="/tmp/cold-start-x/shared/cold-start-cold-1",
)


def phases(compile_seconds: float | None, cache: CacheResult | None, restore: float = 0.0) -> StartPhases:
    return StartPhases(
        queued=5.0,
        worker_start=4.0,
        trainer_start=12.0,
        restore=restore,
        compile=compile_seconds,
        compile_cache=cache,
        first_step=0.5,
    )


def _summed(starts: tuple[StartPhases, ...], which: tuple[Phase, ...] = PHASES) -> float:
    """The seconds of these groups' phases, added up (a phase the log does not give as none)."""
    return round(sum(start.seconds(phase) or 0.0 for start in starts for phase in which), 1)


def job_result(*starts: StartPhases) -> JobResult:
    """Every output the RayJob gives for one of the benchmark's runs: the tiny preset's 40 steps
    on synthetic data on a local head, SUCCEEDED after these worker groups' starts, each after
    the first a restart charged to maxFailures (the benchmark's kill)."""
    restarts = len(starts) - 1
    return JobResult(
        submission_id=REQUEST.submission_id(),
        status="SUCCEEDED",
        message="Job finished successfully.",
        start_time="2026-12-06T21:00:00+00:00",
        end_time="2026-12-06T21:01:30+00:00",
        duration_seconds=90.0,
        steps_completed=40,
        final_loss=4.812,
        diverged=False,
        tokens_per_second_per_device=1510.2,
        tflops_per_device=0.004,
        tokens_trained=40 * 256,
        tokens_truncated=None,  # synthetic data: no dataset, so none of its figures
        epochs=None,
        eval_loss=None,
        dataset_files=None,
        dataset_hash=None,
        restarts=restarts,
        preemptions=0,
        failures=restarts,
        steps_recomputed=5 * restarts,  # the steps since the checkpoint it restored
        seconds_lost_to_restarts=_summed(starts[1:]),
        seconds_queued=starts[0].queued,
        seconds_to_first_step=_summed(starts[:1]),
        start_phases=[asdict(start) for start in starts],
        seconds_lost_to_restarts_by_phase={phase: _summed(starts[1:], (phase,)) for phase in PHASES}
        if restarts
        else None,
        goodput_percent=41.5,
        seconds_waiting_for_data=0.3,
        event_lines_skipped=0,
        checkpoint_dir=REQUEST.checkpoint_dir,
        tensorboard_dir=None,  # MaxText writes TensorBoard logs on TPU workers only
        report_path=None,
        page_written=False,
        dashboard_url=REQUEST.address,
        input_digests=REQUEST.digests(),
    )


RUNS = Runs(
    cold=job_result(phases(5.5, "miss")),
    warm=job_result(phases(0.8, "hit")),
    restart=job_result(phases(6.1, "miss"), phases(0.8, "hit", restore=0.1)),
    off=job_result(phases(4.5, "off")),
)


def test_the_table_has_a_row_per_group_with_the_cache_beside_the_compile_and_the_phases_summed():
    found, groups = rows(RUNS)
    lines = table(found).splitlines()
    assert lines[0] == (
        "| run | queued | worker start | trainer start | restore | compile | cache | first step | to first step |"
    )
    assert len(lines) == 2 + 5  # the killed run's first group and its restart
    assert lines[2] == "| 1. fresh run, empty cache | 5.0 | 4.0 | 12.0 | 0.0 | 5.5 | miss | 0.5 | 27.0 |"
    assert (
        lines[5] == "| 3. restart after a kill (its second group) | 5.0 | 4.0 | 12.0 | 0.1 | 0.8 | hit | 0.5 | 22.4 |"
    )
    assert groups.restart.compile_cache == "hit"


def test_a_phase_the_log_does_not_give_is_a_dash():
    assert table([Row("r", StartPhases(queued=1.0))]).splitlines()[-1] == "| r | 1.0 | - | - | - | - | - | - | 1.0 |"


def test_the_checks_are_computed_from_what_the_runs_report():
    _, groups = rows(RUNS)
    assert checks(groups) == [
        "- warm compile at least 50% shorter than cold: yes: 5.5 s cold, 0.8 s warm, 85% shorter",
        "- warm run and restart report a cache hit: yes (warm hit, restart hit; cold miss)",
        "- cache-off run reports off: yes (off)",
    ]
    worse = replace(groups, warm=phases(3.0, "miss"), off=phases(4.5, "miss"))
    assert [line.split(":")[1].strip() for line in checks(worse)] == [
        "NO",
        "NO (warm miss, restart hit; cold miss)",
        "NO (miss)",
    ]


def test_a_killed_run_that_never_restarted_fails_the_benchmark():
    with pytest.raises(BenchmarkError, match=r"start_phases has 1 group\(s\), 2 needed \(restarts 0\)"):
        rows(replace(RUNS, restart=job_result(phases(6.1, "miss"))))
