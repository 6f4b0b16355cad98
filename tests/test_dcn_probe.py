"""The DCN probe (trainer/dcn_probe.py): its fit recovers the constants that made the timings; bad
settings exit 2 naming the setting, the value and what is valid; and real runs on CPU, two JAX
processes standing in for two slices (started by hand, and as a Ray job on the local head),
print every field of the JSON line from sums that were checked, or fail loudly when a sum is wrong;
as a Ray job it also trains the CPU preset on one worker and on two and prints both steps.
Only a real TPU cluster measures DCN itself (docs/capacity.md)."""

from __future__ import annotations

import json
import math
import subprocess
import time
from types import SimpleNamespace

import pytest

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from domain.perf.multislice_runs import dcn_term
from trainer.dcn_probe import (
    Fit,
    MeasurementError,
    Point,
    PredictedSteps,
    ProbeError,
    ProbeResult,
    StepComparison,
    Unpredicted,
    bytes_sent_per_chip,
    finish,
    fit_all_reduce,
    main,
    predicted_steps,
    ring_steps,
    slice_groups,
    steady_seconds,
)
from workloads.local_ray import free_port

KEYS = {
    "generation",
    "slices",
    "achieved_bytes_per_second_per_chip",
    "line_bytes_per_second_per_chip",
    "achieved_fraction",
    "seconds_per_ring_step",
    "seconds_per_transfer",
    "model_achieved_bytes_per_second_per_chip",
    "model_seconds_per_transfer",
    "points",
}
STEP_KEYS = {"step_seconds_1", "step_seconds_2", "slowdown_percent", "extra_seconds"}
MEASURED_STEP_KEYS = STEP_KEYS | {"preset", "timed_steps", "not_predicted"}  # the CPU preset: no prediction
SIZES = [64 * 1024 * 4**k for k in range(7)]  # 64 KiB to 256 MiB per chip, the probe's default sweep


def synthetic(slices: int, seconds_per_ring_step: float, rate: float) -> list[Point]:
    return [
        Point(sent, ring_steps(slices) * seconds_per_ring_step + sent / rate)
        for sent in (bytes_sent_per_chip(size, slices) for size in SIZES)
    ]


@pytest.mark.parametrize("slices", [2, 3, 8])
def test_the_fit_recovers_the_time_per_ring_step_and_the_rate_that_made_the_timings(slices):
    fit = fit_all_reduce(synthetic(slices, 5e-5, 1.5e9), slices)

    assert fit.seconds_per_ring_step == pytest.approx(5e-5, rel=1e-9)
    assert fit.achieved_bytes_per_second_per_chip == pytest.approx(1.5e9, rel=1e-9)
    assert not fit.ring_step_clamped


def test_bytes_and_ring_steps_of_an_all_reduce_over_n_slices():
    assert bytes_sent_per_chip(1024, 2) == 1024  # 2 x 1024 x 1/2
    assert bytes_sent_per_chip(1024, 4) == 1536  # 2 x 1024 x 3/4
    assert ring_steps(2) == 2
    assert ring_steps(4) == 6


def test_a_negative_time_per_ring_step_is_clamped_to_zero_and_the_rate_refitted():
    points = [Point(point.bytes_per_chip, point.seconds - 1e-6) for point in synthetic(2, 0.0, 2e9)]

    fit = fit_all_reduce(points, 2)

    assert fit.ring_step_clamped
    assert fit.seconds_per_ring_step == 0.0
    assert fit.achieved_bytes_per_second_per_chip == pytest.approx(2e9, rel=0.05)


@pytest.mark.parametrize(
    ("points", "says"),
    [
        ([Point(1e6, 1e-3), Point(4e6, 1e-3), Point(16e6, 1e-3)], "do not grow with the bytes sent"),
        ([Point(1e6, 1e-3), Point(1e6, 2e-3)], "at least two sizes"),
    ],
)
def test_timings_no_rate_explains_are_refused(points, says):
    with pytest.raises(MeasurementError, match=says):
        fit_all_reduce(points, 2)


def v6e_result(steps: StepComparison | None = None) -> ProbeResult:
    """A probe's result on 2 slices of v6e-16: 8 hosts, two sizes timed."""
    return ProbeResult(
        generation="v6e",
        slices=2,
        chips_per_slice=16,
        processes=8,
        device_kind="TPU v6 lite",
        points=(Point(65536.0, 1e-4), Point(262144.0, 2e-4)),
        fit=Fit(seconds_per_ring_step=5e-5, achieved_bytes_per_second_per_chip=10e9),
        line_bytes_per_second_per_chip=12.5e9,
        tries=5,
        warmup=2,
        steps=steps,
    )


def test_the_json_line_carries_the_rate_the_fraction_of_the_line_rate_and_the_step_comparison():
    result = v6e_result(steps=StepComparison(3.0, 3.2))

    record = json.loads(result.to_json())

    assert set(record) == KEYS | STEP_KEYS
    assert record["achieved_fraction"] == pytest.approx(0.8)
    assert record["slowdown_percent"] == pytest.approx((3.0 / 3.2 - 1) * 100)
    assert record["extra_seconds"] == pytest.approx(0.2)
    assert record["points"] == [
        {"bytes_per_chip": 65536.0, "seconds": 1e-4},
        {"bytes_per_chip": 262144.0, "seconds": 2e-4},
    ]
    assert "0.800 of v6e's line rate" in result.report()
    # On a fixed slice count the per-transfer and per-ring-step latencies are one intercept.
    assert record["seconds_per_transfer"] == pytest.approx(2 * 5e-5)
    # Beside it, what the DCN term fitted on published runs says for 2 slices of v6e.
    term = dcn_term()
    assert term is not None
    assert record["model_achieved_bytes_per_second_per_chip"] == min(term.achieved_bytes_per_second, 12.5e9)
    assert record["model_seconds_per_transfer"] == pytest.approx(
        term.seconds_per_transfer + 2 * term.seconds_per_ring_step
    )
    assert "the DCN term (fitted on published runs) says:" in result.report()


def test_a_runs_steady_step_is_the_median_after_its_warm_up_and_a_run_with_none_left_fails():
    logged = [(0, 9.0), (1, 2.5), (2, 1.0), (3, 1.2), (4, 5.0), (5, 1.1)]

    assert steady_seconds(logged, warmup=2, slices=1) == pytest.approx(1.15)  # of 1.0, 1.2, 5.0, 1.1
    assert steady_seconds(logged, warmup=0, slices=1) == pytest.approx(1.85)
    with pytest.raises(MeasurementError, match=r"on 2 slice\(s\) logged 2 step\(s\), none after the 2 of its warm-up"):
        steady_seconds(logged[:2], warmup=2, slices=2)


def test_measured_steps_say_which_preset_and_how_many_steps_each_median_holds():
    measured = StepComparison(2.0, 2.5, preset="llama3-8b", timed_steps=10)

    assert measured.record() == {
        "step_seconds_1": 2.0,
        "step_seconds_2": 2.5,
        "slowdown_percent": pytest.approx(-20.0),
        "extra_seconds": 0.5,
        "preset": "llama3-8b",
        "timed_steps": 10,
    }
    assert "llama3-8b, measured: the median of 10 steps after the warm-up" in measured.report()
    assert "(given)" in StepComparison(2.0, 2.5).report()
    assert set(StepComparison(2.0, 2.5).record()) == STEP_KEYS


def test_a_presets_run_that_fails_still_prints_the_all_reduce_then_says_why_with_exit_1(capsys):
    result = v6e_result()

    def fails() -> StepComparison:
        raise MeasurementError("llama3-8b's run on 2 slice(s) failed: rank 3: RESOURCE_EXHAUSTED")

    assert finish(result, fails) == 1
    out, err = capsys.readouterr()
    assert set(json_line(out)) == KEYS  # the all-reduce's figures, without steps
    assert err.strip() == "dcn probe failed: llama3-8b's run on 2 slice(s) failed: rank 3: RESOURCE_EXHAUSTED"

    assert finish(result, lambda: StepComparison(2.0, 2.5, preset="llama3-8b", timed_steps=10)) == 0
    assert json_line(capsys.readouterr().out)["preset"] == "llama3-8b"


def test_a_shipped_presets_steps_are_printed_beside_the_speed_models_prediction_from_its_recorded_compile():
    from domain.perf.preset_layouts import shipped_compile

    predicted = predicted_steps("llama3-8b", "v6e", "4x4")

    # The recorded compile of the preset on 2 x v6e-16, through the current speed model: its step
    # on one slice (each chip's work unchanged) and on two.
    compiled = shipped_compile("llama3-8b")
    assert compiled is not None and compiled.slices == 2
    prediction = compiled.prediction("v6e")
    assert prediction is not None and prediction.multislice is not None
    assert predicted == PredictedSteps(
        seconds_1=prediction.multislice.one_slice_seconds,
        seconds_2=prediction.multislice.step_seconds,
        band=prediction.multislice.band.describe(),
    )
    assert predicted.seconds_1 < predicted.seconds_2
    measured = StepComparison(2.0, 2.5, preset="llama3-8b", timed_steps=10, predicted=predicted)
    record = measured.record()
    # Signed as the band is: predicted minus measured (published, on the published runs).
    assert record["slowdown_error_points"] == pytest.approx(predicted.slowdown_percent - (-20.0))
    assert record["predicted_slowdown_percent"] == pytest.approx((predicted.seconds_1 / predicted.seconds_2 - 1) * 100)
    assert record["predicted_band"].startswith("held-out error on 22 published runs with data parallelism")
    assert "predicted minus measured:" in measured.report()
    # FSDP across slices: the figure is there, and says it is uncalibrated.
    fsdp = predicted_steps("llama3-70b", "v6e", "4x4")
    assert isinstance(fsdp, PredictedSteps) and fsdp.band.startswith("uncalibrated: no published run with fsdp")


@pytest.mark.parametrize(
    ("preset", "generation", "topology", "says"),
    [
        ("tiny-cpu", "cpu", None, "tiny-cpu trains on CPU; the speed model predicts TPU steps"),
        ("llama3-8b", "v6e", "8x8", "recorded on its own slices (v6e 4x4), not v6e 8x8; the fit check of the preset"),
    ],
)
def test_where_no_compile_is_recorded_the_measured_steps_say_why_there_is_no_prediction(
    preset, generation, topology, says
):
    unpredicted = predicted_steps(preset, generation, topology)

    assert isinstance(unpredicted, Unpredicted) and says in unpredicted.reason
    measured = StepComparison(2.0, 2.5, preset=preset, timed_steps=10, predicted=unpredicted)
    assert measured.record()["not_predicted"] == unpredicted.reason
    assert f"the speed model's prediction: none: {unpredicted.reason}" in measured.report()


def test_the_line_rates_are_the_catalogs():
    from domain.tpu.tpu_catalog import accelerator

    assert accelerator("v6e").dcn_bytes_per_second_per_chip == 12.5e9  # 4 x 200 Gbps per 8-chip host
    assert accelerator("v5e").dcn_bytes_per_second_per_chip == 3.125e9  # 2 x 100 Gbps per 8-chip host
    assert accelerator("v5p").dcn_bytes_per_second_per_chip is None


BY_HAND = ["--cpu", "--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "0"]


@pytest.mark.parametrize(
    ("argv", "parts"),
    [
        (["--slices", "1", "--topology", "4x4"], ["--slices 1", "use 2 or more"]),
        (["--slices", "0", "--cpu"], ["--slices 0", "use 2 or more"]),
        (
            ["--slices", "2", "--cpu", "--step-seconds-1", "0", "--step-seconds-2", "3"],
            ["--step-seconds-1 0.0", "above 0"],
        ),
        (
            ["--slices", "2", "--cpu", "--step-seconds-1", "3", "--step-seconds-2", "-1.5"],
            ["--step-seconds-2 -1.5", "above 0"],
        ),
        (
            ["--slices", "2", "--cpu", "--step-seconds-1", "nan", "--step-seconds-2", "3"],
            ["--step-seconds-1 nan", "above 0"],
        ),
        (["--slices", "2", "--cpu", "--step-seconds-1", "3"], ["--step-seconds-1 alone", "give both"]),
        (["--slices", "2", "--topology", "3x3"], ["--topology 3x3", "TPU v6e", "4x4", "16x16"]),
        (["--slices", "2", "--generation", "v5p"], ["--topology None", "TPU v5p", "2x2x1"]),
        (["--slices", "2", "--cpu", "--topology", "4x4"], ["--topology 4x4", "a CPU run has none"]),
        (["--slices", "2", "--cpu", "--min-bytes", "6"], ["--min-bytes 6", "4-byte floats"]),
        (["--slices", "2", "--cpu", "--max-bytes", "65536"], ["--max-bytes 65536", "above --min-bytes (65536)"]),
        (["--slices", "2", "--cpu", "--tries", "0"], ["--tries 0", "1 or more"]),
        (["--slices", "3", *BY_HAND], ["--num-processes 2", "multiple of --slices (3)"]),
        (
            ["--slices", "2", *BY_HAND[:-1], "2"],
            ["--process-id 2", "0 to 1"],
        ),
        (["--slices", "2", "--cpu", "--coordinator", "127.0.0.1:1"], ["give all three"]),
        (
            ["--slices", "2", "--topology", "4x4", *BY_HAND[1:]],
            ["--coordinator 127.0.0.1:1", "CPU processes (--cpu)", "Ray job"],
        ),
        (
            ["--slices", "2", "--cpu", "--preset", "llama3-8b"],
            ["--preset llama3-8b", "trains on TPU v6e", "runs on CPU (--cpu)", "tiny-cpu"],
        ),
        (
            ["--slices", "2", "--topology", "4x4", "--preset", "tiny-cpu"],
            ["--preset tiny-cpu", "trains on CPU", "runs on TPU v6e", "llama3-8b, llama3-70b"],
        ),
        (
            ["--slices", "2", "--generation", "v5e", "--topology", "4x4", "--preset", "llama3-8b"],
            ["--preset llama3-8b", "trains on TPU v6e", "runs on TPU v5e", "there is none"],
        ),
        (
            # The preset's layout, resolved as the workloads stack resolves a job, on 4 chips.
            ["--slices", "2", "--topology", "2x2", "--preset", "llama3-8b"],
            ["--preset llama3-8b on 1 slice(s)", "--preset llama3-8b on 2 slice(s)", "ici_fsdp_parallelism=16"],
        ),
        (
            ["--slices", "2", "--cpu", "--preset", "tiny-cpu", "--preset-steps", "2"],
            ["--preset-steps 2", "more than --preset-warmup (2)"],
        ),
        (
            ["--slices", "2", "--cpu", "--preset", "tiny-cpu", "--preset-warmup", "-1"],
            ["--preset-warmup -1", "0 or more"],
        ),
        (
            ["--slices", "2", "--cpu", "--preset", "tiny-cpu", "--step-seconds-1", "3", "--step-seconds-2", "4"],
            ["--preset tiny-cpu with --step-seconds-1/--step-seconds-2", "not both"],
        ),
        (
            ["--slices", "2", "--preset", "tiny-cpu", *BY_HAND],
            ["--preset tiny-cpu", "only by a Ray job"],
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and value and value[0].startswith("--") else None,
)
def test_bad_settings_exit_2_naming_the_setting_the_value_and_what_is_valid(argv, parts, capsys):
    assert main(argv) == 2

    error = capsys.readouterr().err
    assert error.startswith("dcn probe: ")
    for part in parts:
        assert part in error


def tpu_device(id_: int, slice_index: int) -> SimpleNamespace:
    return SimpleNamespace(id=id_, slice_index=slice_index, process_index=id_ // 4)


def cpu_device(id_: int, process: int) -> SimpleNamespace:
    return SimpleNamespace(id=id_, process_index=process)


def test_tpu_devices_are_grouped_by_slice_and_cpu_devices_by_process():
    tpu = [tpu_device(id_, slice_index=1 - id_ // 8) for id_ in range(16)]
    cpu = [cpu_device(id_, process=id_) for id_ in range(4)]

    tpu_groups = slice_groups(tpu, 2, use_tpu=True)
    cpu_groups = slice_groups(cpu, 2, use_tpu=False)

    assert [[d.id for d in group] for group in tpu_groups] == [list(range(8, 16)), list(range(8))]
    assert [[d.process_index for d in group] for group in cpu_groups] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("devices", "slices", "use_tpu", "parts"),
    [
        (
            [cpu_device(id_, id_) for id_ in range(6)],
            4,
            False,
            ["--slices 4", "6 devices", "divides 6 (2, 3, 6)"],
        ),
        (
            [cpu_device(id_, id_ // 2) for id_ in range(6)],
            2,
            False,
            ["--slices 2", "3 CPU processes", "divides 3 (3)"],
        ),
        (
            [tpu_device(id_, 0) for id_ in range(8)],
            2,
            True,
            ["--slices 2", "on 1 slice(s)", "cluster of 2 slices or more"],
        ),
        (
            [tpu_device(id_, id_ // 4) for id_ in range(16)],
            2,
            True,
            ["--slices 2", "on 4 slice(s) (slice_index 0, 1, 2, 3)", "give --slices 4"],
        ),
        (
            [tpu_device(id_, 0 if id_ < 6 else 1) for id_ in range(8)],
            2,
            True,
            ["--slices 2", "different numbers of devices ([2, 6])"],
        ),
    ],
)
def test_devices_that_do_not_make_the_slices_are_refused(devices, slices, use_tpu, parts):
    with pytest.raises(ProbeError) as refused:
        slice_groups(devices, slices, use_tpu=use_tpu)

    for part in parts:
        assert part in str(refused.value)


# What a process is given to make the psum over `dcn` add 1 to every sum: the probe must notice.
WRONG_SUM = (
    "import sys, jax\n"
    "psum = jax.lax.psum\n"
    "jax.lax.psum = lambda x, axis: psum(x, axis) + 1\n"
    "from trainer.dcn_probe import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
# 1 to 16 MiB per chip: large enough that each size takes clearly longer than the last over
# loopback, even beside another CPU-bound process (64 KiB to 1 MiB did not, once).
SMALL = ["--min-bytes", str(2**20), "--max-bytes", str(2**24), "--tries", "3", "--warmup", "1"]


def by_hand(coordinator: str, rank: int) -> list[str]:
    return ["--coordinator", coordinator, "--num-processes", "2", "--process-id", str(rank)]


def run_two_processes(*args: str, code: str | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Two CPU processes of the probe started by hand, one stand-in slice each."""
    if not TRAINER_PYTHON.exists():
        pytest.skip(f"the trainer environment is not set up ({TRAINER_PYTHON}); run ./scripts/setup")
    coordinator = f"127.0.0.1:{free_port()}"
    program = ["-c", code] if code is not None else ["-m", "trainer.dcn_probe"]
    processes = [
        subprocess.Popen(
            [str(TRAINER_PYTHON), *program, "--cpu", "--slices", "2", *args, *by_hand(coordinator, rank)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    done = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=120)
            done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def json_line(stdout: str, last: bool = True) -> dict:
    """The one JSON line; the last line unless Ray's workers' logs may still come after it."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, stdout
    assert not last or stdout.rstrip().endswith(lines[0]), stdout
    return json.loads(lines[0])


def assert_measured(record: dict, sizes: int, steps: set[str] = frozenset()) -> None:
    assert set(record) == KEYS | steps
    assert record["generation"] == "cpu"
    assert record["slices"] == 2
    # No line rate is known for CPU processes, so no fraction of one.
    assert record["line_bytes_per_second_per_chip"] is None
    assert record["achieved_fraction"] is None
    assert record["model_achieved_bytes_per_second_per_chip"] is None  # nor the model's figures
    assert (
        math.isfinite(record["achieved_bytes_per_second_per_chip"]) and record["achieved_bytes_per_second_per_chip"] > 0
    )
    # The intercept may be clamped to 0 on a loaded machine; never negative.
    assert math.isfinite(record["seconds_per_ring_step"]) and record["seconds_per_ring_step"] >= 0
    assert [point["bytes_per_chip"] for point in record["points"]] == [2.0**20 * 4**k for k in range(sizes)]
    for point in record["points"]:
        assert set(point) == {"bytes_per_chip", "seconds"}
        assert math.isfinite(point["seconds"]) and point["seconds"] > 0


@pytest.mark.timed
def test_two_cpu_processes_standing_in_for_slices_print_every_field_from_checked_sums():
    rank0, rank1 = run_two_processes(*SMALL, "--step-seconds-1", "3.1", "--step-seconds-2", "3.25")

    assert rank0.returncode == 0, rank0.stderr
    assert rank1.returncode == 0, rank1.stderr
    record = json_line(rank0.stdout)
    assert_measured(record, sizes=3, steps=STEP_KEYS)
    assert record["step_seconds_1"] == 3.1 and record["step_seconds_2"] == 3.25
    assert record["slowdown_percent"] == pytest.approx((3.1 / 3.25 - 1) * 100)
    assert record["extra_seconds"] == pytest.approx(0.15)
    assert "each try's sums checked" in rank0.stdout
    assert "seconds per ring step:" in rank0.stdout
    assert "{" not in rank1.stdout  # only process 0 prints the result


@pytest.mark.timed
def test_a_wrong_sum_across_slices_fails_the_probe_loudly():
    processes = run_two_processes(*SMALL, code=WRONG_SUM)

    for process in processes:
        assert process.returncode == 1, process.stderr
        assert "the all-reduce across slices returned wrong sums" in process.stderr
        assert "the elements are 4 to 4, where each must be 1 + ... + 2 = 3" in process.stderr
        assert "{" not in process.stdout


@pytest.mark.slow
def test_as_a_ray_job_it_measures_the_all_reduce_then_the_presets_step_on_1_and_2_slices(local_ray_head, tmp_path):
    """The launcher users run on their cluster, as a Ray job on the local head: Ray Train's
    workers standing in for slices, joined as the CPU trainer's are, then the tiny preset trained
    by the trainers' own loop on 1 worker and on 2 (`slow`: about a minute)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(local_ray_head.address)
    preset = ["--preset", "tiny-cpu", "--preset-steps", "4", "--preset-warmup", "1"]
    job_id = client.submit_job(
        entrypoint="python -m trainer.dcn_probe --cpu --slices 2 " + " ".join([*SMALL, *preset]),
        runtime_env={"env_vars": {"TMPDIR": str(tmp_path)}},  # where the preset's runs write
    )
    status = client.get_job_status(job_id)
    deadline = time.monotonic() + 300
    while not status.is_terminal():
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            pytest.fail(f"job {job_id} still {status} after 300 s: {client.get_job_logs(job_id)}")
        time.sleep(0.5)
        status = client.get_job_status(job_id)
    logs = client.get_job_logs(job_id)

    assert status == JobStatus.SUCCEEDED, logs
    record = json_line(logs, last=False)
    assert_measured(record, sizes=3, steps=MEASURED_STEP_KEYS)
    assert "DCN probe: cpu, 2 slices of 1 chip(s) (cpu, 2 processes)" in logs
    assert "training tiny-cpu 4 steps on 1 slice(s)" in logs and "training tiny-cpu 4 steps on 2 slice(s)" in logs
    assert record["preset"] == "tiny-cpu"
    assert record["timed_steps"] == 3  # steps 1 to 3 of each run: step 0 compiles
    for seconds in (record["step_seconds_1"], record["step_seconds_2"]):
        assert math.isfinite(seconds) and seconds > 0
    assert record["slowdown_percent"] == pytest.approx((record["step_seconds_1"] / record["step_seconds_2"] - 1) * 100)
    assert "tiny-cpu, measured: the median of 3 steps after the warm-up on each" in logs
    assert record["not_predicted"] == "tiny-cpu trains on CPU; the speed model predicts TPU steps"
    assert list(tmp_path.glob("dcn-probe-runs-*")) == []  # the runs' directory is removed


class WorkerFailed(Exception):
    """Ray Train's error when workers fail: each rank's exception, as Ray returns it (the
    worker's own exception as its `cause`)."""

    def __init__(self, failure: BaseException):
        super().__init__("worker group failed")
        self.worker_failures = {0: failure}


def test_a_presets_failed_run_is_named_with_each_failed_workers_first_line():
    from trainer.dcn_probe import run_failed

    workers = run_failed("llama3-8b", 2, WorkerFailed(RuntimeError("RESOURCE_EXHAUSTED: HBM\n  traceback")))
    assert str(workers) == "llama3-8b's run on 2 slice(s) failed: rank 0: RESOURCE_EXHAUSTED: HBM"
    controller = run_failed("llama3-8b", 1, TimeoutError("no slice reserved\nmore"))
    assert str(controller) == "llama3-8b's run on 1 slice(s) failed: TimeoutError: no slice reserved"


@pytest.mark.parametrize(
    ("cause", "code", "prefix"),
    [
        (ProbeError("--slices 3: the job's devices are on 2 slice(s)"), 2, "dcn probe: --slices 3"),
        (MeasurementError("the all-reduce across slices returned wrong sums"), 1, "dcn probe failed: the all-reduce"),
        (RuntimeError("TPU init failed"), 1, "dcn probe failed: WorkerFailed: worker group failed"),
    ],
)
def test_a_workers_failure_on_ray_says_why_and_exits_2_for_a_setting_the_cluster_does_not_fit(
    cause, code, prefix, capsys
):
    from trainer.dcn_probe import _failed

    ray_error = RuntimeError("traceback of the worker")
    ray_error.cause = cause  # type: ignore[attr-defined]

    assert _failed(WorkerFailed(ray_error)) == code
    assert capsys.readouterr().err.startswith(prefix)
