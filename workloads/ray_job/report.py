"""Where a run's page (domain/reports/run_page.py) is written, and writing it. Beside the run's
checkpoints where those are on this machine (a head reached on it: `<run>/report.html`), else
under the project's `.runs/pages/` (a GKE job's checkpoints are in its bucket; its page is for
the person who ran `pulumi up`). Writing never fails a run: an error is kept as a warning naming
the path and the reason."""

from __future__ import annotations

from pathlib import Path

from domain.paths import RUN_PAGES

PAGE_NAME = "report.html"


def page_path(job_id: str, checkpoint_dir: str | None, beside_checkpoints: bool) -> Path:
    if checkpoint_dir and beside_checkpoints:
        return Path(checkpoint_dir) / PAGE_NAME
    return RUN_PAGES / f"{job_id}.html"


def write_page(path: Path, text: str) -> str | None:
    """Writes the page (its directory too); the problem, in words, where it could not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole, then moved over the old page: a reader never sees half a page.
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    except OSError as error:
        return f"the run's page could not be written to {path} ({error})"
    return None
