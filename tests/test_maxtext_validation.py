"""MaxText checks MaxText's settings: maxtextOverrides that MaxText's own config layer refuses
at job start are refused here, in the product's words, before anything is registered.

The real check runs once for the whole table (one process in the trainer environment, a cache
of its own), each row's answer is asserted on the parts that carry its meaning (the override, its
value, what would be valid, the kind of refusal) and one answer of each kind word for word; then
the cache answers without asking MaxText, and the workloads program and the smoke refuse with those
same answers before registering or starting anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain.config.workload_settings import parse_workload_settings
from domain.perf import maxtext_check, maxtext_validation
from domain.training.job import JobError, JobSpec, resolve_job
from tests.support.refusals import Bad, assert_names, refused_by_workloads
from tests.support.workloads_program import INFRA_OUTPUTS
from workloads import smoke
from workloads.job_resolution import local_checkpoint_root

REFUSED = "is refused by MaxText's config"
# Where the dev stack's and the local stack's jobs write: the table's jobs write there too, so
# the program and smoke tests below find the table's answers in its cache.
GKE_ROOT = INFRA_OUTPUTS["checkpointRoot"]
LOCAL_ROOT = local_checkpoint_root(
    parse_workload_settings(smoke.local_stack_config(), stack="local", project_name=smoke.PROJECT)
)

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)


@dataclass(frozen=True)
class Said:
    """What one refusal must name (tests/support/refusals.py `assert_names`): the override, its
    value as shown, what would be valid (MaxText's own reason, for its cross-field checks), and
    the phrase that tells the kind of refusal."""

    setting: str
    value: str
    fix: str
    phrase: str = REFUSED


@dataclass(frozen=True)
class Case:
    id: str
    overrides: dict[str, Any]
    said: list[Said]  # one per problem, in order
    preset: str = "llama3-8b"
    job: dict[str, Any] = field(default_factory=dict)  # resolve_job's other arguments

    @property
    def checkpoint_root(self) -> str:
        return GKE_ROOT if self.preset != "tiny-cpu" else LOCAL_ROOT


DATASET_TYPES = "use 'synthetic', 'hf', 'grain', 'tfds', 'c4_mlperf' or 'olmo_grain'"
OPT_TYPES = "use 'adamw', 'adam_pax', 'sgd' or 'muon'"
WEIGHT_DTYPES = "use 'bfloat16', 'float32', 'float16', 'float8_e4m3fn' or 'float8_e5m2'"
ON_32_CHIPS = f"{REFUSED} on 2 x v6e-16: "
EMPTY_BATCH = "gives a training batch of 0 sequences on"

CASES = [
    # Field types and bounds of MaxText's pydantic config model: refused at config time.
    Case("dataset-type", {"dataset_type": "parquet"}, [Said("maxtextOverrides.dataset_type", "'parquet'", DATASET_TYPES)]),
    Case("opt-type", {"opt_type": "adafactor"}, [Said("maxtextOverrides.opt_type", "'adafactor'", OPT_TYPES)]),
    Case("weight-dtype", {"weight_dtype": "bf16"}, [Said("maxtextOverrides.weight_dtype", "'bf16'", WEIGHT_DTYPES)]),
    Case(
        "model-name", {"model_name": "llama3-8"},
        [Said("maxtextOverrides.model_name", "'llama3-8'",
              "use one of the 87 values MaxText accepts for it; the closest: 'llama3-8b', 'llama3.1-8b', 'llama3-70b'")],
    ),
    Case(
        "warmup-above-one", {"warmup_steps_fraction": 1.5},
        [Said("maxtextOverrides.warmup_steps_fraction", "1.5", "use a value less than or equal to 1")],
    ),
    Case(
        "clipping-negative", {"gradient_clipping_threshold": -1},
        [Said("maxtextOverrides.gradient_clipping_threshold", "-1", "use a value greater than or equal to 0")],
    ),
    Case(
        "null-default-typed", {"weight_sparsity_n": "anything"},
        [Said("maxtextOverrides.weight_sparsity_n", "'anything'", "use a valid integer")],
    ),
    Case(
        "several-at-once", {"opt_type": "lion", "dataset_type": "csv"},
        [
            Said("maxtextOverrides.dataset_type", "'csv'", DATASET_TYPES),
            Said("maxtextOverrides.opt_type", "'lion'", OPT_TYPES),
        ],
    ),
    # MaxText's cross-field checks (its model validator, and pyconfig before it): the override is
    # the one MaxText accepts the job without, on the target MaxText was asked about.
    Case(
        "fractional-batch-vocab-tiles", {"per_device_batch_size": 0.3},
        [Said("maxtextOverrides.per_device_batch_size", "0.3",
              "should be divisible by the number of vocab tiles", ON_32_CHIPS)],
    ),
    Case(
        "model-config-overridden", {"base_emb_dim": 2048},
        [Said("maxtextOverrides.base_emb_dim", "2048", "unless setting `override_model_config=True`", ON_32_CHIPS)],
    ),
    Case(
        "zero-1-with-fsdp", {"shard_optimizer_over_data": True},
        [Said("maxtextOverrides.shard_optimizer_over_data", "true",
              "Set `ici_fsdp_parallelism` and `ici_fsdp_transpose_parallelism` (and their `dcn_` counterparts) to 1, "
              "or turn off `shard_optimizer_over_data`", ON_32_CHIPS)],
    ),
    # A fractional batch MaxText accepts but trains nothing with, on the job's real device count.
    Case(
        "empty-batch-on-cpu", {"per_device_batch_size": 0.5},
        [Said("maxtextOverrides.per_device_batch_size", "0.5", "use at least 1 (one sequence per step)",
              f"{EMPTY_BATCH} 1 CPU worker (1 device x per_device_batch_size")],
        preset="tiny-cpu",
    ),
    Case(
        "empty-batch-on-one-slice-of-an-elastic-job", {"per_device_batch_size": 0.03125},
        [Said("maxtextOverrides.per_device_batch_size", "0.03125", "use at least 0.0625 (one sequence per step)",
              f"{EMPTY_BATCH} 1 x v6e-16 (16 devices x per_device_batch_size")],
        job={"elastic": True, "min_slices": 1},
    ),
    Case(
        "weight-dtype-on-cpu", {"weight_dtype": "bf16"},
        [Said("maxtextOverrides.weight_dtype", "'bf16'", WEIGHT_DTYPES)],
        preset="tiny-cpu",
    ),
    # Accepted: the presets as shipped, and fractional batches the target's devices fill.
    Case("llama3-8b", {}, []),
    Case("tiny-cpu", {}, [], preset="tiny-cpu"),
    Case("half-batch-on-32-chips", {"per_device_batch_size": 0.5}, []),
    Case("one-sequence-on-32-chips", {"per_device_batch_size": 0.03125}, []),
    Case("tiny-cpu-override-model-config", {"base_emb_dim": 32}, [], preset="tiny-cpu"),
]  # fmt: skip

# The product's own wording in full, once per kind of refusal (the rows above name the parts).
WORDING = {
    "opt-type": [f"maxtextOverrides.opt_type = 'adafactor' {REFUSED}; {OPT_TYPES}"],
    "fractional-batch-vocab-tiles": [
        f"maxtextOverrides.per_device_batch_size = 0.3 {ON_32_CHIPS}Per device batch size times sequence length "
        "should be divisible by the number of vocab tiles."
    ],
    "empty-batch-on-one-slice-of-an-elastic-job": [
        f"maxtextOverrides.per_device_batch_size = 0.03125 {EMPTY_BATCH} 1 x v6e-16 (16 devices x "
        "per_device_batch_size, rounded down, as MaxText computes it): every step would train on nothing; use at "
        "least 0.0625 (one sequence per step)"
    ],
}


def case(case_id: str) -> Case:
    return next(case for case in CASES if case.id == case_id)


def answer(answered: Answered, case: Case) -> list[str]:
    """The problems the table's run of MaxText gives the case, in the product's words."""
    return maxtext_validation.problems(answered.asked[case.id], answered.answers[case.id], case.overrides)


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
    problems = answer(answered, case)
    assert len(problems) == len(case.said), problems
    for problem, said in zip(problems, case.said, strict=True):
        assert_names(problem, setting=said.setting, value=said.value, fix=said.fix, phrase=said.phrase)


@pytest.mark.parametrize("case_id", WORDING)
def test_each_kind_of_maxtext_refusal_reads_as_written(answered: Answered, case_id: str):
    assert answer(answered, case(case_id)) == WORDING[case_id]


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
    def not_asked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("MaxText was asked again for a cached answer")

    monkeypatch.setattr(maxtext_check, "_ask", not_asked)
    again = maxtext_check.run_requests(answered.flat)
    assert again == [answer for requests in answered.answers.values() for answer in requests]
    # The same answers, asked job by job (each request has an answer of its own).
    first = CASES[0]
    assert maxtext_check.maxtext_problems(job_of(first), first.overrides) == answer(answered, first)


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
    (problem,) = answer(answered, case(case_id))
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
    (problem,) = answer(answered, case("weight-dtype-on-cpu"))
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
