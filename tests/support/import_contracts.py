"""import-linter's own CLI, as the contract tests run it: over a config and a tree of their choosing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def run_lint_imports(cwd: Path, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`lint-imports` in `cwd`, with `config` (pyproject.toml there when None), never cached."""
    options = [] if config is None else ["--config", str(config)]
    return subprocess.run(
        [str(LINT_IMPORTS), *options, "--no-cache", "--no-logo"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
