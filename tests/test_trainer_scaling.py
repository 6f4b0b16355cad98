"""The trainer's Ray Train configuration for TPU shapes, built here without any TPU."""

import pytest
from ray.util.tpu import get_tpu_worker_resources

from domain.ray import preemption
from domain.training.job import JobSpec, resolve_job
from domain.training.maxtext_config import base_config_path
from trainer import maxtext_trainer, train_loop


def job(preset="llama3-8b", **kwargs) -> JobSpec:
    return resolve_job(preset, run_name="scaling", checkpoint_root="/data/", **kwargs)


@pytest.mark.parametrize("slices", [1, 2, 4])
def test_multislice_workers_match_ray_tpu_resources(slices):
    config = maxtext_trainer.scaling_config(job(slices=slices))
    workers, per_worker = get_tpu_worker_resources("4x4", "TPU-V6E", {"TPU": 4}, num_slices=slices)
    assert config.num_workers == workers == 4 * slices
    assert config.resources_per_worker == {"TPU": per_worker["TPU"]}
    assert (config.use_tpu, config.topology, config.accelerator_type) == (True, "4x4", "TPU-V6E")
    assert config.placement_strategy == "SPREAD"


@pytest.mark.parametrize("min_slices, max_slices", [(1, 2), (1, 4), (2, 4)])
def test_elastic_range_is_whole_slices(min_slices, max_slices):
    config = maxtext_trainer.scaling_config(job(slices=max_slices, elastic=True, min_slices=min_slices))
    smallest, _ = get_tpu_worker_resources("4x4", "TPU-V6E", {"TPU": 4}, num_slices=min_slices)
    largest, _ = get_tpu_worker_resources("4x4", "TPU-V6E", {"TPU": 4}, num_slices=max_slices)
    assert config.num_workers == (smallest, largest)
    assert config.elasticity_enabled


def test_failure_budget_defaults_and_overrides():
    assert maxtext_trainer.run_config(job()).failure_config.max_failures == 0
    assert maxtext_trainer.run_config(job(elastic=True)).failure_config.max_failures == 3
    assert maxtext_trainer.run_config(job(elastic=True, max_failures=7)).failure_config.max_failures == 7


def test_preemptions_use_up_a_budget_of_their_own():
    """Ray Train counts a node drained for preemption against max_preemption_failures, not
    max_failures: a Spot slice reclaimed cannot use up the retries meant for real errors."""
    default = maxtext_trainer.run_config(job(elastic=True)).failure_config
    assert (default.max_failures, default.max_preemption_failures) == (3, -1)  # -1: Ray's "no limit"
    capped = maxtext_trainer.run_config(job(elastic=True, max_failures=1, max_preemptions=5)).failure_config
    assert (capped.max_failures, capped.max_preemption_failures) == (1, 5)


def test_a_restart_after_a_preemption_comes_before_the_drain_deadline():
    """Charged to the preemption budget while the preempted node is still there (domain/ray/preemption.py)."""
    config = maxtext_trainer.run_config(job(elastic=True)).failure_config
    assert config.preemption_grace_s == preemption.RESTART_GRACE_SECONDS == -preemption.RESTART_LEAD_SECONDS


def test_the_config_classes_are_the_ones_ray_train_exports():
    """The trainer imports them from where Ray Train v2 declares them (its types are right there);
    they must stay the classes `ray.train` exports, which JaxTrainer checks its arguments against."""
    import ray.train

    run = maxtext_trainer.run_config(job(elastic=True))
    assert type(maxtext_trainer.scaling_config(job())) is ray.train.ScalingConfig
    assert type(maxtext_trainer.scaling_config(job("tiny-cpu"))) is ray.train.ScalingConfig
    assert type(run) is ray.train.RunConfig
    assert type(run.failure_config) is ray.train.FailureConfig


def test_run_state_lives_beside_the_checkpoints():
    config = maxtext_trainer.run_config(job())
    assert (config.name, config.storage_path) == ("scaling", "/data/ray-train")


def test_cpu_mode_runs_one_cpu_worker_with_jax_on_cpu():
    tiny = job("tiny-cpu")
    config = maxtext_trainer.scaling_config(tiny)
    assert (config.num_workers, config.use_tpu) == (1, False)
    assert maxtext_trainer.run_config(tiny).worker_runtime_env["env_vars"]["JAX_PLATFORMS"] == "cpu"


def test_cpu_slices_are_workers_one_per_node():
    """A CPU slice is one worker, a JAX process of its own: what the local multi-node test runs."""
    config = maxtext_trainer.scaling_config(job("tiny-cpu", slices=2, elastic=True, min_slices=1))
    assert (config.num_workers, config.placement_strategy) == ((1, 2), "SPREAD")


def test_how_often_an_elastic_job_looks_for_slices_to_grow_onto():
    assert maxtext_trainer.scaling_config(job(elastic=True)).elastic_resize_monitor_interval_s == 60.0


def test_every_job_saves_when_told_to_stop():
    """MaxText's save on SIGTERM (what the preemption notice turns into) is on unless overridden."""
    assert job().maxtext_overrides["enable_autocheckpoint"] == "true"
    assert job(overrides={"enable_autocheckpoint": "false"}).maxtext_overrides["enable_autocheckpoint"] == "false"


@pytest.mark.parametrize(
    "error, says",
    [
        ("PreemptionError", "training failed: preemptions used up maxPreemptions = 2 (worker errors are counted apart"),
        ("WorkerGroupError", "training failed: worker errors used up maxFailures = 1 (preemptions are counted apart"),
        ("ControllerError", "training failed: Ray Train's controller failed: boom"),
    ],
)
def test_a_failed_run_names_the_budget_that_ran_out(error, says):
    import ray.train

    failed = job(elastic=True, max_failures=1, max_preemptions=2)
    errors = {
        "PreemptionError": lambda: ray.train.PreemptionError(
            preemption_info=ray.train.PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"node": [0]}),
            drain_timed_out=True,
        ),
        "WorkerGroupError": lambda: ray.train.WorkerGroupError("workers failed", {1: RuntimeError("boom\ntrace")}),
        "ControllerError": lambda: ray.train.ControllerError(RuntimeError("boom")),
    }
    message = maxtext_trainer.failure_message(failed, errors[error]())
    assert message.startswith(says), message
    if error == "WorkerGroupError":
        assert message.endswith("last: rank 1: boom")


def test_maxtext_argv_uses_the_installed_base_config():
    argv = train_loop.maxtext_argv(job())
    assert argv[1] == str(base_config_path()) and base_config_path().is_file()
    assert "run_name=scaling" in argv and "base_output_directory=/data/" in argv


@pytest.mark.parametrize("slices", [1, 2, 4])
def test_trainer_builds_for_tpu_shapes_without_tpus(slices):
    trainer = maxtext_trainer.build_trainer(job(slices=slices))
    assert trainer.scaling_config.num_workers == 4 * slices
    assert trainer.train_loop_config["argv"][2:4] == ["run_name=scaling", "base_output_directory=/data/"]


def test_a_job_refuses_the_wrong_trainer(capsys):
    elastic_job = job(elastic=True)
    with pytest.raises(SystemExit):
        maxtext_trainer.parse_job(["--job", elastic_job.to_json()], elastic=False)
    assert "resolved for the elastic trainer" in capsys.readouterr().err
    assert maxtext_trainer.parse_job(["--job", elastic_job.to_json()], elastic=True) == elastic_job
