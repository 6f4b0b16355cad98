"""Running Python in the trainer environment (.venv-trainer: MaxText, ArrayRecord, pyarrow), as
the job's driver and workers run, from tests that run in the product's own environment."""

from __future__ import annotations

import os
import subprocess

import pytest

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON


def trainer_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if not TRAINER_PYTHON.exists():
        pytest.skip(f"the trainer environment is not set up ({TRAINER_PYTHON}); run ./scripts/setup")
    return subprocess.run(
        [str(TRAINER_PYTHON), *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
