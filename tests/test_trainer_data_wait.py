"""What the trainer reads from MaxText around its data: the time its loader waits for batches (the
goodput's secondsWaitingForData), and the end of the data (the job fails, naming the last
checkpoint, instead of ending as if done). MaxText's names and messages are held to the installed
MaxText's source, so a MaxText that renames them fails here, not silently on a cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from domain.paths import PROJECT_ROOT
from domain.training.goodput import RunRecord
from domain.training.job import resolve_job
from domain.training.job_events import eval_loss, event_line, read_event
from trainer import events, maxtext_trainer, train_loop

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)


def maxtext_source(relative: str) -> str:
    found = sorted((PROJECT_ROOT / ".venv-trainer" / "lib").glob(f"python3*/site-packages/maxtext/{relative}"))
    if not found:
        pytest.skip("the trainer environment is not installed here (./scripts/setup makes it)")
    return found[0].read_text()


def test_maxtexts_loader_fetches_each_batch_through_the_method_the_trainer_times():
    source = maxtext_source("common/data_loader.py")
    assert "class DataLoader:" in source and "def load_next_batch_pre_sharding(self):" in source
    assert "example_batch = self.load_next_batch_pre_sharding()" in source


def test_maxtexts_end_of_data_and_pipeline_failure_messages_are_the_ones_the_trainer_reads():
    loader, train = maxtext_source("common/data_loader.py"), maxtext_source("trainers/pre_train/train.py")
    assert 'max_logging.log(f"Training stopped: {str(e)}")' in train
    stop = train_loop.OUT_OF_DATA.removeprefix("Training stopped: ")
    assert f'StopTraining(f"{stop} Received' in loader
    assert "`next(self.data_iterator)` failed with" in loader


class Loader:
    def __init__(self, seconds: float):
        self.seconds = seconds

    def load_next_batch_pre_sharding(self):
        time.sleep(self.seconds)
        return "batch"


def test_the_loaders_fetches_are_timed_once_however_often_the_wrapper_is_installed():
    wait = events._DataWait()
    wait.time(Loader)
    wait.time(Loader)  # a second worker group in the same process
    started = time.monotonic()
    assert Loader(0.05).load_next_batch_pre_sharding() == "batch"
    Loader(0.05).load_next_batch_pre_sharding()
    wall = time.monotonic() - started
    taken = wait.take()
    # Both fetches' sleeps, and no more than the time they took: a fetch timed twice would count
    # each sleep twice, over the wall time. (A bound of 0.2 s raced a loaded 2-core machine.)
    assert 0.1 <= taken <= wall, (taken, wall)
    assert wait.take() == 0.0


def test_the_goodput_sums_the_data_wait_the_step_events_carry():
    record = RunRecord()
    record.add(read_event(event_line("attempt", time=100.0, workers=1)))
    for step, data in ((0, 2.5), (1, 0.25), (2, 0.25)):
        record.add(read_event(event_line("step", time=110.0 + step, step=step, seconds=1.0, data_seconds=data)))
    assert record.summary(100.0, 120.0)["seconds_waiting_for_data"] == 3.0
    older = RunRecord()  # a trainer that did not measure it
    older.add(read_event(event_line("step", time=110.0, step=0, seconds=1.0)))
    assert older.summary(100.0, 120.0)["seconds_waiting_for_data"] is None


def test_the_end_of_the_data_is_noticed_and_a_pipeline_failure_kept():
    stopped = train_loop._DataStop()
    stopped.emit(SimpleNamespace(getMessage=lambda: train_loop.OUT_OF_DATA + " Received <class 'StopIteration'>"))
    assert stopped.out_of_data and stopped.failure is None


def test_a_run_that_ran_out_of_data_fails_naming_its_last_checkpoint(monkeypatch, capsys, tmp_path):
    job = resolve_job("tiny-cpu", run_name="r", checkpoint_root=str(tmp_path), overrides={"steps": 40})
    record = Path(job.run_directory) / train_loop.DATA_END_RECORD
    record.parent.mkdir(parents=True)
    record.write_text('{"committed_step": 0, "last_step": 0}')  # an earlier run's: removed first
    ended = {"committed_step": 8, "last_step": 11}

    def fit():  # the worker group, which writes where the data ended
        if ended:
            record.write_text(json.dumps(ended))
        return SimpleNamespace(metrics={}, path="x")

    monkeypatch.setattr(maxtext_trainer, "build_trainer", lambda job: SimpleNamespace(fit=fit))
    assert maxtext_trainer.main(["--job", job.to_json()], elastic=False) == 1
    out = capsys.readouterr().out
    assert "training ran out of data after step 11 of 40" in out and "the last checkpoint is step 8" in out
    # A fix where the user is: the stack's setting, and the smoke run's flags.
    assert "set epochs to at least N (`pulumi config set epochs N`; the smoke run's --epochs N)" in out
    failed = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("maxtext-tpu-event")]
    assert failed[-1]["event"] == "failed" and "ran out of data" in failed[-1]["message"]
    ended["committed_step"] = 11  # the trainer's save where the data ended
    assert maxtext_trainer.main(["--job", job.to_json()], elastic=False) == 1
    assert "saved a final checkpoint there (step 11)" in capsys.readouterr().out
    ended.clear()  # a run whose data lasted; the earlier record is gone
    record.write_text(json.dumps({"committed_step": 8, "last_step": 11}))
    assert maxtext_trainer.main(["--job", job.to_json()], elastic=False) == 0
    assert not (Path(job.run_directory) / "data.json").exists()  # a synthetic job keeps no data record


def test_maxtexts_eval_summary_is_the_line_the_eval_loss_is_read_from():
    """evalLoss comes from MaxText's eval summary (`Completed eval after train step N, loss=X, ...`),
    joined with ", " as the metric logger writes it."""
    source = maxtext_source("common/metric_logger.py")
    assert 'f"Completed eval after train step {step}",' in source
    assert "f\"loss={scalars['eval/avg_loss']:.3f}\"," in source
    assert 'max_logging.log(", ".join(log_parts))' in source
    line = ", ".join(["Completed eval after train step 9", "loss=7.412", "perplexity=1655.203", "total_weights=512"])
    assert eval_loss(line) == (9, 7.412)


def test_a_batchs_real_tokens_are_its_nonzero_target_segments_as_maxtext_counts_them():
    train = maxtext_source("trainers/pre_train/train.py")
    assert 'total_weights = jnp.sum(data["targets_segmentation"] != 0)' in train
    batch = {"targets_segmentation": np.array([[1, 1, 2, 0], [1, 0, 0, 0]]), "inputs": np.ones((2, 4))}
    assert events.real_tokens(batch) == 4
    assert events.real_tokens({"inputs": np.ones((2, 4))}) is None

    class Global:
        """A jax.Array spanning other processes' devices: fetching it raises, as JAX does."""

        is_fully_addressable = False

        def __array__(self, *args, **kwargs):
            raise RuntimeError("Fetching value for `jax.Array` that spans non-addressable devices")

    # The synthetic data of a two-process group (the elastic test's): not counted, never raised.
    assert events.real_tokens({"targets_segmentation": Global()}) is None
    Global.is_fully_addressable = True
    assert events.real_tokens({"targets_segmentation": Global()}) is None

    class Batches:
        def load_next_batch_pre_sharding(self):
            return batch

    wait = events._DataWait()
    wait.time(Batches)
    Batches().load_next_batch_pre_sharding()
    assert wait.batch_tokens == 4


def test_each_process_says_a_steps_tokens_before_its_checkpoint_may_be_written(monkeypatch, capsys):
    """At each periodic checkpoint, and at every step after the preemption notice (MaxText saves
    at the step its processes agree on), before MaxText's own maybe_save_checkpoint runs."""
    train = maxtext_source("trainers/pre_train/train.py")
    assert "checkpointing.maybe_save_checkpoint(checkpoint_manager, state, config, data_iterator, step)" in train
    saves: list[int | None] = []
    checkpointing = SimpleNamespace(
        maybe_save_checkpoint=lambda manager, state, config, iterator, step=None: saves.append(step)
    )
    notice = SimpleNamespace(received=False)
    monkeypatch.setattr(events.DATA_WAIT, "batch_tokens", 42)
    uninstall = train_loop.say_checkpointed_tokens(checkpointing, notice)
    config = SimpleNamespace(checkpoint_period=4)
    for step in (3, 4):
        checkpointing.maybe_save_checkpoint("manager", "state", config, "iterator", step)
    checkpointing.maybe_save_checkpoint(None, "state", config, "iterator", 8)  # checkpointing off
    notice.received = True
    checkpointing.maybe_save_checkpoint("manager", "state", config, "iterator", step=5)
    checkpointing.maybe_save_checkpoint("manager", "state", config, "iterator")  # the save at completion
    uninstall()
    checkpointing.maybe_save_checkpoint("manager", "state", config, "iterator", 12)
    assert saves == [3, 4, 8, 5, None, 12]  # every call reached MaxText's
    said = [read_event(line) for line in capsys.readouterr().out.splitlines()]
    assert [(event.step, event.tokens, event.process, event.processes) for event in said] == [
        (4, 42, 0, 1),
        (5, 42, 0, 1),
    ]
