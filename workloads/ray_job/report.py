"""Where a run's page (domain/reports/run_page.py) is written, and writing it. Beside the run's
checkpoints where those are on this machine (a head reached on it: `<run>/report.html`), else
under the project's `.runs/pages/` (a GKE job's checkpoints are in its bucket; its page is for
the person who ran `pulumi up`). Writing never fails a run: an error is kept as a warning naming
the path and the reason."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.paths import RUN_PAGES
from domain.reports.run_page import RunHeader, outputs_of, run_page
from domain.training.goodput import GoodputOutputs
from domain.training.job_log import DataOutputs, StepCollector, StepOutputs
from domain.training.run_estimate import RunEstimate
from domain.training.run_series import RunSeries
from workloads.jobs_api import JobsApi
from workloads.jobs_api.errors import JobsApiError
from workloads.ray_job.progress import ProgressReporter, read_whole_log
from workloads.ray_job.record import JobInfo, JobRequest

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


def header_of(info: JobInfo, total_steps: int | None, failure: str | None = None) -> RunHeader:
    """The page's heading: Ray's record of the run, the steps asked for, why it did not succeed."""
    return RunHeader(
        submission_id=info.submission_id,
        status=info.status,
        start_time=info.start_time,
        end_time=info.end_time,
        duration_seconds=info.duration_seconds,
        total_steps=total_steps,
        failure=failure,
    )


def write_run_page(
    page: Path,
    header: RunHeader,
    outputs: tuple[StepOutputs, DataOutputs, GoodputOutputs],
    series: RunSeries,
    estimate: RunEstimate | None,
) -> str | None:
    """Draws and writes the run's page from its outputs (a finished run's JobResult is all three;
    a failed one's come from outputs_of); the problem, in words, where it could not. Never raises:
    a run that trained is recorded whatever happens to its page."""
    try:
        text = run_page(header, *outputs, series, estimate)
    except Exception as error:  # the page must never cost the run its record
        return f"the run's page could not be drawn for {page} ({type(error).__name__}: {error})"
    return write_page(page, text)


def undrawn(props: Mapping[str, Any]) -> bool:
    """Whether the state is of a finished run recorded before runs had pages (no `page_written`,
    which every run recorded since has): its next `pulumi up` updates it to draw one."""
    return "page_written" not in props and props.get("status") == "SUCCEEDED"


def draw_finished(job_id: str, job: JobRequest, api: JobsApi) -> str | None:
    """The page of a finished run, from its log on the head `api` reaches; None, with a warning,
    where the head no longer has it (the update still succeeds: the run is what it was)."""
    progress = ProgressReporter(job_id, job.total_steps)
    series = RunSeries()
    try:
        with api:
            info = api.call(f"reading RayJob {job_id}", lambda client: client.get_job_info(job_id))
            page = page_path(job_id, job.checkpoint_dir, api.shares_files())
            steps, goodput, log_problem = read_whole_log(api, info, StepCollector(), series.add)
    except JobsApiError as error:
        progress.status(f"warning: the run's page was not drawn: its record could not be read ({error})")
        return None
    if log_problem is not None:
        progress.status(log_problem)
    outputs = outputs_of(steps.summary(), goodput)
    problem = write_run_page(page, header_of(JobInfo.of(info), job.total_steps), outputs, series, job.estimate)
    if problem is not None:
        progress.status(f"warning: {problem}")
        return None
    progress.status(f"the run's page: {page}")
    return str(page)
