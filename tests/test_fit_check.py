"""The fit check: MaxText's ahead-of-time compiler says whether a job fits TPU memory."""

from __future__ import annotations

import pytest

from domain.job import resolve_job
from domain.presets import PRESETS, PROCEDURE_OVERRIDES
from trainer import fit_check

SUCCESS_OUTPUT = """Jitting and compilation complete!
Finished train_compile.py successfully!
Cost analysis: {'flops': 194500000000000.0, 'bytes accessed': 1.0}
Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=100, argument_size_in_bytes=13228441600, output_size_in_bytes=13228441600, alias_size_in_bytes=13228441600, temp_size_in_bytes=17029824512, host_generated_code_size_in_bytes=0, host_argument_size_in_bytes=0, host_output_size_in_bytes=0, host_alias_size_in_bytes=0, host_temp_size_in_bytes=0)
"""
OOM_OUTPUT = """Traceback (most recent call last):
jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO temporaries (49.82G) exceeds available HBM (31.24G). HLO module: jit_train_step.
"""


def job(preset="llama3-70b", **overrides):
    return resolve_job(preset, run_name="fit-check", checkpoint_root="/tmp/fit", overrides=overrides)


def test_compile_targets_the_jobs_topology_and_slices():
    command = fit_check.compile_command(job(), fit_check.TRAINER_PYTHON)
    assert command[1:3] == ["-m", "maxtext.trainers.pre_train.train_compile"]
    assert "compile_topology=v6e-16" in command and "compile_topology_num_slices=2" in command
    assert "weight_dtype=bfloat16" in command


def test_parses_memory_and_flops():
    result = fit_check.parse_output(SUCCESS_OUTPUT, job())
    assert result.fits and result.chips == 32 and result.slice_type == "v6e-16"
    assert result.argument_gib == pytest.approx(12.32, abs=0.01)
    assert result.total_gib == pytest.approx(12.32 + 15.86, abs=0.01)  # arguments + temporaries
    assert result.headroom_percent == pytest.approx(9.8, abs=0.1)
    assert result.flops_per_step == 1.945e14
    assert "headroom: 9.8%" in result.report() and result.report().endswith("result: FITS")


def test_parses_the_compilers_out_of_memory_error():
    result = fit_check.parse_output(OOM_OUTPUT, job())
    assert not result.fits and "exceeds available HBM (31.24G)" in result.message
    assert result.report().endswith("result: DOES NOT FIT")


def test_neither_memory_nor_oom_is_an_error():
    with pytest.raises(RuntimeError, match="neither a memory analysis"):
        fit_check.parse_output("Segmentation fault", job())


def test_cache_key_follows_the_config_not_the_output_directory():
    first = fit_check.compile_command(job(), fit_check.TRAINER_PYTHON)
    moved = [p if not p.startswith("base_output_directory=") else "base_output_directory=/elsewhere" for p in first]
    assert fit_check.cache_key(first) == fit_check.cache_key(moved)
    other = fit_check.compile_command(job(per_device_batch_size=1), fit_check.TRAINER_PYTHON)
    assert fit_check.cache_key(first) != fit_check.cache_key(other)


@pytest.mark.parametrize(
    "argv", [["--preset", "llama3-70b", "lerning_rate=1"], ["--preset", "llama3-70b", "ici_tensor_parallelism=8"]]
)
def test_bad_overrides_exit_2_before_compiling(argv, capsys):
    assert fit_check.main(argv) == 2
    assert "fit check:" in capsys.readouterr().err


def test_malformed_override_is_a_usage_error():
    with pytest.raises(SystemExit) as caught:
        fit_check.main(["--preset", "llama3-8b", "steps"])
    assert caught.value.code == 2


@pytest.mark.fitcheck
@pytest.mark.parametrize("preset", [name for name, p in PRESETS.items() if p.runs_on_tpu])
def test_every_shipped_tpu_preset_fits_with_5_percent_headroom(preset, capsys):
    assert fit_check.main(["--preset", preset]) == 0
    report = capsys.readouterr().out
    headroom = float(report.split("headroom: ")[1].split("%")[0])
    assert headroom >= 5.0, report


@pytest.mark.fitcheck
def test_the_procedures_70b_job_does_not_fit(capsys):
    overrides = [f"{key}={value}" for key, value in PROCEDURE_OVERRIDES["llama3-70b"].items()]
    assert fit_check.main(["--preset", "llama3-70b", *overrides]) == 1
    report = capsys.readouterr().out
    assert "CompileTimeHbmOom" in report and "exceeds available HBM (31.24G)" in report
