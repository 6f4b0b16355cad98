"""The goodput record: events and Ray Train's decisions read back from a job's log, exactly."""

from __future__ import annotations

import json
import re

import pytest

from domain.paths import PROJECT_ROOT
from domain.training.goodput import OUTPUTS, RunRecord
from domain.training.job_events import event_line, maxtext_step, parse_event
from domain.training.job_log import JobLog
from domain.training.start_phases import PHASES

WORKER = "\x1b[36m(RayTrainWorker pid=101)\x1b[0m "
CONTROLLER = "\x1b[36m(TrainController pid=77)\x1b[0m "


def steps(first: int, last: int, start: float, every: float = 2.0, seconds: float = 1.5) -> list[str]:
    return [
        WORKER + event_line("step", time=start + i * every, step=step, seconds=seconds)
        for i, step in enumerate(range(first, last + 1))
    ]


def retry(source: str, count: int | str, allowed: str = "inf") -> list[str]:
    return [
        CONTROLLER + "[FailurePolicy] RETRY",
        CONTROLLER + f"  Source: {source}",
        CONTROLLER + f"  Error count: {count} (max allowed: {allowed})",
        CONTROLLER + "Error: Training was interrupted by node preemption (preempted_ranks=[0], drain_timed_out=True).",
    ]


NO_PHASES = dict.fromkeys((*PHASES, "compile_cache", "compile_cache_why"))


def started(
    at: float,
    process: float,
    *,
    prepared: float,
    restore: float = 0.0,
    compiled: float,
    cache: str = "miss",
    workers: int = 1,
    **said: str,
):
    """A group's `attempt` and the trainer's phase events, as rank 0 writes them: its process
    started at `process`, its loop at `at`, MaxText prepared at `prepared` (after a restore of
    `restore` s) and compiled the train step by `compiled`; `said` is what JAX logged of the
    lookup (cache_key, cache_not_written)."""
    return [
        WORKER + event_line("attempt", time=at, workers=workers, process_started=process),
        WORKER + event_line("phase", time=prepared - restore, phase="trainer_start", seconds=prepared - restore - at),
        WORKER + event_line("phase", time=prepared, phase="restore", seconds=restore),
        WORKER + event_line("phase", time=compiled, phase="compile", seconds=compiled - prepared, cache=cache, **said),
    ]


def first_step(ended: float, seconds: float):
    return [WORKER + event_line("phase", time=ended, phase="first_step", seconds=seconds)]


def read(lines: list[str]) -> RunRecord:
    log = JobLog()
    log.add_lines(lines)
    return log.record


def test_an_event_line_reads_back_wherever_ray_puts_it():
    line = WORKER + event_line("step", time=12.5, step=3, seconds=0.25)
    assert parse_event(line) == {"event": "step", "time": 12.5, "step": 3, "seconds": 0.25}
    assert parse_event("completed step: 3, seconds: 0.250") is None
    # A cut line, or one with stray bytes where the JSON is, is not an event.
    assert parse_event(line[:-3]) is None
    assert parse_event(WORKER + "maxtext-tpu-event {\ufffd}") is None
    assert parse_event(WORKER + 'maxtext-tpu-event ["step"]') is None


def test_maxtext_step_message():
    message = "completed step: 27, seconds: 2.481, TFLOP/s/device: 0.012, Tokens/s/device: 412.743, loss: 6.289"
    assert maxtext_step(message) == (27, 2.481)
    assert maxtext_step("Training stopped: Job received termination signal (SIGTERM).") is None


def test_an_uninterrupted_run():
    record = read([WORKER + event_line("attempt", time=100.0, workers=2), *steps(0, 9, start=130.0)])
    assert record.summary(start=90.0, end=160.0) == {
        "restarts": 0,
        "preemptions": 0,
        "failures": 0,
        "steps_recomputed": 0,
        "seconds_lost_to_restarts": 0,
        "seconds_queued": 10.0,
        "seconds_to_first_step": 40.0,
        # A trainer that did not time its start: only the wait for the group is known.
        "start_phases": [{**NO_PHASES, "queued": 10.0}],
        "seconds_lost_to_restarts_by_phase": None,
        "goodput_percent": round(100 * 10 * 1.5 / 70, 1),
        "seconds_waiting_for_data": None,  # these step events do not say
        "event_lines_skipped": 0,
    }


def test_a_preemption_saved_at_the_notice_then_a_failure_resumed_from_a_periodic_checkpoint():
    lines = [
        WORKER + event_line("attempt", time=100.0, workers=2),
        *steps(0, 12, start=110.0),  # steps 0..12 at 110..134
        WORKER + event_line("notice", time=135.0, deadline_ms=150_000, preempted_ranks=[0]),
        *steps(13, 13, start=136.0),  # the sync point: saved at 13
        *retry("preemption", 1),
        WORKER + event_line("attempt", time=160.0, workers=1),
        *steps(13, 20, start=170.0),  # step 13 again (restored at 13: the step after runs again)
        *retry("worker group", 1, allowed="3"),
        WORKER + event_line("attempt", time=200.0, workers=1),
        *steps(16, 30, start=210.0),  # restored from the periodic checkpoint at 15
    ]
    summary = read(lines).summary(start=95.0, end=240.0)
    assert summary["restarts"] == 2
    assert summary["preemptions"] == 1
    assert summary["failures"] == 1
    # 13 ran twice; 16..20 ran twice.
    assert summary["steps_recomputed"] == 1 + 5
    # (170 - 136) + (210 - (170 + 7 * 2))
    assert summary["seconds_lost_to_restarts"] == 34.0 + 26.0
    assert summary["seconds_to_first_step"] == 15.0
    # The wait for the first worker group only: the restarts' waits are seconds lost to restarts.
    assert summary["seconds_queued"] == 5.0
    assert summary["goodput_percent"] == round(100 * 31 * 1.5 / 145, 1)


def test_lines_read_twice_count_once():
    """A local cluster's log monitors may forward one process's line more than once."""
    once = [
        WORKER + event_line("attempt", time=100.0, workers=2),
        *steps(0, 5, start=110.0),
        *retry("preemption", 1),
        WORKER + event_line("attempt", time=150.0, workers=2),
        *steps(5, 8, start=160.0),
    ]
    twice = [line for line in once for _ in range(2)]
    # Interleaved copies of a whole decision, as two forwarders may deliver them.
    assert read(twice).summary(90.0, 200.0) == read(once).summary(90.0, 200.0)
    assert read(once + retry("preemption", 1)).summary(90.0, 200.0)["preemptions"] == 1
    assert read(once + retry("preemption", 2)).summary(90.0, 200.0)["preemptions"] == 2


def test_a_resize_is_a_restart_charged_to_no_budget():
    lines = [
        WORKER + event_line("attempt", time=100.0, workers=1),
        *steps(0, 5, start=110.0),
        CONTROLLER
        + "Detected changes in the cluster resources. Deciding to resize the worker group from 1 -> 2 workers.",
        WORKER + event_line("attempt", time=130.0, workers=2),
        *steps(4, 9, start=140.0),
    ]
    summary = read(lines).summary(90.0, 160.0)
    assert (summary["restarts"], summary["preemptions"], summary["failures"]) == (1, 0, 0)
    assert summary["steps_recomputed"] == 2


def test_the_failed_event_names_the_budget():
    record = read([WORKER + event_line("failed", message="training failed: worker errors used up maxFailures = 0")])
    assert record.failure == "training failed: worker errors used up maxFailures = 0"


def test_what_the_log_cannot_say_is_none():
    assert read(["no events here"]).summary(0.0, 10.0) == {**dict.fromkeys(OUTPUTS), "event_lines_skipped": 0}
    record = read([WORKER + event_line("attempt", time=100.0, workers=1)])
    summary = record.summary(None, None)
    assert summary["restarts"] == 0
    assert summary["goodput_percent"] is None and summary["seconds_to_first_step"] is None
    assert summary["seconds_queued"] is None  # no job start to count from
    # The first worker group started, but no step yet: the queue time is known all the same.
    assert record.summary(90.0, None)["seconds_queued"] == 10.0
    # No step at all: nothing to measure the time lost from.
    assert (
        read([WORKER + event_line("attempt", time=100.0, workers=1)]).summary(90.0, 140.0)["seconds_lost_to_restarts"]
        is None
    )


def test_a_group_stopped_before_its_first_step_is_inside_the_gap():
    gap = read(
        [
            WORKER + event_line("attempt", time=100.0, workers=2),
            *steps(0, 3, start=110.0),  # last at 116
            WORKER + event_line("attempt", time=120.0, workers=1),  # resized before a step
            WORKER + event_line("attempt", time=140.0, workers=2),
            *steps(2, 5, start=150.0),
        ]
    ).summary(90.0, 160.0)
    assert gap["restarts"] == 2 and gap["seconds_lost_to_restarts"] == 150.0 - 116.0
    assert gap["steps_recomputed"] == 2


# ------------------------------------------------------------------ no line can break a result (issue 19)
GOOD_RUN = [WORKER + event_line("attempt", time=100.0, workers=2), *steps(0, 9, start=130.0)]
PREFIX = WORKER + "maxtext-tpu-event "

# Event lines a log may hold that give no usable event: a field of the wrong type or out of
# range, a number JSON allows but a duration cannot be, JSON that is cut, damaged or not an
# object, an object with no kind.
BAD_EVENT_LINES = {
    "seconds is text": PREFIX + '{"event":"step","time":150.0,"step":3,"seconds":"n/a"}',
    "step is null": PREFIX + '{"event":"step","time":150.0,"step":null,"seconds":1.0}',
    "step is a float": PREFIX + '{"event":"step","time":150.0,"step":3.5,"seconds":1.0}',
    "step is a boolean": PREFIX + '{"event":"step","time":150.0,"step":true,"seconds":1.0}',
    "step is negative": PREFIX + '{"event":"step","time":150.0,"step":-1,"seconds":1.0}',
    "step is too large": PREFIX + '{"event":"step","time":150.0,"step":1' + "0" * 20 + ',"seconds":1.0}',
    "step has no time": PREFIX + '{"event":"step","step":3,"seconds":1.0}',
    "time is text": PREFIX + '{"event":"step","time":"noon","step":3,"seconds":1.0}',
    "time is NaN": PREFIX + '{"event":"step","time":NaN,"step":3,"seconds":1.0}',
    "seconds overflow to infinity": PREFIX + '{"event":"step","time":150.0,"step":3,"seconds":1e999}',
    "seconds are negative": PREFIX + '{"event":"step","time":150.0,"step":3,"seconds":-2.0}',
    "an integer of 5000 digits": PREFIX + '{"event":"step","time":150.0,"step":' + "9" * 5000 + "}",
    "workers is text": PREFIX + '{"event":"attempt","time":300.0,"workers":"two"}',
    "attempt has no time": PREFIX + '{"event":"attempt","workers":2}',
    "message is a number": PREFIX + '{"event":"failed","message":123}',
    "ranks are text": PREFIX + '{"event":"notice","time":135.0,"preempted_ranks":"0"}',
    "a JSON array": PREFIX + '["step", 3]',
    "a JSON string": PREFIX + '"step"',
    "a JSON null": PREFIX + "null",
    "no event field": PREFIX + '{"time":150.0,"step":3,"seconds":1.0}',
    "event is a number": PREFIX + '{"event":7}',
    "cut JSON": PREFIX + '{"event":"step","time":150.0,"st',
    "stray bytes, replaced": PREFIX + '{"event":"step","time":15\ufffd\ufffd,"step":3,"seconds":1.0}',
    "nested too deep": PREFIX + "[" * 100_000,
    "nothing after the prefix": PREFIX,
}


@pytest.mark.parametrize("bad", BAD_EVENT_LINES.values(), ids=BAD_EVENT_LINES.keys())
def test_a_bad_event_line_is_skipped_and_counted_never_raised(bad):
    good = read(GOOD_RUN).summary(90.0, 160.0)
    record = read([*GOOD_RUN[:4], bad, *GOOD_RUN[4:]])
    assert record.skipped == 1 and record.first_skip
    assert record.summary(90.0, 160.0) == {**good, "event_lines_skipped": 1}
    assert record.failure is None  # a `failed` event with a message of the wrong type says nothing
    # The same line read as a job's whole log: only the count.
    assert read([bad]).summary(90.0, 160.0) == {**dict.fromkeys(OUTPUTS), "event_lines_skipped": 1}


def test_why_a_line_was_skipped_names_the_field():
    record = read([BAD_EVENT_LINES["seconds is text"], BAD_EVENT_LINES["a JSON array"]])
    assert record.skipped == 2
    assert record.first_skip is not None and "step event: seconds" in record.first_skip


def test_an_event_kind_this_reader_does_not_know_is_passed_over_not_counted():
    """Forward compatible: the trainer may write kinds (and fields) that this reader predates."""
    lines = [
        *GOOD_RUN[:4],
        WORKER + event_line("notice_saved", time=136.0, step=3, seconds_to_deadline=12.5),
        WORKER + event_line("a_kind_from_the_future", time=137.0, payload={"anything": [1, "two"]}),
        WORKER + event_line("step", time=400.0, step=10, seconds=1.5, memory_gib=21.3),  # a new field
        *GOOD_RUN[4:],
    ]
    record = read(lines)
    assert record.skipped == 0
    assert record.steps[10] == (1, 1.5, 400.0)
    # parse_event still gives any kind's object to the readers of other kinds.
    assert parse_event(lines[4]) == {"event": "notice_saved", "time": 136.0, "step": 3, "seconds_to_deadline": 12.5}


def test_ray_echo_of_the_command_is_not_an_event_line():
    """The echo holds the command, which may print events: it is neither read nor counted."""
    echo = 'Running entrypoint for job raysubmit_1: python -c "print(\'maxtext-tpu-event {\\"event\\":\\"step\\"\')"'
    record = read([echo, *GOOD_RUN])
    assert record.skipped == 0 and record.summary(90.0, 160.0) == read(GOOD_RUN).summary(90.0, 160.0)


def test_a_damaged_controller_count_is_passed_over():
    lines = [*GOOD_RUN, *retry("preemption", 1), *retry("preemption", "9" * 5000)]
    assert read(lines).summary(90.0, 160.0)["preemptions"] == 1


def test_a_maxtext_step_message_whose_numbers_do_not_read_is_no_step():
    """The trainer parses these in a logging handler, where an exception would reach MaxText."""
    assert maxtext_step("completed step: 3, seconds: 1.2.3, TFLOP/s/device: 1.0") is None
    assert maxtext_step("completed step: 3, seconds: ., TFLOP/s/device: 1.0") is None
    assert maxtext_step("completed step: 3, seconds: " + "9" * 400 + ", TFLOP/s/device: 1.0") is None  # inf
    assert maxtext_step("completed step: 1" + "0" * 20 + ", seconds: 1.0") is None


def strict_json(summary: dict) -> dict:
    return json.loads(json.dumps(summary, allow_nan=False))


def test_every_summary_number_is_finite_or_none():
    huge = 1.7e308  # finite, but sums and differences of two overflow
    record = read(
        [
            WORKER + event_line("attempt", time=-huge, workers=1),
            WORKER + event_line("step", time=-huge, step=0, seconds=huge),
            WORKER + event_line("attempt", time=huge, workers=1),
            WORKER + event_line("step", time=huge, step=1, seconds=huge),
        ]
    )
    summary = strict_json(record.summary(0.0, 100.0))
    assert summary["seconds_lost_to_restarts"] is None  # huge - (-huge)
    assert summary["goodput_percent"] is None  # huge + huge seconds of steps
    assert summary["restarts"] == 1
    assert strict_json(record.summary(-huge, huge))["seconds_to_first_step"] == 0.0


@pytest.mark.parametrize(
    ("start", "end"),
    [(100.0, 100.0), (160.0, 90.0), (90.0, None), (None, 160.0)],
    ids=["no-time", "end-first", "no-end", "no-start"],
)
def test_a_job_without_wall_time_has_no_goodput(start, end):
    assert read(GOOD_RUN).summary(start, end)["goodput_percent"] is None


def test_the_queue_time_is_none_when_the_log_head_was_not_read():
    """A log read from its middle has steps but not the first `attempt` line: the first group's
    start is unknown, and so is the wait for it (never taken from a later group or a step)."""
    summary = read([*steps(5, 8, start=160.0), WORKER + event_line("attempt", time=170.0, workers=1)]).summary(
        90.0, 200.0
    )
    assert summary["seconds_queued"] is None
    assert summary["seconds_to_first_step"] == 70.0


def test_a_start_phase_by_phase():
    lines = [
        *started(104.0, 100.0, prepared=120.0, compiled=150.0),
        *first_step(152.0, 2.0),
        *steps(0, 3, start=152.0),
    ]
    summary = read(lines).summary(start=90.0, end=160.0)
    assert summary["start_phases"] == [
        {
            "queued": 10.0,  # the job's start to the worker's process
            "worker_start": 4.0,
            "trainer_start": 16.0,
            "restore": 0.0,
            "compile": 30.0,
            "compile_cache": "miss",
            "compile_cache_why": None,  # JAX logged no key: nothing to compare
            "first_step": 2.0,
        }
    ]
    # The phases are the whole of the wait for the first step.
    assert sum(summary["start_phases"][0][phase] for phase in PHASES) == summary["seconds_to_first_step"]
    assert summary["seconds_lost_to_restarts_by_phase"] is None


def test_a_restart_is_split_into_the_same_phases():
    lines = [
        *started(104.0, 100.0, prepared=120.0, compiled=150.0),
        *first_step(152.0, 2.0),
        *steps(0, 5, start=152.0),  # the last at 162
        *retry("preemption", 1),
        # The new group: its process 20 s after the last step, a 5 s restore, a cache hit.
        *started(185.0, 182.0, prepared=200.0, restore=5.0, compiled=203.0, cache="hit"),
        *first_step(204.0, 1.0),
        *steps(4, 9, start=204.0),
    ]
    summary = read(lines).summary(start=90.0, end=220.0)
    restart = summary["start_phases"][1]
    assert restart == {
        "queued": 20.0,  # from the last step before it: the wait for the failure is in it
        "worker_start": 3.0,
        "trainer_start": 10.0,
        "restore": 5.0,
        "compile": 3.0,
        "compile_cache": "hit",
        "compile_cache_why": None,
        "first_step": 1.0,
    }
    assert summary["seconds_lost_to_restarts_by_phase"] == {phase: restart[phase] for phase in PHASES}
    # The restart's phases are the whole of the time it lost.
    assert sum(restart[phase] for phase in PHASES) == summary["seconds_lost_to_restarts"] == 42.0


NOT_WRITTEN = "compiled in 0.40 s, under JAX's 1.00 s minimum (jax_persistent_cache_min_compile_time_secs)"


def whys(*groups: dict) -> list[str | None]:
    """The `compile_cache_why` of each group of a job whose groups start 100 s apart."""
    lines: list[str] = []
    for index, group in enumerate(groups):
        at = 100.0 * (index + 1)
        lines += started(at + 2, at, prepared=at + 10, compiled=at + 20, **group)
        lines += steps(0, 2, start=at + 21)
    return [phases["compile_cache_why"] for phases in read(lines).summary(90.0, 500.0)["start_phases"]]


def test_a_miss_says_why_from_the_key_jax_logged():
    """An elastic job that shrinks compiles a program of its own for the workers left (the key
    holds the devices), and finds the first one again when it grows back."""
    assert whys(
        {"cache_key": "jit_train_step-a", "workers": 2},
        {"cache_key": "jit_train_step-b", "workers": 1},
        {"cache_key": "jit_train_step-a", "workers": 2, "cache": "hit"},
    ) == [
        "no entry yet for this program, its flags, JAX and libtpu versions and devices",
        "a program of its own for 1 worker (the start before had 2)",
        None,
    ]
    # The same workers, another key: the program or how it is compiled changed.
    assert whys({"cache_key": "jit_train_step-a"}, {"cache_key": "jit_train_step-c"})[1] == (
        "the program's key changed since the start before (its flags, versions or the program itself)"
    )


def test_a_miss_of_a_program_compiled_before_says_whether_jax_wrote_it():
    first_unwritten = {"cache_key": "jit_train_step-a", "cache_not_written": NOT_WRITTEN}
    assert whys(first_unwritten, {"cache_key": "jit_train_step-a"}) == [
        "no entry yet for this program, its flags, JAX and libtpu versions and devices; not written "
        f"({NOT_WRITTEN}), so the next start compiles it again",
        f"an earlier start compiled this program and JAX did not write it: {NOT_WRITTEN}",
    ]
    assert whys({"cache_key": "jit_train_step-a"}, {"cache_key": "jit_train_step-a"})[1] == (
        "an earlier start compiled this program, but its entry was not found (emptied, expired or unreadable)"
    )


def test_a_miss_without_a_key_and_a_cache_that_is_off_say_no_why():
    assert whys({}, {"cache_key": "jit_train_step-a"}, {"cache": "off"}) == [
        None,
        # The group before logged no key: this is the first key the job saw.
        "no entry yet for this program, its flags, JAX and libtpu versions and devices",
        None,
    ]


def test_a_group_stopped_while_compiling_shows_the_phases_it_reached():
    lines = [
        WORKER + event_line("attempt", time=104.0, workers=1, process_started=100.0),
        WORKER + event_line("phase", time=120.0, phase="trainer_start", seconds=16.0),
        WORKER + event_line("phase", time=120.0, phase="restore", seconds=0.0),
    ]
    phases = read(lines).summary(start=90.0, end=130.0)["start_phases"]
    assert phases == [{**NO_PHASES, "queued": 10.0, "worker_start": 4.0, "trainer_start": 16.0, "restore": 0.0}]
    # ... and the next group's wait counts from the last phase it reached.
    lines += started(131.0, 125.0, prepared=140.0, compiled=141.0, cache="hit")
    assert read(lines).summary(start=90.0, end=150.0)["start_phases"][1]["queued"] == 5.0


def test_a_worker_process_started_before_the_ask_counts_from_the_ask():
    """Ray may hand the group a worker process it had started ahead: its wait is none, and its
    start counts from the ask."""
    lines = started(104.0, 50.0, prepared=120.0, compiled=150.0)
    phases = read(lines).summary(start=90.0, end=160.0)["start_phases"][0]
    assert (phases["queued"], phases["worker_start"]) == (0.0, 14.0)


def test_phase_events_read_twice_count_once():
    once = [*started(104.0, 100.0, prepared=120.0, compiled=150.0), *first_step(152.0, 2.0), *steps(0, 3, 152.0)]
    twice = [line for line in once for _ in range(2)]
    assert read(twice).summary(90.0, 160.0) == read(once).summary(90.0, 160.0)


@pytest.mark.parametrize(
    "fields",
    [
        {"phase": "warmup", "seconds": 1.0},  # not a phase the trainer times
        {"phase": "queued", "seconds": 1.0},  # the reader's own, never an event
        {"phase": "compile", "seconds": -1.0},
        {"phase": "compile", "seconds": 1.0, "cache": "maybe"},
        {"phase": "compile"},
    ],
)
def test_a_damaged_phase_event_is_skipped_and_counted(fields):
    lines = [*started(104.0, 100.0, prepared=120.0, compiled=150.0), WORKER + event_line("phase", time=151.0, **fields)]
    summary = read(lines).summary(90.0, 160.0)
    assert summary["event_lines_skipped"] == 1
    assert summary["start_phases"][0]["compile"] == 30.0


def test_docs_list_every_why_a_miss_can_give():
    """docs/training.md's table of `compile_cache_why`, against what the reader says."""
    docs = (PROJECT_ROOT / "docs" / "training.md").read_text()
    table = docs.split("| `compile_cache_why` | when |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(" | ")[0].strip("| ") for line in table.splitlines()[2:]]
    prefixes = {re.split(r" N | S |\(\.\.\.\)|:", row)[0].strip() for row in rows}
    said = [
        *whys({"cache_key": "a", "workers": 2}, {"cache_key": "b", "workers": 1}, {"cache_key": "c", "workers": 1}),
        *whys({"cache_key": "a", "cache_not_written": NOT_WRITTEN}, {"cache_key": "a"}, {"cache_key": "a"}),
    ]
    matched = {prefix for prefix in prefixes for why in said if why is not None and why.startswith(prefix)}
    assert matched == prefixes and len(prefixes) == len(rows) == 5, (prefixes, said)
