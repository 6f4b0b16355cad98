"""The trainer's clock of a worker group's start (trainer/start_clock.py): the phases it writes, in
order, from MaxText's own marks; and, against the installed MaxText and JAX, that those marks,
the restore it times and JAX's log of the persistent cache are where the clock looks for them."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from domain.paths import TRAINER_PYTHON
from domain.training.job_events import read_event
from domain.training.start_phases import TRAIN_STEP_MODULE
from trainer import start_clock
from trainer.start_clock import JAX_COMPILER_LOGGER, StartClock

pytestmark = pytest.mark.timed  # its slow test runs MaxText (tests/conftest.py)


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


def written(*, cache_on: bool = True, loop_started: float = 100.0):
    events: list[dict[str, Any]] = []
    now = Clock(loop_started)
    clock = StartClock(
        loop_started, lambda event, **fields: events.append({"event": event, **fields}), cache_on=cache_on, now=now
    )
    return clock, now, events


def test_each_phase_is_written_when_it_ends():
    clock, now, events = written()
    clock.restored(4.0)
    now.at = 130.0
    clock.prepared()  # 30 s after the loop started, 4 of them restoring
    clock.cache_result("miss")
    now.at = 150.0
    clock.step_started()
    clock.step_logged(152.5)
    assert events == [
        {"event": "phase", "time": 126.0, "phase": "trainer_start", "seconds": 26.0},
        {"event": "phase", "time": 130.0, "phase": "restore", "seconds": 4.0},
        {"event": "phase", "time": 150.0, "phase": "compile", "seconds": 20.0, "cache": "miss"},
        {"event": "phase", "time": 152.5, "phase": "first_step", "seconds": 2.5},
    ]
    # Each reads back as the job's reader reads it.
    for event in events:
        assert read_event("maxtext-tpu-event " + json.dumps(event)) is not None


def test_a_second_run_of_maxtext_in_the_same_group_writes_nothing_more():
    """The trainer runs MaxText again where the data ended: that start is not the group's."""
    clock, now, events = written()
    now.at = 110.0
    clock.prepared()
    clock.step_started()
    clock.step_logged(111.0)
    count = len(events)
    clock.restored(3.0)
    now.at = 200.0
    clock.prepared()
    clock.cache_result("miss")
    clock.step_started()
    clock.step_logged(201.0)
    assert len(events) == count


def test_marks_out_of_order_write_nothing_they_cannot_time():
    clock, _, events = written()
    clock.step_started()  # no preparation seen: no compile to time
    clock.step_logged(105.0)
    assert events == []


def test_a_job_without_a_cache_says_off_and_a_lookup_after_the_compile_changes_nothing():
    clock, _, events = written(cache_on=False)
    clock.prepared()
    # JAX looks the step up even without a cache directory, and logs a miss.
    clock.cache_result("miss")
    clock.step_started()
    assert events[-1]["cache"] == "off"
    clock, _, events = written()
    clock.prepared()
    clock.cache_result("hit")
    clock.step_started()
    clock.cache_result("miss")  # another program compiled later (an eval step)
    assert events[-1]["cache"] == "hit"


def test_maxtexts_recorder_gets_every_call_as_before():
    calls: list[tuple[str, tuple[Any, ...]]] = []

    class Recorder:
        def record_training_preparation_end_time(self, *args: Any) -> None:
            calls.append(("prepared", args))

        def record_step_start_time(self, *args: Any) -> None:
            calls.append(("step", args))

        def record_job_end_time(self) -> None:
            calls.append(("end", ()))

    clock, _, events = written()
    train = SimpleNamespace(create_goodput_recorder=lambda config: Recorder())
    checkpointing = SimpleNamespace(load_state_if_possible=lambda *args, **kwargs: ("state", None))
    uninstall = clock.install(train, checkpointing)
    try:
        recorder = train.create_goodput_recorder(object())
        assert checkpointing.load_state_if_possible("manager", step=3) == ("state", None)
        recorder.record_training_preparation_end_time()
        recorder.record_step_start_time(7)
        recorder.record_job_end_time()
        assert getattr(recorder, "record_tpu_init_start_time", None) is None  # MaxText's own has none
    finally:
        uninstall()
    assert calls == [("prepared", ()), ("step", (7,)), ("end", ())]
    assert [event["phase"] for event in events] == ["trainer_start", "restore", "compile"]
    assert events[1]["seconds"] >= 0.0  # a restore was timed
    assert isinstance(train.create_goodput_recorder(object()), Recorder)  # undone


def test_without_maxtexts_recorder_the_marks_still_reach_the_clock():
    clock, _, events = written()
    train = SimpleNamespace(create_goodput_recorder=lambda config: None)
    checkpointing = SimpleNamespace(load_state_if_possible=lambda *args, **kwargs: (None, None))
    uninstall = clock.install(train, checkpointing)
    try:
        recorder = train.create_goodput_recorder(object())
        assert recorder  # MaxText records only through a recorder that is truthy
        checkpointing.load_state_if_possible()  # nothing to restore: not a restore
        recorder.record_training_preparation_end_time()
        assert getattr(recorder, "record_data_loading_start_time", None) is None
    finally:
        uninstall()
    assert [event["phase"] for event in events] == ["trainer_start", "restore"]
    assert events[1]["seconds"] == 0.0


def test_jaxs_cache_lookups_are_read_and_only_what_passed_before_still_passes():
    clock, _, _ = written()
    logger = logging.getLogger(JAX_COMPILER_LOGGER)
    logger.setLevel(logging.WARNING)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    logger.addHandler(handler)
    uninstall = clock.install(
        SimpleNamespace(create_goodput_recorder=lambda config: None),
        SimpleNamespace(load_state_if_possible=lambda: (None, None)),
    )
    try:
        logger.debug("PERSISTENT COMPILATION CACHE MISS for '%s' with key %r", "jit_init", "k0")
        assert clock.cache is None  # another program
        logger.debug("Persistent compilation cache hit for '%s' with key %r", TRAIN_STEP_MODULE, "k1")
        assert clock.cache == "hit"
        logger.warning("Persistent compilation cache hit for '%s' with key %r", TRAIN_STEP_MODULE, "k2")
        assert clock.cache_key == "k2"
    finally:
        uninstall()
        logger.removeHandler(handler)
    # The DEBUG lookups stayed as quiet as JAX left them; a WARNING (jax_log_compiles) still shows.
    assert [record.levelno for record in seen] == [logging.WARNING]
    assert logger.level == logging.WARNING


def test_a_miss_keeps_jaxs_key_and_why_it_did_not_write_the_entry():
    clock, now, events = written()
    logger = logging.getLogger(JAX_COMPILER_LOGGER)
    uninstall = clock.install(
        SimpleNamespace(create_goodput_recorder=lambda config: None),
        SimpleNamespace(load_state_if_possible=lambda: (None, None)),
    )
    try:
        clock.prepared()
        logger.debug("PERSISTENT COMPILATION CACHE MISS for '%s' with key %r", TRAIN_STEP_MODULE, "jit_train_step-9f")
        logger.debug(
            "Not writing persistent cache entry for '%s' because it took < %.2f seconds to compile (%.2fs)",
            TRAIN_STEP_MODULE,
            1.0,
            0.4,
        )
        now.at = 101.0
        clock.step_started()
    finally:
        uninstall()
    assert events[-1] == {
        "event": "phase",
        "time": 101.0,
        "phase": "compile",
        "seconds": 1.0,
        "cache": "miss",
        "cache_key": "jit_train_step-9f",
        "cache_not_written": "compiled in 0.40 s, under JAX's 1.00 s minimum (jax_persistent_cache_min_compile_time_secs)",
    }


# ---------------------------------------------------------------- against MaxText and JAX
# A train step compiled by the trainer's JAX with the clock installed, its compile event printed:
# argv is the cache directory and JAX's minimum compile time for writing an entry.
JAX_COMPILE = textwrap.dedent(
    """
    import json, sys, time, types
    import jax, jax.numpy as jnp
    from trainer.start_clock import StartClock

    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(sys.argv[2]))
    events = []
    clock = StartClock(time.time(), lambda event, **fields: events.append(fields), cache_on=True)
    uninstall = clock.install(
        types.SimpleNamespace(create_goodput_recorder=lambda config: None),
        types.SimpleNamespace(load_state_if_possible=lambda: (None, None)),
    )
    clock.prepared()

    def train_step(x):
        return jnp.tanh(x @ x.T).sum()

    jax.jit(train_step)(jnp.ones((64, 64))).block_until_ready()
    clock.step_started()
    uninstall()
    print(json.dumps(events[-1]))
    """
)


def compile_step(cache: Path, minimum_seconds: float) -> dict[str, Any]:
    if not TRAINER_PYTHON.is_file():
        pytest.skip("the trainer environment is not installed here (./scripts/setup makes it)")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [str(TRAINER_PYTHON), "-c", JAX_COMPILE, str(cache), str(minimum_seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_jax_says_the_key_and_why_it_did_not_write_a_program(tmp_path):
    """Fails if JAX rewords its lookup or its 'Not writing' line, or stops logging the key."""
    unwritten = compile_step(tmp_path, minimum_seconds=1000.0)
    assert (unwritten["phase"], unwritten["cache"]) == ("compile", "miss")
    assert unwritten["cache_key"].startswith(TRAIN_STEP_MODULE)
    assert unwritten["cache_not_written"].startswith("compiled in ")
    assert "under JAX's 1000.00 s minimum" in unwritten["cache_not_written"]
    written_now = compile_step(tmp_path, minimum_seconds=0.0)
    assert (written_now["cache"], written_now["cache_key"]) == ("miss", unwritten["cache_key"])
    assert "cache_not_written" not in written_now
    served = compile_step(tmp_path, minimum_seconds=0.0)
    assert (served["cache"], served["cache_key"]) == ("hit", unwritten["cache_key"])


TINY = (
    "hardware=cpu dataset_type=synthetic per_device_batch_size=1 max_target_length=64 model_name=llama3-8b "
    "override_model_config=true base_emb_dim=64 base_num_decoder_layers=2 base_mlp_dim=128 base_num_query_heads=4 "
    "base_num_kv_heads=4 head_dim=16 vocab_size=256 enable_checkpointing=true checkpoint_period=1 "
    "skip_jax_distributed_system=true attention=dot_product log_config=false learning_rate_schedule_steps=8"
).split()

# The schedule is fixed, so that a run resumed for more steps compiles the same train step (the
# learning rate schedule, over `steps` by default, is part of it).

# MaxText run in this process with the clock installed as the trainer installs it, its events
# printed one per line.
RUN = textwrap.dedent(
    """
    import json, logging, sys, time
    from maxtext.common import checkpointing
    from maxtext.trainers.pre_train import train
    from trainer import events, train_loop
    from trainer.start_clock import StartClock

    def emit(event, **fields):
        print("EVENT " + json.dumps({"event": event, **fields}), flush=True)

    # As in a Ray worker, whose logging passes INFO records (MaxText's step lines) to handlers.
    logging.getLogger().setLevel(logging.INFO)
    clock = StartClock(time.time(), emit, cache_on=True)
    events.log_steps(clock)
    train_loop.mark_absl_flags_parsed()
    uninstall = clock.install(train, checkpointing)
    try:
        train.main(sys.argv[1:])
    finally:
        uninstall()
    """
)


def run_maxtext(root: Path, steps: int) -> dict[str, dict[str, Any]]:
    from domain.training.maxtext_config import base_config_path

    if not TRAINER_PYTHON.is_file():
        pytest.skip("the trainer environment is not installed here (./scripts/setup makes it)")
    argv = [
        str(base_config_path()),
        "run_name=clock",
        f"base_output_directory={root}",
        f"steps={steps}",
        f"jax_cache_dir={root / 'cache'}",
        *TINY,
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "DECOUPLE_GCLOUD": "TRUE"}
    done = subprocess.run(
        [str(TRAINER_PYTHON), "-c", RUN, *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line[len("EVENT ") :]) for line in done.stdout.splitlines() if line.startswith("EVENT ")]
    return {event["phase"]: event for event in events if event["event"] == "phase"}


@pytest.mark.slow
def test_maxtext_and_jax_give_the_clock_every_mark_it_times(tmp_path):
    """A fresh run misses the cache and restores nothing; the same run resumed for two more steps
    restores its checkpoint and loads the train step from the cache. Fails if MaxText renames its
    recorder factory, its marks or its restore, or JAX rewords its cache log."""
    fresh = run_maxtext(tmp_path, steps=2)
    assert list(fresh) == ["trainer_start", "restore", "compile", "first_step"]
    assert fresh["restore"]["seconds"] == 0.0
    assert fresh["compile"]["cache"] == "miss"
    assert fresh["compile"]["cache_key"].startswith(TRAIN_STEP_MODULE)
    assert all(event["seconds"] >= 0.0 for event in fresh.values())
    resumed = run_maxtext(tmp_path, steps=4)
    assert resumed["restore"]["seconds"] > 0.0
    assert (resumed["compile"]["cache"], resumed["compile"]["cache_key"]) == ("hit", fresh["compile"]["cache_key"])
    assert resumed["compile"]["seconds"] < fresh["compile"]["seconds"]
    assert start_clock.CACHE_HIT and start_clock.CACHE_MISS and start_clock.CACHE_NOT_WRITTEN  # read above
