"""The README's first command, as a newcomer runs it: the main job on its embedded default."""

import json
import subprocess
import sys

import pytest

from tests.support.pulumi_harness import PROJECT_ROOT

pytestmark = pytest.mark.slow


def test_smoke_trains_the_tiny_preset_and_ends_with_the_result_as_json():
    completed = subprocess.run(
        [sys.executable, "-m", "workloads.smoke"],
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
