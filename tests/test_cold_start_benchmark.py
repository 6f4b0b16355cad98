"""The cold-start benchmark's table and checks, from start_phases as the RayJob gives them (the
benchmark itself runs four real jobs: `python -m benchmarks.cold_start`)."""

from __future__ import annotations

import pytest

from benchmarks.cold_start import Row, checks, rows, table


def phases(compile_seconds: float | None, cache: str | None, restore: float = 0.0) -> dict:
    return {
        "queued": 5.0,
        "worker_start": 4.0,
        "trainer_start": 12.0,
        "restore": restore,
        "compile": compile_seconds,
        "compile_cache": cache,
        "first_step": 0.5,
    }


OUTPUTS = {
    "cold": {"start_phases": [phases(5.5, "miss")]},
    "warm": {"start_phases": [phases(0.8, "hit")]},
    "restart": {"start_phases": [phases(6.1, "miss"), phases(0.8, "hit", restore=0.1)], "restarts": 1},
    "off": {"start_phases": [phases(4.5, "off")]},
}


def test_the_table_has_a_row_per_group_with_the_cache_beside_the_compile_and_the_phases_summed():
    found, by_key = rows(OUTPUTS)
    lines = table(found).splitlines()
    assert lines[0] == (
        "| run | queued | worker start | trainer start | restore | compile | cache | first step | to first step |"
    )
    assert len(lines) == 2 + 5  # the killed run's first group and its restart
    assert lines[2] == "| 1. fresh run, empty cache | 5.0 | 4.0 | 12.0 | 0.0 | 5.5 | miss | 0.5 | 27.0 |"
    assert (
        lines[5] == "| 3. restart after a kill (its second group) | 5.0 | 4.0 | 12.0 | 0.1 | 0.8 | hit | 0.5 | 22.4 |"
    )
    assert by_key["restart"]["compile_cache"] == "hit"


def test_a_phase_the_log_does_not_give_is_a_dash():
    assert table([Row("r", {"queued": 1.0})]).splitlines()[-1] == "| r | 1.0 | - | - | - | - | - | - | 1.0 |"


def test_the_checks_are_computed_from_what_the_runs_report():
    _, by_key = rows(OUTPUTS)
    assert checks(by_key) == [
        "- warm compile at least 50% shorter than cold: yes: 5.5 s cold, 0.8 s warm, 85% shorter",
        "- warm run and restart report a cache hit: yes (warm hit, restart hit; cold miss)",
        "- cache-off run reports off: yes (off)",
    ]
    worse = {**by_key, "warm": phases(3.0, "miss"), "off": phases(4.5, "miss")}
    assert [line.split(":")[1].strip() for line in checks(worse)] == [
        "NO",
        "NO (warm miss, restart hit; cold miss)",
        "NO (miss)",
    ]


def test_a_killed_run_that_never_restarted_fails_the_benchmark():
    from benchmarks.cold_start import BenchmarkError

    with pytest.raises(BenchmarkError, match="start_phases has 1 group"):
        rows({**OUTPUTS, "restart": {"start_phases": [phases(6.1, "miss")], "restarts": 0}})
