"""Input pipeline speed: the arithmetic of what a preset's hosts need and the Grain workers that
takes (domain/perf/input_pipeline.py), exactly; and the benchmark (benchmarks/input_pipeline.py)
run on a tiny corpus through MaxText's own Grain pipeline in the trainer environment (`slow`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.input_pipeline import BEGIN, END, Measurement, measurement_table, need_table
from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.perf.fit_results import fit_check_job
from domain.perf.input_pipeline import HostDemand, per_worker_rate, tokens_per_second_per_host, workers_needed
from domain.training.job import resolve_job


def test_tokens_per_second_per_host_is_a_steps_tokens_over_its_time_and_hosts() -> None:
    assert tokens_per_second_per_host(524_288, 2.0, 8) == 32_768.0
    assert tokens_per_second_per_host(262_144, 8.0, 8) == 4_096.0
    assert tokens_per_second_per_host(1_000, 0.5, 1) == 2_000.0


@pytest.mark.parametrize(("tokens", "seconds", "hosts"), [(0, 1.0, 1), (1, 0.0, 1), (1, -1.0, 1), (1, 1.0, 0)])
def test_tokens_per_second_per_host_refuses_what_is_not_a_step(tokens: float, seconds: float, hosts: int) -> None:
    with pytest.raises(ValueError, match="must be above 0"):
        tokens_per_second_per_host(tokens, seconds, hosts)


def test_workers_needed_rounds_the_need_with_headroom_up_to_whole_workers() -> None:
    assert workers_needed(32_768, 65_536, headroom=2.0) == 1  # exactly one worker's rate
    assert workers_needed(32_769, 65_536, headroom=2.0) == 2  # a token over it
    assert workers_needed(32_768, 16_384, headroom=2.0) == 4
    assert workers_needed(100, 50, headroom=1.0) == 2
    assert workers_needed(101, 50, headroom=1.0) == 3
    assert workers_needed(1, 1_000_000) == 1  # the default headroom, 2


@pytest.mark.parametrize(("needed", "per_worker", "headroom"), [(0, 1, 2), (1, 0, 2), (1, 1, 0.5)])
def test_workers_needed_refuses_what_counts_no_workers(needed: float, per_worker: float, headroom: float) -> None:
    with pytest.raises(ValueError):
        workers_needed(needed, per_worker, headroom)


def test_per_worker_rate_is_the_lowest_rate_per_worker_process() -> None:
    # Worker count 0 is the training process itself: no worker to divide by.
    assert per_worker_rate({0: 700_000.0, 1: 600_000.0, 2: 1_000_000.0}) == 500_000.0
    assert per_worker_rate({1: 400_000.0, 2: 1_000_000.0}) == 400_000.0
    with pytest.raises(ValueError, match="one worker or more"):
        per_worker_rate({0: 700_000.0})


def test_a_presets_demand_counts_its_hosts_chips_and_tokens() -> None:
    job = fit_check_job("llama3-8b")  # 2 x v6e-16: 8 VMs of 4 chips
    demand = HostDemand.of("llama3-8b", job, step_seconds=2.0, tokens_per_chip=16_384.0)
    assert (demand.hosts, demand.chips, demand.tokens_per_step) == (8, 32, 524_288.0)
    assert demand.tokens_per_host_per_step == 65_536.0
    assert demand.tokens_per_second_per_host == 32_768.0


def test_a_cpu_job_has_no_hosts_to_feed() -> None:
    job = resolve_job("tiny-cpu", run_name="r", checkpoint_root="/tmp/r")
    with pytest.raises(ValueError, match="CPU job"):
        HostDemand.of("tiny-cpu", job, step_seconds=1.0, tokens_per_chip=64.0)


def test_need_table_divides_by_the_lowest_per_worker_rate_and_applies_the_headroom() -> None:
    def measured(workers: int, real_tokens: int) -> Measurement:
        return Measurement("llama3-8b", workers, 16, 4096, 1.0, 100, 10.0, real_tokens)

    # 100 batches of 16 x 4096 = 6,553,600 token slots in 10 s.
    measurements = [measured(0, 6_000_000), measured(1, 5_000_000), measured(2, 8_000_000)]
    demand = HostDemand.of("llama3-8b", fit_check_job("llama3-8b"), step_seconds=0.05, tokens_per_chip=16_384.0)
    table = need_table([demand], measurements, headroom=2.0)
    # 524,288 tokens / 0.05 s / 8 hosts = 1,310,720 per host; x2 over 400,000 per worker = 6.55.
    assert table[-1] == "| `llama3-8b` | 8 | 524,288 | 0.050 s | 1,310,720 | 400,000 | 7 |"
    assert measurement_table(measurements)[2] == "| `llama3-8b` (16 x 4096) | 0 | 1.0 s | 10.00 | 600,000 | 91.6% |"


@pytest.mark.slow
def test_the_benchmark_measures_maxtexts_grain_pipeline_at_each_worker_count(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    documents = [
        f"document {index}: " + "the quick brown fox jumps over the lazy dog. " * (5 + index % 40)
        for index in range(300)
    ]
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    command = [str(TRAINER_PYTHON), "-m", "benchmarks.input_pipeline", "--measure-only", "--preset", "llama3-8b"]
    command += ["--seconds", "1", "--workers", "0", "1", "2", "--corpus", str(corpus)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = done.stdout.split(BEGIN)[1].split(END)[0]
    rows = [line for line in report.splitlines() if line.startswith("| `llama3-8b`")]
    assert [int(row.split("|")[2]) for row in rows] == [0, 1, 2]
    for row in rows:
        assert "(16 x 4096)" in row  # the preset's batch on one host: 4 sequences x 4 chips
        assert float(row.split("|")[5].replace(",", "")) > 0, row
    assert "300 documents" in report
