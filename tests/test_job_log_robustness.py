"""No log can break a job's result (issue 19): the log tail is the log's newest bytes, read in
bounded memory; a log line of any shape (long lines, event lines with fields of the wrong type,
step lines whose numbers do not read) never keeps a job from being recorded, nor a failing job's
error from giving its status and reason.

Against a fake Ray head on 127.0.0.1 (its Jobs API and its state API's log endpoint: a job
submitted to it has already ended, having printed a given log), and against the real local head
for the whole path (`slow`)."""

from __future__ import annotations

import shlex
import tracemalloc

import pytest

from domain.training.job_events import event_line
from tests.support.fake_ray_head import FakeRayHead, good_events, steps_log, text
from tests.support.ray_job_harness import STEP, inputs
from workloads import jobs_api
from workloads.jobs_api import JobsApi
from workloads.ray_job import RayJobProvider
from workloads.ray_job import record as ray_job_record
from workloads.ray_job import wait as job_wait
from workloads.ray_job.record import RayJobError

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)

EXIT_3 = "Job entrypoint command failed with exit code 3"

# Event lines a trainer could print that give no usable event (each is skipped and counted), and
# one of a kind this reader does not know (passed over, not counted).
BAD_EVENTS = [
    'maxtext-tpu-event {"event":"step","time":1010.5,"step":1,"seconds":"n/a"}',
    'maxtext-tpu-event {"event":"step","time":1010.7,"step":null,"seconds":0.5}',
    'maxtext-tpu-event ["step", 1]',
    'maxtext-tpu-event {"event":"failed","message":404}',
]
UNKNOWN_KIND = event_line("notice_saved", time=1011.0, step=1, seconds_to_deadline=3.5)
# Step lines the step parser's pattern matches but whose numbers do not read.
BAD_STEPS = [STEP.format(step=1, tokens=100.0, loss="-"), STEP.format(step=1, tokens=100.0, loss="abc")]


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(job_wait, "POLL_SECONDS", 0.2)
    monkeypatch.setattr(job_wait, "LOST_CONTACT_SECONDS", 3.0)


# ------------------------------------------------------------------ the log tail is the newest bytes
def long_lines(count: int, width: int = 2000) -> list[str]:
    return [f"old line {number:05d} " + "x" * width for number in range(count)]


def test_the_tail_keeps_the_newest_bytes_of_the_last_lines_whole_lines_only():
    lines = [*long_lines(480), "the real end"]
    with FakeRayHead(text(*lines)) as head, JobsApi(head.address) as api:
        tail = api.log_tail("job", "node-1", max_bytes=100_000)
    assert head.log_requests[0]["lines"] == str(jobs_api.LOG_TAIL_LINES)
    assert len(tail) <= 100_000
    kept = tail.decode().splitlines()
    assert kept[-1] == "the real end"
    # Whole lines, and the newest ones: the lines just before the end, in order.
    assert kept[:-1] == lines[-len(kept) : -1] and kept[0].startswith("old line ")


def test_a_cut_at_a_line_boundary_keeps_that_line():
    lines = ["a" * 99, "b" * 99, "c" * 99]  # 100 bytes each with the newline
    with FakeRayHead(text(*lines)) as head, JobsApi(head.address) as api:
        assert api.log_tail("job", "node-1", max_bytes=200) == text(*lines[1:])
        assert api.log_tail("job", "node-1", max_bytes=199) == text(lines[2])


def test_a_last_line_longer_than_the_cap_gives_its_newest_bytes():
    with FakeRayHead(text("first", "y" * 5000 + "END")) as head, JobsApi(head.address) as api:
        tail = api.log_tail("job", "node-1", max_bytes=1000)
    assert len(tail) == 1000 and tail.endswith(b"END\n")


def peak_bytes_while(operation) -> int:
    tracemalloc.start()
    try:
        operation()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_the_tail_holds_at_most_the_cap_plus_a_chunk():
    """8 MB of lines (500 of 16 kB): the read keeps at most max_bytes and the chunk it is reading."""
    log = text(*long_lines(500, width=16_000))
    cap = 256 * 1024
    with FakeRayHead(log) as head, JobsApi(head.address) as api:
        head.tail = lambda _lines: log  # answered without a copy made while memory is traced
        api.client()  # the SDK's version check, outside the measurement
        tails: list[bytes] = []
        peak = peak_bytes_while(lambda: tails.append(api.log_tail("job", "node-1", max_bytes=cap)))
    assert tails[0].endswith(log[-16_000:]) and len(tails[0]) <= cap
    assert peak < cap + 1024 * 1024, f"peak {peak:,} bytes for an {len(log):,}-byte answer"


def test_a_whole_log_read_cuts_a_line_longer_than_the_limit_in_bounded_memory():
    log = b"first\n" + b"z" * 8_000_000 + b"\nlast"  # 8 MB without a newline
    with FakeRayHead(log) as head, JobsApi(head.address) as api:
        head.tail = lambda _lines: log
        api.client()
        lines: list[str] = []
        peak = peak_bytes_while(lambda: lines.extend(api.log_lines("job", "node-1", max_line_bytes=1000)))
    assert lines == ["first", "z" * 1000, "last"]
    assert peak < 1024 * 1024, f"peak {peak:,} bytes"


def test_a_whole_log_read_gives_every_line_across_chunks():
    """Lines that straddle the reads' 64 kB chunks, empty lines, stray bytes."""
    lines = [f"{number:06d} " + "w" * (number % 300) for number in range(3000)]
    log = text(*lines[:10], "", "stray \xff", *lines[10:]).replace("stray \xff".encode(), b"stray \xff\xfe")
    with FakeRayHead(log) as head, JobsApi(head.address) as api:
        read = list(api.log_lines("job", "node-1"))
    assert read == [*lines[:10], "", "stray \ufffd\ufffd", *lines[10:]]


def test_a_failing_job_shows_its_real_last_lines_after_long_ones():
    log = text(*long_lines(400), "the real end: loss exploded")  # 800 kB: more than the cap
    with (
        FakeRayHead(log, status="FAILED", message=EXIT_3) as head,
        pytest.raises(RayJobError) as caught,
    ):
        RayJobProvider().create(inputs(head, "python train.py"))
    message = str(caught.value)
    assert "the real end: loss exploded" in message
    assert message.splitlines()[-1] == f"status: FAILED; message: {EXIT_3}"


def test_a_succeeding_job_reads_its_steps_from_the_end_after_long_lines():
    log = text(*long_lines(400), *steps_log())
    with FakeRayHead(log) as head:
        outs = RayJobProvider().create(inputs(head, "python train.py")).outs
    assert (outs["status"], outs["steps_completed"], outs["final_loss"]) == ("SUCCEEDED", 3, 1.0)
    assert outs["tokens_per_second_per_device"] == 250.0  # steps 1 and 2; step 0 left out


# ------------------------------------------------------------------ no line can break a result
def test_a_job_printing_bad_event_and_step_lines_is_recorded_succeeded():
    log = text(*good_events(), *BAD_EVENTS, UNKNOWN_KIND, *BAD_STEPS, *steps_log())
    with FakeRayHead(log) as head:
        outs = RayJobProvider().create(inputs(head, "python train.py")).outs
    assert outs["status"] == "SUCCEEDED"
    assert (outs["steps_completed"], outs["final_loss"], outs["diverged"]) == (3, 1.0, False)
    assert outs["event_lines_skipped"] == len(BAD_EVENTS)  # the unknown kind is not counted
    assert (outs["restarts"], outs["steps_recomputed"]) == (0, 0)
    assert "event_lines_skipped" in ray_job_record.EXPORTED  # a stack output: eventLinesSkipped


def test_a_failing_job_printing_bad_lines_keeps_its_status_and_reason():
    failed = event_line("failed", message="training failed: worker errors used up maxFailures = 0")
    log = text(*good_events(), *BAD_EVENTS, *BAD_STEPS, failed, "loss exploded")
    with (
        FakeRayHead(log, status="FAILED", message=EXIT_3) as head,
        pytest.raises(RayJobError) as caught,
    ):
        RayJobProvider().create(inputs(head, "python train.py"))
    message = str(caught.value)
    assert "ended FAILED: training failed: worker errors used up maxFailures = 0." in message
    assert "loss exploded" in message
    assert message.splitlines()[-1] == f"status: FAILED; message: {EXIT_3}"


# ------------------------------------------------------------------ the same on a real Ray head
def printing(*lines: str, long_lines_first: int = 0, exit_code: int = 0) -> str:
    """A command printing `long_lines(long_lines_first)`, then `lines`, then exiting."""
    script = "; ".join(
        [
            "import sys",
            f"[print(f'old line {{number:05d}} ' + 'x' * 2000) for number in range({long_lines_first})]",
            *(f"print({line!r})" for line in lines),
            f"sys.exit({exit_code})",
        ]
    )
    return f"python -c {shlex.quote(script)}"


@pytest.mark.slow
def test_on_a_real_head_bad_lines_never_break_a_result(local_ray_head):
    entrypoint = printing(*good_events(), *BAD_EVENTS, UNKNOWN_KIND, *BAD_STEPS, *steps_log(), long_lines_first=300)
    outs = RayJobProvider().create(inputs(local_ray_head, entrypoint)).outs
    assert outs["status"] == "SUCCEEDED"
    assert (outs["steps_completed"], outs["final_loss"]) == (3, 1.0)
    # Ray's echo of the command (which holds the same lines) is not counted.
    assert outs["event_lines_skipped"] == len(BAD_EVENTS)

    failing = printing(*good_events(), *BAD_EVENTS, *BAD_STEPS, "the real end", long_lines_first=300, exit_code=3)
    with pytest.raises(RayJobError) as caught:
        RayJobProvider().create(inputs(local_ray_head, failing))
    message = str(caught.value)
    assert "ended FAILED" in message and "the real end" in message
    assert message.splitlines()[-1].startswith(f"status: FAILED; message: {EXIT_3}")
