"""Resolving a job: presets, user overrides and every check that must happen before submission."""

import hashlib
import json

import pytest

from domain.config.settings import SettingsError
from domain.config.workload_settings import WorkloadSettingsError
from domain.stack_identity import StackIdentity
from domain.tpu.tpu_catalog import ACCELERATORS
from domain.training.job import (
    MAX_FAILURES,
    MIN_SLICES,
    RUN_NAME_MAX,
    RUN_NAME_RULE,
    UNLIMITED,
    JobError,
    JobSpec,
    default_run_name,
    min_slices_rule,
    preset_maxtext_overrides,
    resolve_job,
    run_name_is_valid,
    topology_problem,
)
from domain.training.presets import PRESETS, maxtext_overrides
from tests.support.cli_settings import infra_settings, workload_settings
from tests.support.presets import ALL_PRESETS
from tests.support.refusals import assert_one_problem


def resolve(preset="llama3-8b", **kwargs):
    kwargs.setdefault("run_name", "run-1")
    kwargs.setdefault("checkpoint_root", "/data/")
    return resolve_job(preset, **kwargs)


def problems(**kwargs) -> list[str]:
    with pytest.raises(JobError) as caught:
        resolve(**kwargs)
    return caught.value.problems


def test_procedure_8b_job():
    job = resolve()
    assert (job.use_tpu, job.accelerator_type, job.topology) == (True, "TPU-V6E", "4x4")
    assert (job.slices, job.hosts_per_slice, job.chips_per_host, job.num_workers) == (2, 4, 4, 8)
    assert job.max_failures == 0
    assert job.maxtext_args()[:2] == ["run_name=run-1", "base_output_directory=/data/"]
    assert "per_device_batch_size=4" in job.maxtext_args()
    assert job.run_directory == "/data/run-1"


def test_user_overrides_win_over_the_preset():
    job = resolve(overrides={"per_device_batch_size": 2, "learning_rate": "1e-4"})
    assert job.maxtext_overrides["per_device_batch_size"] == "2"
    assert job.maxtext_overrides["learning_rate"] == "1e-4"


def test_elastic_job_spans_one_to_all_slices_and_lets_maxtext_size_dcn():
    job = resolve("llama3-70b", elastic=True, min_slices=1)
    assert job.num_workers == (4, 8)
    assert job.max_failures == 3
    assert job.maxtext_overrides["dcn_fsdp_parallelism"] == "-1"


def test_preemptions_have_a_budget_of_their_own_unlimited_unless_set():
    assert resolve().max_preemptions == resolve("llama3-70b", elastic=True).max_preemptions == UNLIMITED
    job = resolve("llama3-70b", elastic=True, max_failures=1, max_preemptions=0)
    assert (job.max_failures, job.max_preemptions) == (1, 0)


def test_cpu_job_has_one_worker():
    job = resolve("tiny-cpu", checkpoint_root="/tmp/out")
    assert (job.use_tpu, job.num_workers, job.topology) == (False, 1, None)


def test_a_worker_holds_all_the_chips_of_its_tpu_vm_or_one_cpu():
    """What the trainer asks Ray for per worker, and what the workloads stack counts the slices
    that are up by; not part of the job's JSON (so no job id changed with it)."""
    assert resolve().resources_per_worker == {"TPU": 4.0}
    assert resolve("tiny-cpu", checkpoint_root="/tmp/out").resources_per_worker == {"CPU": 1.0}
    assert "resources_per_worker" not in json.loads(resolve().to_json())


def test_json_round_trip():
    job = resolve("llama3-70b", slices=4, elastic=True, min_slices=2, max_failures=5, max_preemptions=9)
    assert JobSpec.from_json(job.to_json()) == job


def test_the_compilation_cache_is_the_clusters_or_beside_the_runs_and_its_default_changes_no_command():
    job = resolve("tiny-cpu", checkpoint_root="/home/me/.runs/")
    # A job with the cache on (the default) has the command it had before the cache existed, so
    # its submission id too: a new id would run a finished job again.
    assert "compile_cache" not in json.loads(job.to_json())
    assert job.compile_cache_dir(None) == "/home/me/.runs/jax-cache"
    assert job.compile_cache_dir("gs://ckpt/jax-cache") == "gs://ckpt/jax-cache"
    off = resolve("tiny-cpu", compile_cache=False)
    assert json.loads(off.to_json())["compile_cache"] is False
    assert JobSpec.from_json(off.to_json()) == off
    assert off.compile_cache_dir("gs://ckpt/jax-cache") is None


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (
            {"overrides": {"lerning_rate": 1}},
            "'lerning_rate' is not a MaxText setting (not in base.yml); did you mean 'learning_rate'?",
        ),
        (
            {"overrides": {"run_name": "x"}},
            "MaxText key 'run_name' cannot be overridden: it is set from the job's run name",
        ),
        (
            {"overrides": {"base_output_directory": "gs://x"}},
            "cannot be overridden: it is set from the stack's checkpoint root",
        ),
        (
            {"overrides": {"ici_tensor_parallelism": 4}},
            "ICI parallelism within a slice of 16 chips: ici_fsdp_parallelism=16, ici_tensor_parallelism=4 multiply to 64, but there are 16",
        ),
        ({"overrides": {"ici_fsdp_parallelism": -1, "ici_tensor_parallelism": -1}}, "only one axis may be -1"),
        (
            {"overrides": {"dcn_data_parallelism": 3}},
            "DCN parallelism across 2 slice(s): dcn_data_parallelism=3 multiply to 3, but there are 2",
        ),
        (
            {"overrides": {"ici_data_parallelism": "two"}},
            "maxtextOverrides.ici_data_parallelism = 'two' is not an integer (MaxText's base.yml: ici_data_parallelism: 1)",
        ),
        (
            {"overrides": {"ici_data_parallelism": 0}},
            "maxtextOverrides.ici_data_parallelism = 0 is out of range; use 1 or more, or -1",
        ),
        ({"overrides": {"steps": 0}}, "maxtextOverrides.steps = 0 is out of range; use 1 or more"),
        ({"run_name": "My Run"}, "runName = 'My Run' is not valid"),
        ({"checkpoint_root": ""}, "the checkpoint root is empty"),
        ({"topology": "3x3"}, "topology = '3x3' is not a topology of TPU v6e; valid topologies: 1x1, 2x2"),
        ({"slices": 0}, "slices = 0 is out of range; use 1 or more"),
        ({"elastic": True, "min_slices": 3}, "minSlices = 3 is out of range; use 1 to 2 (the slice count"),
        ({"min_slices": 0}, "minSlices = 0 is out of range; use 1 to 2"),
        ({"max_failures": -1}, "maxFailures = -1 is out of range; use 0 or more"),
        ({"max_preemptions": -1}, "maxPreemptions = -1 is out of range; use 0 or more, or leave it unset for no limit"),
    ],
)
def test_bad_jobs_are_refused_before_submission(kwargs, expected):
    found = problems(**kwargs)
    assert any(expected in problem for problem in found), found


def test_unknown_preset():
    assert problems(preset="llama3-405b") == [f"preset = 'llama3-405b' is not valid; choose one of: {ALL_PRESETS}"]


def test_elastic_70b_fits_both_the_smallest_and_the_largest_footprint():
    job = resolve("llama3-70b", slices=4, elastic=True, min_slices=1)
    assert job.num_workers == (4, 16)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_passes_the_typed_checks_it_imposes_on_users(name):
    from domain.training.maxtext_config import key_problems, value_problems

    overrides = maxtext_overrides(PRESETS[name], PRESETS[name].slices)
    assert key_problems(overrides) == [] and value_problems(overrides) == []


def test_a_job_is_its_presets_settings_plus_the_users():
    # What MaxText's config check compares an override against (domain/training/maxtext_validation.py).
    for elastic in (False, True):
        job = resolve_job("llama3-8b", run_name="r", checkpoint_root="/c", elastic=elastic, overrides={"steps": 5})
        baseline = preset_maxtext_overrides("llama3-8b", slices=2, elastic=elastic)
        assert dict(job.maxtext_overrides) == {**baseline, "steps": "5"}
    assert preset_maxtext_overrides("llama3-8b", slices=2, elastic=True)["dcn_data_parallelism"] == "-1"
    assert preset_maxtext_overrides("llama3-8b", slices=2, elastic=False)["dcn_data_parallelism"] == "2"


# ------------------------------------------------------------------ the default run name (issue 19)
ACME_DEV = StackIdentity(organization="acme", project="maxtext-tpu-workloads", stack="dev")


def test_the_default_run_name_is_the_preset_the_stack_and_a_digest_of_the_stack_named_in_full():
    assert default_run_name("llama3-8b", ACME_DEV) == "llama3-8b-dev-b0d851"
    # The digest: SHA-256 of the identity's canonical JSON, as in the Ray job's submission id.
    text = json.dumps({"organization": "acme", "project": "maxtext-tpu-workloads", "stack": "dev"}, sort_keys=True)
    assert ACME_DEV.digest(6) == hashlib.sha256(text.encode()).hexdigest()[:6] == "b0d851"
    assert default_run_name("llama3-8b", ACME_DEV) == default_run_name("llama3-8b", ACME_DEV)  # a re-run resumes


def test_same_named_stacks_of_other_projects_or_organizations_get_other_run_names():
    names = {
        default_run_name("llama3-8b", identity)
        for identity in (
            ACME_DEV,
            StackIdentity(organization="acme", project="other-workloads", stack="dev"),
            StackIdentity(organization="other-org", project="maxtext-tpu-workloads", stack="dev"),
            StackIdentity(organization=None, project="maxtext-tpu-workloads", stack="dev"),  # no engine (mocks)
            StackIdentity(organization="acme", project="maxtext-tpu-workloads", stack="Dev"),
        )
    }
    assert len(names) == 5
    assert all(run_name_is_valid(name) and name.startswith("llama3-8b-dev-") for name in names)


def test_a_long_or_odd_stack_name_is_cut_to_the_run_name_rule_and_still_kept_apart():
    long = StackIdentity(organization="acme", project="maxtext-tpu-workloads", stack="experiment-" + "x" * 89)
    name = default_run_name("llama3-70b", long)
    assert len(name) == RUN_NAME_MAX and run_name_is_valid(name)
    assert name.startswith("llama3-70b-experiment-xxx")
    # Cut at the same place, another stack still gets another name: the digest covers the full names.
    other = StackIdentity(organization="acme", project="maxtext-tpu-workloads", stack="experiment-" + "x" * 88 + "y")
    assert default_run_name("llama3-70b", other)[:-6] == name[:-6] and default_run_name("llama3-70b", other) != name
    assert run_name_is_valid(default_run_name("tiny-cpu", StackIdentity(None, "p", "My Stack/2")))
    # The rule's limit and its message say the same number.
    assert run_name_is_valid("a" * RUN_NAME_MAX) and not run_name_is_valid("a" * (RUN_NAME_MAX + 1))
    assert f"at most {RUN_NAME_MAX} characters" in RUN_NAME_RULE


# ------------------------------------------------------------------ one rule, one place (issue 22)
def test_a_topology_is_one_of_its_accelerators_and_the_refusal_lists_them():
    v6e = PRESETS["llama3-8b"].accelerator
    assert topology_problem(v6e, "4x4") is None
    assert topology_problem(v6e, "3x3") == (
        "is not a topology of TPU v6e; valid topologies: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
    )
    assert topology_problem(v6e, None) is not None and topology_problem(v6e, "") is not None
    for accelerator in ACCELERATORS.values():
        assert all(topology_problem(accelerator, topology) is None for topology in accelerator.shapes)


def test_min_slices_rule_names_the_slice_count_once_it_is_known():
    assert min_slices_rule(None) == "use 1 to the slice count (the fewest slices an elastic job keeps training on)"
    assert min_slices_rule(4) == "use 1 to 4 (the slice count: the fewest slices an elastic job keeps training on)"
    assert MIN_SLICES.rule == min_slices_rule(None) and MIN_SLICES.default == 1


def test_the_default_failure_budgets_are_the_ones_the_setting_documents():
    assert (resolve().max_failures, resolve(elastic=True).max_failures) == (0, 3)
    assert MAX_FAILURES.unset == "0 multislice, 3 elastic"
    assert "(default 0 multislice, 3 elastic)" in MAX_FAILURES.description


WORKLOADS = {"infraStack": "o/p/s"}


def workload_problems(**raw) -> list[str]:
    with pytest.raises(WorkloadSettingsError) as caught:
        workload_settings({**WORKLOADS, **raw})
    return caught.value.problems


def stack_problems(**raw) -> list[str]:
    config = {"gcp:project": "my-project", "gcp:region": "us-east5", "gcp:zone": "us-east5-b", **raw}
    with pytest.raises(SettingsError) as caught:
        infra_settings(config)
    return caught.value.problems


@pytest.mark.parametrize(
    ("setting", "value", "job", "shown", "phrase", "fix"),
    [
        ("runName", "My Run", {"run_name": "My Run"}, "'My Run'", "is not valid", RUN_NAME_RULE),
        (
            "maxFailures",
            -1,
            {"max_failures": -1},
            "-1",
            "is out of range",
            "use 0 or more (worker errors Ray Train recovers from; preemptions count against maxPreemptions",
        ),
        (
            "maxPreemptions",
            -2,
            {"max_preemptions": -2},
            "-2",
            "is out of range",
            "use 0 or more, or leave it unset for no limit (node preemptions Ray Train recovers from",
        ),
    ],
)
def test_the_settings_reader_and_the_job_refuse_with_the_same_message(setting, value, job, shown, phrase, fix):
    """A job resolved from arguments no settings reader saw (the fit check, the benchmarks) is
    refused as its stack setting would be: one declaration says both."""
    said = workload_problems(**{setting: value})
    assert_one_problem(said, setting=setting, value=shown, fix=fix, phrase=phrase)
    assert problems(**job) == said


def test_a_preset_of_no_name_is_refused_alike_by_both_stacks_and_the_job():
    message = f"preset = 'gpt' is not valid; choose one of: {ALL_PRESETS}"
    assert workload_problems(preset="gpt") == [message]
    assert message in stack_problems(preset="gpt")
    with pytest.raises(JobError) as caught:
        resolve("gpt")
    assert caught.value.problems == [message]


def test_min_slices_below_one_is_refused_alike_the_job_naming_the_slice_count():
    assert workload_problems(minSlices=0, elastic=True) == [f"minSlices = 0 is out of range; {min_slices_rule(None)}"]
    assert problems(min_slices=0, elastic=True) == [f"minSlices = 0 is out of range; {min_slices_rule(2)}"]


def test_a_topology_not_of_the_accelerator_is_refused_alike_by_the_stack_and_the_job():
    said = stack_problems(topology="3x3")
    valid = f"valid topologies: {', '.join(ACCELERATORS['v6e'].shapes)}"
    assert_one_problem(said, setting="topology", value="'3x3'", fix=valid, phrase="is not a topology of TPU v6e")
    assert problems(topology="3x3") == said


def test_slices_below_one_are_refused_by_the_same_rule_the_stack_bounding_it_above_too():
    assert problems(slices=0) == ["slices = 0 is out of range; use 1 or more"]
    assert stack_problems(slices="0") == ["slices = 0 is out of range; use 1 to 64"]
    # The job's own rule has no upper bound: the stack's is its node pools' limit, not the job's.
    assert resolve(slices=65, topology="1x1", overrides={"ici_fsdp_parallelism": 1}).slices == 65
