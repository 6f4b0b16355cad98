"""The process that answers MaxText's config check (domain/perf/maxtext_check.py): one per asking
process, started at its first ask and asked batch after batch (importing MaxText takes seconds),
replaced when it has ended, stopped when it fails or does not answer in time, and ended with its
asker. The real trainer environment answers the first test; the others use a stand-in
interpreter that speaks the same protocol, so they run in a second."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from domain.paths import PROJECT_ROOT
from domain.perf import maxtext_check, maxtext_validation
from domain.training.job import resolve_job


def flops_request(steps: int) -> dict[str, Any]:
    job = resolve_job("llama3-8b", run_name="checker", checkpoint_root="/tmp/checker", overrides={"steps": steps})
    return maxtext_validation.flops_request(job)


@pytest.fixture
def started(tmp_path, monkeypatch) -> list[subprocess.Popen]:
    """Every checker process started during the test, with an empty answer cache of its own and
    no checker left from an earlier test of this process."""
    maxtext_check.close_checker()
    monkeypatch.setattr(maxtext_check, "CACHE_DIR", tmp_path / "cache")
    processes: list[subprocess.Popen] = []
    real = subprocess.Popen

    def recording(args, *rest, **kwargs):
        process = real(args, *rest, **kwargs)
        if maxtext_check.TRAINER_MODULE in args:
            processes.append(process)
        return process

    monkeypatch.setattr(subprocess, "Popen", recording)
    yield processes
    maxtext_check.close_checker()


def stand_in(tmp_path: Path, body: str) -> Path:
    """An executable standing in for the trainer's interpreter: `body` runs as Python, with the
    batches on stdin."""
    path = tmp_path / "python"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


# Answers every batch as MaxText answers a configuration it accepts.
ANSWERING = """
import json, os, sys
print(os.getpid(), file=open(os.path.join(os.path.dirname(__file__), "pid"), "w"), flush=True)
for line in sys.stdin:
    asked = json.load(open(json.loads(line)["requests"]))
    print(json.dumps([{"errors": [], "blamed": [], "derived": {}}] * len(asked)), flush=True)
"""


def test_one_process_answers_every_batch_its_asker_has_and_ends_when_closed(started):
    first = maxtext_check.run_requests([flops_request(7)])
    second = maxtext_check.run_requests([flops_request(8), flops_request(9)])
    assert [answer["errors"] for answer in first + second] == [[], [], []]
    # MaxText counted each configuration itself: 8B on 2 x v6e-16.
    assert {answer["derived"]["num_target_devices"] for answer in first + second} == {32}
    [process] = started
    assert process.poll() is None  # alive, for the next ask
    maxtext_check.close_checker()
    assert process.poll() is not None


def test_a_checker_that_ended_between_asks_is_replaced(started, tmp_path):
    python = stand_in(tmp_path, ANSWERING)
    maxtext_check.run_requests([flops_request(7)], python=python)
    [first] = started
    first.kill()
    first.wait()
    [answer] = maxtext_check.run_requests([flops_request(8)], python=python)
    assert answer["errors"] == [] and len(started) == 2


def test_a_checker_that_does_not_answer_in_time_is_stopped_and_the_error_says_so(started, tmp_path, monkeypatch):
    monkeypatch.setattr(maxtext_check, "TIMEOUT_SECONDS", 1)
    monkeypatch.setattr(maxtext_check, "CLOSE_SECONDS", 1)
    python = stand_in(tmp_path, "import time\ntime.sleep(600)\n")  # reads nothing, answers nothing
    with pytest.raises(RuntimeError, match=r"^MaxText's config check did not finish within 1 s$"):
        maxtext_check.run_requests([flops_request(7)], python=python)
    [process] = started
    assert process.poll() is not None  # killed, not left behind
    assert not (tmp_path / "cache").exists()  # nothing recorded as an answer


def test_a_checker_that_fails_to_start_maxtext_says_why_in_its_own_last_words(started, tmp_path):
    python = stand_in(tmp_path, "import sys\nsys.exit(\"ModuleNotFoundError: No module named 'maxtext'\")\n")
    with pytest.raises(RuntimeError) as caught:
        maxtext_check.run_requests([flops_request(7)], python=python)
    assert str(caught.value) == (
        "MaxText's config check failed to run (exit status 1): ModuleNotFoundError: No module named 'maxtext'"
    )


ASKS_ONCE_AND_EXITS = """
import json, sys
from pathlib import Path
from domain.perf import maxtext_check
maxtext_check.CACHE_DIR = Path(sys.argv[2])
maxtext_check.run_requests([json.loads(sys.argv[3])], python=Path(sys.argv[1]))
"""


@pytest.mark.timed  # waits, within a bound, for the checker to end
def test_the_checker_ends_with_the_process_that_asked(tmp_path):
    python = stand_in(tmp_path, ANSWERING)
    subprocess.run(
        [sys.executable, "-c", ASKS_ONCE_AND_EXITS, str(python), str(tmp_path / "cache"), json.dumps(flops_request(7))],
        cwd=PROJECT_ROOT,
        check=True,
        timeout=60,
    )
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), f"the checker (pid {pid}) outlived its asker"
    assert [json.loads(path.read_text())["errors"] for path in (tmp_path / "cache").iterdir()] == [[]]
