"""MaxText checks MaxText's settings: maxtextOverrides that MaxText's own config layer refuses
at job start are refused here, in the product's words, before anything is registered.

The real check runs once for the whole table (one process in the trainer environment, a cache
of its own), each row's answer is asserted exactly; then the cache answers without a process,
and the workloads program and the smoke refuse before registering or starting anything.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain.config.workload_settings import parse_workload_settings
from domain.perf import maxtext_check, maxtext_validation
from domain.training.job import JobError, JobSpec, resolve_job
from tests.support.refusals import Bad, refused_by_workloads
from tests.support.workloads_program import INFRA_OUTPUTS
from workloads import smoke
from workloads.job_inputs import local_checkpoint_root

REFUSED = "is refused by MaxText's config"
# Where the dev stack's and the local stack's jobs write: the table's jobs write there too, so
# the program and smoke tests below find the table's answers in its cache.
GKE_ROOT = INFRA_OUTPUTS["checkpointRoot"]
LOCAL_ROOT = local_checkpoint_root(
    parse_workload_settings(smoke.local_stack_config(), stack="local", project_name=smoke.PROJECT)
)


@dataclass(frozen=True)
class Case:
    id: str
    overrides: dict[str, Any]
    problems: list[str]  # exactly, in order
    preset: str = "llama3-8b"
    job: dict[str, Any] = field(default_factory=dict)  # resolve_job's other arguments

    @property
    def checkpoint_root(self) -> str:
        return GKE_ROOT if self.preset != "tiny-cpu" else LOCAL_ROOT


CASES = [
    # Field types and bounds of MaxText's pydantic config model: refused at config time.
    Case(
        "dataset-type", {"dataset_type": "parquet"},
        [f"maxtextOverrides.dataset_type = 'parquet' {REFUSED}; use 'synthetic', 'hf', 'grain', 'tfds', "
         "'c4_mlperf' or 'olmo_grain'"],
    ),
    Case(
        "opt-type", {"opt_type": "adafactor"},
        [f"maxtextOverrides.opt_type = 'adafactor' {REFUSED}; use 'adamw', 'adam_pax', 'sgd' or 'muon'"],
    ),
    Case(
        "weight-dtype", {"weight_dtype": "bf16"},
        [f"maxtextOverrides.weight_dtype = 'bf16' {REFUSED}; use 'bfloat16', 'float32', 'float16', "
         "'float8_e4m3fn' or 'float8_e5m2'"],
    ),
    Case(
        "model-name", {"model_name": "llama3-8"},
        [f"maxtextOverrides.model_name = 'llama3-8' {REFUSED}; use one of the 87 values MaxText accepts for it; "
         "the closest: 'llama3-8b', 'llama3.1-8b', 'llama3-70b'"],
    ),
    Case(
        "warmup-above-one", {"warmup_steps_fraction": 1.5},
        [f"maxtextOverrides.warmup_steps_fraction = 1.5 {REFUSED}; use a value less than or equal to 1"],
    ),
    Case(
        "clipping-negative", {"gradient_clipping_threshold": -1},
        [f"maxtextOverrides.gradient_clipping_threshold = -1 {REFUSED}; use a value greater than or equal to 0"],
    ),
    Case(
        "null-default-typed", {"weight_sparsity_n": "anything"},
        [f"maxtextOverrides.weight_sparsity_n = 'anything' {REFUSED}; use a valid integer, unable to parse string "
         "as an integer"],
    ),
    Case(
        "several-at-once", {"opt_type": "lion", "dataset_type": "csv"},
        [
            f"maxtextOverrides.dataset_type = 'csv' {REFUSED}; use 'synthetic', 'hf', 'grain', 'tfds', "
            "'c4_mlperf' or 'olmo_grain'",
            f"maxtextOverrides.opt_type = 'lion' {REFUSED}; use 'adamw', 'adam_pax', 'sgd' or 'muon'",
        ],
    ),
    # MaxText's cross-field checks (its model validator, and pyconfig before it): the override is
    # the one MaxText accepts the job without.
    Case(
        "fractional-batch-vocab-tiles", {"per_device_batch_size": 0.3},
        [f"maxtextOverrides.per_device_batch_size = 0.3 {REFUSED} on 2 x v6e-16: Per device batch size times "
         "sequence length should be divisible by the number of vocab tiles."],
    ),
    Case(
        "model-config-overridden", {"base_emb_dim": 2048},
        [f"maxtextOverrides.base_emb_dim = 2048 {REFUSED} on 2 x v6e-16: Keys ['base_emb_dim'] are overridden by "
         "both model config and CLI/kwargs with different values.This is not allowed, unless setting "
         "`override_model_config=True`."],
    ),
    Case(
        "zero-1-with-fsdp", {"shard_optimizer_over_data": True},
        [f"maxtextOverrides.shard_optimizer_over_data = true {REFUSED} on 2 x v6e-16: `shard_optimizer_over_data` "
         "(Zero-1) cannot be combined with FSDP: the resolved fsdp/fsdp_transpose mesh axes have a combined size of "
         "16. Set `ici_fsdp_parallelism` and `ici_fsdp_transpose_parallelism` (and their `dcn_` counterparts) to 1, "
         "or turn off `shard_optimizer_over_data`."],
    ),
    # A fractional batch MaxText accepts but trains nothing with, on the job's real device count.
    Case(
        "empty-batch-on-cpu", {"per_device_batch_size": 0.5},
        ["maxtextOverrides.per_device_batch_size = 0.5 gives a training batch of 0 sequences on 1 CPU worker "
         "(1 device x per_device_batch_size, rounded down, as MaxText computes it): every step would train on "
         "nothing; use at least 1 (one sequence per step)"],
        preset="tiny-cpu",
    ),
    Case(
        "empty-batch-on-one-slice-of-an-elastic-job", {"per_device_batch_size": 0.03125},
        ["maxtextOverrides.per_device_batch_size = 0.03125 gives a training batch of 0 sequences on 1 x v6e-16 "
         "(16 devices x per_device_batch_size, rounded down, as MaxText computes it): every step would train on "
         "nothing; use at least 0.0625 (one sequence per step)"],
        job={"elastic": True, "min_slices": 1},
    ),
    Case(
        "weight-dtype-on-cpu", {"weight_dtype": "bf16"},
        [f"maxtextOverrides.weight_dtype = 'bf16' {REFUSED}; use 'bfloat16', 'float32', 'float16', "
         "'float8_e4m3fn' or 'float8_e5m2'"],
        preset="tiny-cpu",
    ),
    # Accepted: the presets as shipped, and fractional batches the target's devices fill.
    Case("llama3-8b", {}, []),
    Case("tiny-cpu", {}, [], preset="tiny-cpu"),
    Case("half-batch-on-32-chips", {"per_device_batch_size": 0.5}, []),
    Case("one-sequence-on-32-chips", {"per_device_batch_size": 0.03125}, []),
    Case("tiny-cpu-override-model-config", {"base_emb_dim": 32}, [], preset="tiny-cpu"),
]  # fmt: skip


def case(case_id: str) -> Case:
    return next(case for case in CASES if case.id == case_id)


def job_of(case: Case) -> JobSpec:
    return resolve_job(
        case.preset, run_name="check", checkpoint_root=case.checkpoint_root, overrides=case.overrides, **case.job
    )


@dataclass(frozen=True)
class Answered:
    asked: dict[str, list[dict[str, Any]]]  # case id -> its requests
    answers: dict[str, list[dict[str, Any]]]
    flat: list[dict[str, Any]]
    seconds: float


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> Any:
    """The whole table asked of MaxText at once, in one process, with an empty cache of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maxtext_check, "CACHE_DIR", tmp_path_factory.mktemp("maxtext-config"))
        asked = {case.id: maxtext_validation.requests(job_of(case), case.overrides) for case in CASES}
        flat = [request for requests in asked.values() for request in requests]
        started = time.monotonic()
        results = maxtext_check.run_requests(flat)
        seconds = time.monotonic() - started
        answers, position = {}, 0
        for case_id, requests in asked.items():
            answers[case_id] = results[position : position + len(requests)]
            position += len(requests)
        yield Answered(asked, answers, flat, seconds)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_maxtext_refuses_in_the_products_words(answered: Answered, case: Case):
    problems = maxtext_validation.problems(answered.asked[case.id], answered.answers[case.id], case.overrides)
    assert problems == case.problems


def test_each_target_the_job_can_run_on_is_asked(answered: Answered):
    targets = {case.id: [request["target"] for request in answered.asked[case.id]] for case in CASES}
    assert targets["llama3-8b"] == ["2 x v6e-16"]
    assert targets["tiny-cpu"] == ["1 CPU worker"]
    assert targets["empty-batch-on-one-slice-of-an-elastic-job"] == ["1 x v6e-16", "2 x v6e-16"]
    # MaxText counted the devices of each target itself.
    devices = [answer["derived"]["num_target_devices"] for answer in answered.answers["llama3-8b"]]
    assert devices == [32]
    assert [a["derived"]["num_target_devices"] for a in answered.answers["tiny-cpu"]] == [1]


def test_a_secret_override_stays_out_of_maxtexts_refusal(answered: Answered):
    for case_id in ("model-name", "fractional-batch-vocab-tiles", "empty-batch-on-cpu"):
        overrides = case(case_id).overrides
        problems = maxtext_validation.problems(
            answered.asked[case_id], answered.answers[case_id], overrides, secret=True
        )
        assert len(problems) == 1 and "maxtextOverrides." in problems[0] and "[secret]" in problems[0]
        value = str(next(iter(overrides.values())))
        assert value not in problems[0]


def test_a_second_ask_is_answered_by_the_cache_without_maxtext(answered: Answered, monkeypatch):
    def no_process(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the trainer environment was started for a cached answer")

    monkeypatch.setattr(subprocess, "run", no_process)
    started = time.monotonic()
    again = maxtext_check.run_requests(answered.flat)
    assert time.monotonic() - started < 1.0
    assert again == [answer for requests in answered.answers.values() for answer in requests]
    # The same answers, asked job by job (each request has an answer of its own).
    first = CASES[0]
    assert maxtext_check.maxtext_problems(job_of(first), first.overrides) == first.problems


def test_maxtext_that_cannot_be_asked_refuses_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(maxtext_check, "CACHE_DIR", tmp_path / "cache")
    with pytest.raises(JobError) as caught:
        maxtext_check.maxtext_problems(job_of(case("llama3-8b")), {}, python=tmp_path / "no-python")
    (problem,) = caught.value.problems
    assert problem.startswith("maxtextOverrides could not be checked against MaxText's own config rules (")
    assert problem.endswith("run ./scripts/setup to install the trainer environment, then retry")
    assert not (tmp_path / "cache").exists()  # nothing recorded as an answer


# Before anything is registered or started.


@pytest.mark.parametrize(
    ("stack", "overrides", "case_id"),
    [
        ("dev", {"opt_type": "adafactor"}, "opt-type"),
        ("dev", {"per_device_batch_size": 0.3}, "fractional-batch-vocab-tiles"),
        ("local", {"per_device_batch_size": 0.5}, "empty-batch-on-cpu"),
    ],
    ids=["gke-field", "gke-whole-config", "local-empty-batch"],
)
def test_the_workloads_program_registers_nothing_when_maxtext_refuses(answered, stack, overrides, case_id):
    (problem,) = case(case_id).problems
    error, monitor = refused_by_workloads(
        Bad("maxtext", {"maxtextOverrides": overrides}, problem, ("", "", ""), stack=stack)
    )
    assert type(error) is JobError
    assert error.problems == [problem]
    assert not monitor.registrations


def test_the_smoke_refuses_a_set_maxtext_refuses_before_starting_ray(answered, monkeypatch, capsys):
    def no_ray(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Ray head was asked for or started for a refused job")

    monkeypatch.setattr(smoke, "JobsApi", no_ray)
    monkeypatch.setattr(smoke, "LocalRayHead", no_ray)
    assert smoke.main(["--set", "weight_dtype=bf16"]) == 2
    (problem,) = case("weight-dtype-on-cpu").problems
    assert f"invalid training job:\n  - {problem}" in capsys.readouterr().err


def test_maxtext_is_asked_the_jobs_own_arguments_and_each_without_one_override():
    job = resolve_job(
        "llama3-8b", run_name="any-run", checkpoint_root="gs://b", overrides={"steps": 7, "opt_type": "sgd"}
    )
    (request,) = maxtext_validation.requests(job, {"steps": 7, "opt_type": "sgd"})
    assert request["target"] == "2 x v6e-16"
    arguments = request["args"]
    assert arguments[: len(job.maxtext_overrides)] == [f"{k}={v}" for k, v in job.maxtext_overrides.items()]
    assert arguments[len(job.maxtext_overrides) :] == [
        "run_name=config-check",  # any run name asks the same question
        "base_output_directory=gs://b",
        "skip_jax_distributed_system=true",
        "compile_topology=v6e-16",
        "compile_topology_num_slices=2",
    ]
    # Without an override the preset sets too, the preset's value; without one it does not, MaxText's.
    assert "steps=100" in request["without"]["steps"] and "steps=7" not in request["without"]["steps"]
    assert not any(arg.startswith("opt_type=") for arg in request["without"]["opt_type"])
    # The job's run name is not in the question: a new run of the same job is answered from the cache.
    other = resolve_job(
        "llama3-8b", run_name="other", checkpoint_root="gs://b", overrides={"steps": 7, "opt_type": "sgd"}
    )
    assert maxtext_validation.requests(other, {"steps": 7, "opt_type": "sgd"}) == [request]
