"""Where the shared reference material lives (never copied into this tree).

`SHARED_DIR` overrides the default `../shared` next to the project root; tests that need a file
from it skip with the path they looked at when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from domain.paths import PROJECT_ROOT


def shared_dir() -> Path:
    return Path(os.environ.get("SHARED_DIR", PROJECT_ROOT.parent / "shared"))


def require_shared(relative: str) -> Path:
    path = shared_dir() / relative
    if not path.exists():
        pytest.skip(f"shared file {relative} not found at {path}; set SHARED_DIR to the shared folder")
    return path
