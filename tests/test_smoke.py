"""The README's first command, as a newcomer runs it: the main job on its embedded default; and
what it says, within seconds, when something else holds the dashboard's port."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from domain.compile_cache import COMPILE_CACHE_ENV
from domain.paths import TRAINER_PYTHON
from domain.training.dataset_manifest import MANIFEST_NAME
from domain.training.run_scalars import LOSS, start_tag
from domain.training.start_phases import PHASES
from tests.support.browser import chromium
from tests.support.corpus import corpus_manifest, shard_files
from tests.support.fake_jobs_api import FakeHttpServer
from tests.support.pages import page_keys, shown_outputs
from tests.support.port_holder import PortHolder
from tests.support.pulumi_harness import PROJECT_ROOT
from workloads import smoke
from workloads.ray_job.record import EXPORTED
from workloads.ray_job.tensorboard import JOB_LOG_RUN

pytestmark = pytest.mark.timed  # reads the clock or waits on a deadline (tests/conftest.py)


def reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")  # what JSON.parse refuses: NaN, Infinity


def run_smoke(*arguments: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """`./scripts/smoke ARGUMENTS` as a newcomer runs it: it must succeed and end with its result
    as one line of strict JSON."""
    completed = subprocess.run(
        [sys.executable, "-m", "workloads.smoke", *arguments],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed, json.loads(completed.stdout.strip().splitlines()[-1], parse_constant=reject_constant)


def assert_trained(completed: subprocess.CompletedProcess, result: dict) -> None:
    assert result["status"] == "SUCCEEDED"
    assert result["steps_completed"] == 6 and result["final_loss"] > 0 and result["diverged"] is False
    assert result["submission_id"].startswith("pulumi-maxtext-tpu-workloads-local-")
    assert f"RayJob {result['submission_id']}: SUCCEEDED" in completed.stderr
    # The goodput outputs of an uninterrupted run.
    assert (result["restarts"], result["preemptions"], result["failures"], result["steps_recomputed"]) == (0, 0, 0, 0)
    assert result["seconds_lost_to_restarts"] == 0
    assert 0 < result["seconds_to_first_step"] < result["duration_seconds"]
    assert 0 <= result["seconds_queued"] <= result["seconds_to_first_step"]  # the wait for the worker group, apart
    assert 0 < result["goodput_percent"] < 100
    assert list(result) == list(EXPORTED)
    # Its worker group's start, phase by phase, adds up to the wait for the first step.
    [start] = result["start_phases"]
    assert all(start[phase] is not None and start[phase] >= 0 for phase in PHASES), start
    assert sum(start[phase] for phase in PHASES) == pytest.approx(result["seconds_to_first_step"], abs=0.5)
    assert result["seconds_lost_to_restarts_by_phase"] is None
    assert f"its worker group started: queued {start['queued']:.1f} s" in completed.stderr
    # The run's scalars beside its checkpoints, as TensorBoard's own reader lists them.
    assert result["tensorboard_dir"] == f"{result['checkpoint_dir']}/tensorboard"
    events = EventAccumulator(str(Path(result["tensorboard_dir"]) / JOB_LOG_RUN))
    events.Reload()
    losses = events.Scalars(LOSS)
    assert [event.step for event in losses] == list(range(result["steps_completed"]))
    assert losses[-1].value == pytest.approx(result["final_loss"], abs=1e-4)
    [compile_seconds] = events.Scalars(start_tag("compile"))
    assert compile_seconds.value == pytest.approx(start["compile"], abs=1e-4)
    # Its page, named last on stderr, shows the numbers of the JSON line under their names.
    assert result["report_path"] == f"{result['checkpoint_dir']}/report.html"
    assert completed.stderr.strip().splitlines()[-1] == f"the run's page: {result['report_path']}"
    facts, figures = page_keys(Path(result["report_path"]))
    assert {"steps_completed", "final_loss", "goodput_percent", "tokens_trained", "duration_seconds"} <= facts.keys()
    assert shown_outputs(facts, result) == {}
    assert figures == ["loss", "step_seconds", "wall_time"]


def assert_page_as_seen(result: dict) -> None:
    """The run's page in Chromium: each plot drawn at its size, no console error, and the
    numbers a person reads there equal the JSON line's."""
    with chromium() as browser:
        view = browser.open(Path(result["report_path"]))
    assert view.console_errors == ()
    assert [image.key for image in view.images] == ["loss", "step_seconds", "wall_time"]
    assert all(image.rendered and image.width == image.natural_width for image in view.images), view.images
    assert shown_outputs(dict(view.facts), result) == {}
    assert view.facts["final_loss"] == str(result["final_loss"])


@pytest.mark.slow
def test_smoke_elastic_trains_the_tiny_preset_and_ends_with_the_result_as_json():
    completed, result = run_smoke("--elastic")
    assert_trained(completed, result)
    assert_page_as_seen(result)  # last: it is skipped where Chromium cannot be installed


@pytest.mark.slow
def test_smoke_run_twice_compiles_once(tmp_path):
    """The README's cold start: the second run loads the train step the first compiled, from a
    cache of their own here (the suite's is shared by every test, so could be warm already)."""
    env = {**os.environ, COMPILE_CACHE_ENV: str(tmp_path / "cache")}
    completed, first = run_smoke(env=env)
    assert_trained(completed, first)
    completed, second = run_smoke(env=env)
    assert_trained(completed, second)
    [cold], [warm] = first["start_phases"], second["start_phases"]
    assert (cold["compile_cache"], warm["compile_cache"]) == ("miss", "hit")
    assert cold["compile_cache_why"].startswith("no entry yet for this program")
    assert warm["compile_cache_why"] is None
    assert warm["compile"] < cold["compile"]
    assert "(cache hit)" in completed.stderr


def test_the_docs_name_every_field_of_the_smoke_result_in_order():
    """docs/outputs.md's paragraph on `./scripts/smoke` (the README's link for every field) lists
    the JSON result's fields."""
    outputs = " ".join((PROJECT_ROOT / "docs" / "outputs.md").read_text().split())
    paragraph = outputs.split("one line of strict JSON:", 1)[1].split("A diverged run", 1)[0]
    assert re.findall(r"`([a-z_]+)`", paragraph) == list(EXPORTED)


PARQUET = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
texts = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 7) for i in range(300)]
pq.write_table(pa.table({"text": texts[:150]}), sys.argv[1] + "/part-0.parquet")
pq.write_table(pa.table({"text": texts[150:]}), sys.argv[1] + "/part-1.parquet")
"""


@pytest.mark.slow
def test_smoke_trains_on_the_parquet_files_a_pattern_matches(tmp_path):
    """Parquet files as a team has them (no manifest): trained through Grain, named in the result."""
    subprocess.run([str(TRAINER_PYTHON), "-c", PARQUET, str(tmp_path)], check=True, timeout=120)
    pattern = str(tmp_path / "part-*.parquet")
    _, result = run_smoke("--dataset", pattern)
    assert result["status"] == "SUCCEEDED" and result["steps_completed"] == 6
    assert result["dataset_files"] == pattern and result["dataset_hash"] is None  # no manifest
    # Each of the 6 steps trains at most one packed sequence of 64 tokens.
    assert 0 < result["tokens_trained"] <= 6 * 64
    assert result["tensorboard_dir"] == f"{result['checkpoint_dir']}/tensorboard"  # the run's scalars
    data_record = json.loads((Path(result["checkpoint_dir"]) / "data.json").read_text())
    assert (data_record["files"], data_record["tokenizer"], data_record["shuffle_seed"]) == (pattern, "llama3", 0)


def test_a_corpus_too_small_tells_the_smoke_run_its_own_flags(tmp_path, capsys):
    """The smoke run cannot `pulumi config set epochs`, and its --set num_epoch is refused (the
    data settings own it): it has --epochs, and the refusal names it (issue 32)."""
    files = shard_files(2)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / MANIFEST_NAME).write_text(corpus_manifest(60, None, files=files).to_json())
    with socket.socket() as probe:  # a port nothing listens on: no head is probed or started
        probe.bind(("127.0.0.1", 0))
        address = f"http://127.0.0.1:{probe.getsockname()[1]}"
    argv = ["--address", address, "--dataset", str(tmp_path / "data-*.array_record"), "--set", "steps=500"]
    assert smoke.main([*argv, "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "its 60 documents give at most 60 sequences" in err and "120 steps in 2 passes" in err
    assert "the run takes 500 steps of 1 sequence;" in err
    assert "the smoke run's --epochs 9), or lower maxtextOverrides.steps (the smoke run's --set steps=N)" in err
    assert "starting a loopback-only Ray head" not in err
    with pytest.raises(SystemExit):
        smoke.parse_args(["--epochs", "2"])
    assert "--epochs applies to --dataset" in capsys.readouterr().err


# A process of its own holds the port on 127.0.0.1 (tests/support/port_holder.py).
FAIL_FAST_SECONDS = smoke.PROBE_SECONDS + 5


@pytest.mark.parametrize(
    "mode, says",
    [
        ("silent", "accepts connections but did not answer HTTP"),
        ("404", "answers HTTP but is not a Ray dashboard (/api/version gave HTTP 404, text/plain)"),
        ("html", "answers HTTP but is not a Ray dashboard (/api/version gave HTTP 200, text/html)"),
    ],
)
def test_a_port_held_by_something_else_fails_within_seconds_naming_it(mode, says, capsys):
    with PortHolder(mode) as holder:
        started = time.monotonic()
        code = smoke.main(["--address", f"http://127.0.0.1:{holder.port}"])
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and elapsed < FAIL_FAST_SECONDS, f"{code} after {elapsed:.0f} s: {err}"
    assert f"port {holder.port} on 127.0.0.1 is held by pid {holder.pid} ({sys.executable}" in err
    assert says in err
    # What to do instead: not "run the smoke" (what the user just did).
    assert "starts one for you" not in err and f"--address http://127.0.0.1:{holder.port + 1}" in err
    assert "starting a loopback-only Ray head" not in err


AMBIENT_TOKEN = "token-of-another-cluster"


def _answers(status: int, body: str):
    return lambda _method, _path: (status, body.encode())


@pytest.mark.parametrize(
    "status, body",
    [(401, "Unauthorized: Missing authentication token"), (403, "Forbidden"), (404, "not found"), (200, "{}")],
)
def test_the_shells_ray_token_is_never_sent_to_a_holder_that_has_not_answered_as_ray(status, body, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", AMBIENT_TOKEN)
    with FakeHttpServer(_answers(status, body), content_type="application/json") as holder:
        with pytest.raises(smoke.SmokeError, match="is not a Ray dashboard"):
            smoke.existing_head(holder.address)
    assert holder.requests and all("authorization" not in headers for headers in holder.headers)


def test_a_ray_head_that_wants_a_token_gets_it_after_it_has_said_so(monkeypatch):
    """A Ray dashboard answers /api/authentication_mode without a token (ray/dashboard/
    http_server_head.py's public paths); only then is the token sent, to /api/version."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", AMBIENT_TOKEN)
    answers = {
        "/api/authentication_mode": (200, b'{"authentication_mode": "token"}'),
        "/api/version": (200, b'{"ray_version": "2.60.0"}'),
    }
    with FakeHttpServer(lambda _method, path: answers[path], content_type="application/json") as head:
        assert smoke.existing_head(head.address)
    assert [path for _, path in head.requests] == ["/api/authentication_mode", "/api/version"]
    assert "authorization" not in head.headers[0]
    assert head.headers[1]["authorization"] == f"Bearer {AMBIENT_TOKEN}"


@pytest.mark.parametrize("address", ["http://10.0.0.1:8265", "https://127.0.0.1:8265", "http://127.0.0.1"])
def test_the_address_must_be_a_loopback_dashboard_url(address, capsys):
    with pytest.raises(SystemExit):
        smoke.parse_args(["--address", address])
    assert f"--address {address!r}: give a loopback dashboard URL" in capsys.readouterr().err


def test_two_smoke_runs_started_in_the_same_second_get_two_runs(monkeypatch):
    """Two smoke runs (two users, or two test sessions sharing the head) in the same second."""
    from domain.training.job import run_name_is_valid

    monkeypatch.setattr(smoke.time, "strftime", lambda _format: "20261204-120000")
    names = []
    for pid in (4242, 4243):
        monkeypatch.setattr(smoke.os, "getpid", lambda pid=pid: pid)
        names.append(smoke.fresh_run_name("tiny-cpu"))
    assert names[0] != names[1] and all(run_name_is_valid(name) for name in names)


@pytest.mark.slow
def test_a_real_ray_head_with_token_authentication_is_recognised_and_reused(local_ray_head):
    """Ray's own dashboard (2.60, token auth on) answers the token-free question first."""
    assert smoke._authentication_mode(local_ray_head.address, "127.0.0.1", 0) == "token"
    assert smoke.existing_head(local_ray_head.address)
