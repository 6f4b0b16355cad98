"""The fit check: MaxText's ahead-of-time compiler says whether a job fits TPU memory."""

from __future__ import annotations

import concurrent.futures
import subprocess

import pytest

from domain import kuberay
from domain.job import resolve_job
from domain.presets import PRESETS, PROCEDURE_OVERRIDES
from domain.settings import parse_settings
from domain.tpu_catalog import ACCELERATORS
from trainer import fit_check

SUCCESS_OUTPUT = """Jitting and compilation complete!
Finished train_compile.py successfully!
Cost analysis: {'flops': 194500000000000.0, 'bytes accessed': 1.0}
Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=100, argument_size_in_bytes=13228441600, output_size_in_bytes=13228441600, alias_size_in_bytes=13228441600, temp_size_in_bytes=17029824512, host_generated_code_size_in_bytes=0, host_argument_size_in_bytes=0, host_output_size_in_bytes=0, host_alias_size_in_bytes=0, host_temp_size_in_bytes=0)
"""
# What libtpu 0.0.52 printed (cut) for the procedure's all-gather fusion flag on a v6e target.
REFUSED_FLAG_OUTPUT = """I1203 17:44:19 pyconfig.py:591] Config param compile_xla_flags:
Traceback (most recent call last):
  File "train_compile.py", line 1, in <module>
jax.errors.JaxRuntimeError: FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform ghostlite (variant: ), but it is not supported/recommended on platforms other than TPU v5e. Please disable it with xla_tpu_enable_async_collective_fusion=false
"""
UNKNOWN_FLAG_OUTPUT = "ERROR: Unknown command line flag 'xla_tpu_no_such_flag'\n"
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


def test_neither_memory_nor_an_error_is_an_error():
    with pytest.raises(RuntimeError, match="neither a memory analysis nor an error"):
        fit_check.parse_output("Segmentation fault", job())


@pytest.mark.parametrize(
    "output, said",
    [
        (REFUSED_FLAG_OUTPUT, "the compiler failed: FAILED_PRECONDITION: Continuation fusion for AllGather"),
        (UNKNOWN_FLAG_OUTPUT, "the compiler failed: Unknown command line flag 'xla_tpu_no_such_flag'"),
        ("Traceback:\nValueError: Keys ['x'] are overridden by both", "the compiler failed: ValueError: Keys ['x']"),
    ],
)
def test_another_compiler_failure_is_reported_in_its_own_words(output, said):
    with pytest.raises(RuntimeError) as caught:
        fit_check.parse_output(output, job())
    assert str(caught.value).startswith(said)


def test_the_compile_runs_with_exactly_the_workers_libtpu_flags(tmp_path, monkeypatch):
    """One definition (the accelerator's, in domain/tpu_catalog.py) feeds the RayCluster's TPU
    workers and the fit check's compile."""
    settings = parse_settings(
        {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b"},
        stack="dev",
        project_name="maxtext-tpu-infra",
    )
    cluster = kuberay.ray_cluster(settings, bucket_name="ckpt", image="img:1")
    (worker,) = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    workers_flags = {item["name"]: item["value"] for item in worker["env"]}["LIBTPU_INIT_ARGS"]
    assert workers_flags == ACCELERATORS["v6e"].libtpu_init_args() == fit_check.libtpu_flags(job())

    seen = {}

    def compile_(command, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(command, 0, SUCCESS_OUTPUT, "")

    monkeypatch.setattr(fit_check, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(fit_check.subprocess, "run", compile_)
    assert fit_check.run_fit_check(job()).fits
    assert seen["LIBTPU_INIT_ARGS"] == workers_flags
    assert seen["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "true"  # two fit checks may compile at once
    seen.clear()
    fit_check.run_fit_check(job(), use_cache=False, extra_flags="--xla_tpu_x=1")
    assert seen["LIBTPU_INIT_ARGS"] == f"{workers_flags} --xla_tpu_x=1"  # extra flags come last, so they win


def test_the_procedures_refused_flag_is_not_a_runtime_flag():
    assert "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true" not in ACCELERATORS["v6e"].libtpu_flags


def test_cache_key_follows_the_config_not_the_output_directory():
    first = fit_check.compile_command(job(), fit_check.TRAINER_PYTHON)
    moved = [p if not p.startswith("base_output_directory=") else "base_output_directory=/elsewhere" for p in first]
    flags = fit_check.libtpu_flags(job())
    assert fit_check.cache_key(first, flags) == fit_check.cache_key(moved, flags)
    other = fit_check.compile_command(job(per_device_batch_size=1), fit_check.TRAINER_PYTHON)
    assert fit_check.cache_key(first, flags) != fit_check.cache_key(other, flags)
    assert fit_check.cache_key(first, flags) != fit_check.cache_key(first, f"{flags} --xla_tpu_x=1")


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


# A one-layer, narrow Llama on a single 2x2 v6e slice: the same compiler path, in seconds.
TINY = {
    "override_model_config": "true",
    "base_num_decoder_layers": "1",
    "base_emb_dim": "256",
    "base_mlp_dim": "512",
    "base_num_query_heads": "4",
    "base_num_kv_heads": "4",
    "head_dim": "64",
    "vocab_size": "1024",
    "max_target_length": "128",
    "per_device_batch_size": "1",
    "ici_fsdp_parallelism": "4",
    "dcn_data_parallelism": "1",
}


def tiny_job():
    return resolve_job(
        "llama3-8b", run_name="fit-check", checkpoint_root="/tmp/fit", slices=1, topology="2x2", overrides=TINY
    )


@pytest.mark.fitcheck
def test_a_flag_libtpu_refuses_fails_in_the_compilers_own_words(capsys, monkeypatch):
    """The procedure's all-gather fusion flag: libtpu 0.0.52 refuses it for v6e, so a worker with
    it would fail at its first step; the fit check, given it, says so in the compiler's words."""
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true")
    argv = ["--preset", "llama3-8b", "--topology", "2x2", "--slices", "1", "--no-cache"]
    assert fit_check.main([*argv, *(f"{key}={value}" for key, value in TINY.items())]) == 2
    error = capsys.readouterr().err
    assert "the compiler failed: FAILED_PRECONDITION: Continuation fusion for AllGather is enabled" in error


@pytest.mark.fitcheck
def test_two_fit_checks_at_once_both_compile(tmp_path, monkeypatch):
    """libtpu's multi-process lock file made the second of two simultaneous compiles fail."""
    monkeypatch.setattr(fit_check, "CACHE_DIR", tmp_path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: fit_check.run_fit_check(tiny_job(), use_cache=False), range(2)))
    assert all(result.fits and result.total_gib is not None for result in results)


@pytest.mark.fitcheck
def test_the_procedures_70b_job_does_not_fit(capsys):
    overrides = [f"{key}={value}" for key, value in PROCEDURE_OVERRIDES["llama3-70b"].items()]
    assert fit_check.main(["--preset", "llama3-70b", *overrides]) == 1
    report = capsys.readouterr().out
    assert "CompileTimeHbmOom" in report and "exceeds available HBM (31.24G)" in report
