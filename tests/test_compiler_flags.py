"""The fit check compiles what the job runs: the RayCluster's TPU workers and the fit check's
compile get the compiler's flags from one declaration (domain/ray/compiler_flags.py), and a job's
own runtimeEnv flags apply over them as Ray applies them, on both sides."""

from __future__ import annotations

import dataclasses

import pytest

from domain.perf import fit_results
from domain.ray import compiler_flags
from domain.ray.compiler_flags import CompilerFlags, added_to_workers, job_flags, worker_flags
from domain.resources import kuberay
from domain.tpu.tpu_catalog import ACCELERATORS, Accelerator
from domain.training.job import JobError, resolve_job
from tests.support.cli_settings import infra_settings
from tests.support.presets import TINY_COMPILE
from tests.support.workloads_program import job_of, recorded_fit_check, run_workloads
from trainer import fit_check

V6E = ACCELERATORS["v6e"]
WORKERS = V6E.libtpu_init_args()
COMPILER_VARIABLES = (compiler_flags.LIBTPU_INIT_ARGS, compiler_flags.XLA_FLAGS)


def cluster_flags(settings) -> dict[str, str]:
    """The compiler's variables on the RayCluster's TPU worker container."""
    cluster = kuberay.ray_cluster(settings, bucket_name="ckpt", image="img:1", compile_cache="gs://ckpt/jax-cache")
    (worker,) = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in worker["env"] if item["name"] in COMPILER_VARIABLES}


def compile_flags(job, monkeypatch, tmp_path, **kwargs) -> dict[str, str]:
    """The compiler's variables the fit check's compile of `job` is started with (its own dump
    flags left out: they do not change the executable)."""
    seen: dict[str, str] = {}

    def compile_(command, *, env, **_):
        seen.update(env)
        return "Finished train_compile.py successfully!\n", False

    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(fit_check, "compile_step", compile_)
    with pytest.raises(RuntimeError):  # the fake compile prints no memory analysis
        fit_check.run_fit_check(job, use_cache=False, **kwargs)
    flags = {name: seen[name] for name in COMPILER_VARIABLES if name in seen}
    xla = " ".join(word for word in flags.pop("XLA_FLAGS", "").split() if not word.startswith("--xla_dump"))
    return {**flags, **({"XLA_FLAGS": xla} if xla else {})}


def assert_same_flags(cluster: dict[str, str], compiled: dict[str, str]) -> None:
    assert cluster == compiled, f"the RayCluster's workers run with {cluster}, the fit check compiles with {compiled}"


def fit_check_job(slices=2, topology="4x4"):
    return resolve_job("llama3-8b", run_name="fit-check", checkpoint_root="/tmp/fit", slices=slices, topology=topology)


def stack(**raw):
    return infra_settings({"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b", **raw})


def test_the_cluster_and_the_fit_check_compile_with_the_same_flags(monkeypatch, tmp_path):
    cluster = cluster_flags(stack())
    assert cluster == {"LIBTPU_INIT_ARGS": WORKERS}
    assert_same_flags(cluster, compile_flags(fit_check_job(), monkeypatch, tmp_path))


def test_a_side_that_drifts_is_caught(monkeypatch, tmp_path):
    """The comparison fails when either side stops taking the one declaration."""
    compiled = compile_flags(fit_check_job(), monkeypatch, tmp_path)
    drifted = dataclasses.replace(V6E, libtpu_flags=(*V6E.libtpu_flags, "--xla_tpu_drifted=true"))
    monkeypatch.setattr(compiler_flags, "worker_flags", lambda accelerator: CompilerFlags(drifted.libtpu_init_args()))
    with pytest.raises(AssertionError, match="drifted"):
        assert_same_flags(cluster_flags(stack()), compiled)
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="--xla_tpu_x=1"):
        assert_same_flags(
            cluster_flags(stack()), compile_flags(fit_check_job(), monkeypatch, tmp_path, extra_flags="--xla_tpu_x=1")
        )


def test_one_declaration_changes_both_sides(monkeypatch, tmp_path):
    """A flag added to the accelerator's list reaches the workers and the compile alike."""
    monkeypatch.setattr(Accelerator, "libtpu_init_args", lambda self: "--xla_tpu_only_here=true")
    cluster = cluster_flags(stack())
    assert cluster == {"LIBTPU_INIT_ARGS": "--xla_tpu_only_here=true"}
    assert_same_flags(cluster, compile_flags(fit_check_job(), monkeypatch, tmp_path))


@pytest.mark.parametrize(
    "env_vars, libtpu, xla",
    [
        (None, WORKERS, ""),
        ({}, WORKERS, ""),
        ({"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --xla_tpu_x=1"}, f"{WORKERS} --xla_tpu_x=1", ""),
        ({"LIBTPU_INIT_ARGS": "$LIBTPU_INIT_ARGS  --xla_tpu_x=1"}, f"{WORKERS} --xla_tpu_x=1", ""),
        ({"LIBTPU_INIT_ARGS": "--xla_tpu_x=1"}, "--xla_tpu_x=1", ""),  # Ray replaces: the workers' flags are gone
        ({"XLA_FLAGS": "--xla_y=2"}, WORKERS, "--xla_y=2"),
        ({"XLA_FLAGS": "${XLA_FLAGS} --xla_y=2"}, WORKERS, "--xla_y=2"),  # the workers set none: empty
        ({"XLA_FLAGS": "$XLA_FLAGS --xla_y=2"}, WORKERS, "$XLA_FLAGS --xla_y=2"),  # as Ray leaves it
        ({"LIBTPU_INIT_ARGS": 3}, WORKERS, ""),  # not a string: refused by the settings check, not applied
        ({"OTHER": "x"}, WORKERS, ""),
    ],
)
def test_a_jobs_runtime_env_applies_over_the_workers_flags_as_ray_applies_it(env_vars, libtpu, xla):
    assert job_flags(V6E, env_vars) == CompilerFlags(libtpu_init_args=libtpu, xla_flags=xla)


def test_what_a_job_adds_to_the_workers_flags():
    assert added_to_workers(worker_flags(V6E), V6E) == ""
    assert (
        added_to_workers(job_flags(V6E, {"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --a=1 --b=2"}), V6E) == "--a=1 --b=2"
    )
    assert added_to_workers(job_flags(V6E, {"LIBTPU_INIT_ARGS": "--a=1"}), V6E) is None


def test_the_flags_are_part_of_the_fit_checks_key():
    job = fit_check_job()
    keys = {
        fit_results.cache_key(job, WORKERS),
        fit_results.cache_key(job, f"{WORKERS} --xla_tpu_x=1"),
        fit_results.cache_key(job, WORKERS, "--xla_y=2"),
    }
    assert len(keys) == 3
    # Without XLA flags the key is what it was before they were keyed: recorded results stay found.
    assert "xla_flags" not in fit_results.configuration(job, WORKERS)
    assert fit_results.configuration(job, WORKERS, "--xla_y=2")["xla_flags"] == "--xla_y=2"


def test_the_fit_check_caches_by_the_xla_flags_it_compiled_with(monkeypatch, tmp_path):
    """A result compiled without the job's XLA flags is not its answer."""
    job = fit_check_job()
    result = recorded_fit_check(job)
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    fit_results.result_path(job, WORKERS).write_text(result.to_json())
    assert fit_results.cached_result(job) is not None
    assert fit_results.cached_result(job, CompilerFlags(WORKERS, "--xla_y=2")) is None


def test_the_workloads_estimate_uses_the_fit_check_of_the_jobs_own_flags():
    """A job whose runtimeEnv adds a libtpu flag is predicted from a fit check compiled with it."""
    from domain.perf import fit_results as results

    added = {"env_vars": {"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --xla_tpu_x=1"}}
    _, inputs = run_workloads("dev", runtimeEnv=added)
    job = job_of(inputs["entrypoint"])
    recorded = recorded_fit_check(job)
    results.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Only the workers' flags were compiled: not this job's executable.
    results.result_path(job, WORKERS).write_text(recorded.to_json())
    assert run_workloads("dev", runtimeEnv=added)[0].outputs["estimateSource"] == "assumedMfu"
    assert run_workloads("dev")[0].outputs["estimateSource"] == "prediction"
    # Compiled with the job's flags (LIBTPU_INIT_ARGS=--xla_tpu_x=1 python -m trainer.fit_check ...).
    flags = f"{WORKERS} --xla_tpu_x=1"
    with_flag = dataclasses.replace(recorded, configuration=results.configuration(job, flags))
    results.result_path(job, flags).write_text(with_flag.to_json())
    assert run_workloads("dev", runtimeEnv=added)[0].outputs["estimateSource"] == "prediction"


def test_a_result_file_of_other_flags_is_refused_with_the_command_that_compiles_the_jobs(tmp_path):
    added = {"env_vars": {"LIBTPU_INIT_ARGS": "${LIBTPU_INIT_ARGS} --xla_tpu_x=1", "XLA_FLAGS": "--xla_y=2"}}
    _, inputs = run_workloads("dev")
    job = job_of(inputs["entrypoint"])
    (tmp_path / "result.json").write_text(recorded_fit_check(job).to_json())
    with pytest.raises(JobError) as caught:
        run_workloads("dev", runtimeEnv=added, fitCheckResult=str(tmp_path / "result.json"))
    said = str(caught.value)
    assert "they differ in libtpu_init_args, xla_flags" in said
    assert "LIBTPU_INIT_ARGS='--xla_tpu_x=1' XLA_FLAGS='--xla_y=2' python -m trainer.fit_check" in said
    replaced = {"env_vars": {"LIBTPU_INIT_ARGS": "--xla_tpu_x=1"}}
    with pytest.raises(JobError) as caught:
        run_workloads("dev", runtimeEnv=replaced, fitCheckResult=str(tmp_path / "result.json"))
    assert "replaces the workers' flags" in str(caught.value) and "'${LIBTPU_INIT_ARGS} ...'" in str(caught.value)


TINY = TINY_COMPILE


@pytest.mark.fitcheck
def test_the_declared_flags_reach_libtpu(monkeypatch, tmp_path):
    """A flag in the accelerator's declaration that libtpu does not know fails the real compile in
    libtpu's own words: what the workers are given is what the compiler reads."""
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(Accelerator, "libtpu_init_args", lambda self: "--xla_tpu_declared_but_unknown=true")
    job = resolve_job(
        "llama3-8b", run_name="fit-check", checkpoint_root="/tmp/fit", slices=1, topology="2x2", overrides=TINY
    )
    with pytest.raises(RuntimeError, match="Unknown command line flag 'xla_tpu_declared_but_unknown'"):
        fit_check.run_fit_check(job, use_cache=False)


@pytest.mark.fitcheck
def test_a_jobs_xla_flags_reach_xla(monkeypatch, tmp_path):
    """An XLA flag XLA does not know, given as the job's XLA_FLAGS, fails the real compile."""
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    job = resolve_job(
        "llama3-8b", run_name="fit-check", checkpoint_root="/tmp/fit", slices=1, topology="2x2", overrides=TINY
    )
    with pytest.raises(RuntimeError, match="the compiler failed: Unknown flag in XLA_FLAGS: --xla_job_flag_unknown=1"):
        fit_check.run_fit_check(job, use_cache=False, xla_flags="--xla_job_flag_unknown=1")
