"""Where the checkout is: the root every project, venv and cache path is relative to."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
