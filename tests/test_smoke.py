"""The README's first command, as a newcomer runs it: the main job on its embedded default."""

import json
import subprocess
import sys

import pytest

from tests.support.pulumi_harness import PROJECT_ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("arguments", [[], ["--elastic"]], ids=["multislice", "elastic"])
def test_smoke_trains_the_tiny_preset_and_ends_with_the_result_as_json(arguments):
    completed = subprocess.run(
        [sys.executable, "-m", "workloads.smoke", *arguments],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["status"] == "SUCCEEDED"
    assert result["steps_completed"] == 6 and result["final_loss"] > 0
    assert result["submission_id"].startswith("pulumi-local-")
    assert f"RayJob {result['submission_id']}: SUCCEEDED" in completed.stderr
    # The goodput outputs of an uninterrupted run.
    assert (result["restarts"], result["preemptions"], result["failures"], result["steps_recomputed"]) == (0, 0, 0, 0)
    assert result["seconds_lost_to_restarts"] == 0
    assert 0 < result["seconds_to_first_step"] < result["duration_seconds"]
    assert 0 < result["goodput_percent"] < 100
