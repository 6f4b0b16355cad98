"""A GKE run's TensorBoard scalars, beside its checkpoints: the same event files ScalarWriter
writes for a run on this machine, written into a temporary directory here and then uploaded to
the checkpoint bucket, as the objects behind `<checkpoint_dir>/tensorboard/job-log/` (the RayJob's
`checkpoint_bucket` input says which bucket backs the mount), through the Cloud Storage JSON API
with the operator's own Google token (workloads/bucket_files.py). MaxText's own logs sit at that
`tensorboard/` directory's top, so `tensorboard --logdir gs://BUCKET/RUN/tensorboard` shows both.

Like ScalarWriter, it never fails a run that trained: a write or upload error is kept as
`problem`, which the provider reports as a warning naming the gs:// path and the reason."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from domain.training.run_scalars import Scalar
from workloads.bucket_files import BucketFiles, BucketMounts
from workloads.jobs_api.errors import JobsApiError
from workloads.jobs_api.gke_access import GkeTarget, operator_session
from workloads.ray_job.record import CheckpointBucket
from workloads.ray_job.tensorboard import JOB_LOG_RUN, ScalarWriter


class BucketScalars:
    """ScalarWriter's `add`, `finish`, `problem` and `wrote`, for a run whose `logdir` (a worker
    path) is on the cluster's checkpoint mount: `finish` uploads what was written."""

    def __init__(self, logdir: str, bucket: CheckpointBucket | None, gke: GkeTarget):
        self.run = f"{logdir.rstrip('/')}/{JOB_LOG_RUN}"
        self.gke = gke
        self.bucket = bucket
        self.problem: str | None = None
        self.uploaded = 0
        self._scratch = tempfile.TemporaryDirectory(prefix="job-log-")
        self.url = self.run  # the gs:// path, once known
        if bucket is None:
            self.problem = (
                "the run's TensorBoard scalars were not written to the checkpoint bucket: the infra stack exports no "
                "checkpointBucketUrl, so the RayJob was not told which bucket backs the checkpoint mount (runs after "
                "`pulumi up` on the infra stack with this checkout have them)"
            )
        else:
            try:
                self.url = BucketMounts(bucket.mounts()).url_of(self.run)
            except OSError as error:
                self.problem = f"the run's TensorBoard scalars were not written to the checkpoint bucket ({error})"
        self._writer = ScalarWriter(self._scratch.name, shown_as=self.url)

    def add(self, scalars: Iterable[Scalar]) -> None:
        if self.problem is None:
            self._writer.add(scalars)

    @property
    def wrote(self) -> bool:
        """Whether the run has scalars in the bucket: all of them were uploaded."""
        return self.uploaded > 0 and self.problem is None

    def finish(self, start_phases: Sequence[Mapping[str, Any]] | None) -> None:
        """Closes the event file as ScalarWriter.finish does, uploads it, and removes it here."""
        try:
            if self.problem is None:
                self._writer.finish(start_phases)
                self.problem = self._writer.problem or self._upload()
        finally:
            self._scratch.cleanup()

    def _upload(self) -> str | None:
        """Uploads each event file; the problem, in words, where one was not uploaded."""
        if not self._writer.directory.is_dir():
            return None  # nothing was written: the log had no scalars
        files = sorted(path for path in self._writer.directory.iterdir() if path.is_file())
        assert self.bucket is not None  # else `problem` was set at the start
        try:
            with operator_session(self.gke) as session:
                bucket = BucketFiles(self.bucket.mounts(), session)
                for file in files:
                    bucket.upload(f"{self.run}/{file.name}", file.read_bytes())
                    self.uploaded += 1
        except (OSError, JobsApiError) as error:
            return f"the run's TensorBoard scalars could not be uploaded to {self.url} ({error})"
        return None
