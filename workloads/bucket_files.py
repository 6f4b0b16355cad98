"""A GKE job's files as the buckets behind the cluster's mounts hold them, read through the Cloud
Storage JSON API before anything is submitted: the dataset (the infra stack's datasetRoot, backed
by datasetUri) and the checkpoints (checkpointRoot, backed by checkpointBucketUrl).

Paths are the workers' paths (domain/training/data_files.py's FileView): `/dataset/c4/*.parquet`
is `gs://BUCKET/PREFIX/c4/*.parquet`. A pattern is listed with the API's `matchGlob`, whose `*`
stays within one path segment as a filesystem glob's does
(https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob).
The requests carry the operator's own Google token, the one gke-gcloud-auth-plugin gives for
the cluster (workloads/jobs_api.py); gcloud's override variable points them at another endpoint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from urllib.parse import quote

import requests

STORAGE_API_OVERRIDE_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE"
STORAGE_API_DEFAULT = "https://storage.googleapis.com/storage/v1/"
REQUEST_TIMEOUT_SECONDS = 30
# A pattern matching more objects than this is counted no further (the checks ask "any?").
COUNT_AT_MOST = 10_000
_GLOB = re.compile(r"[*?\[{]")


def storage_api() -> str:
    return (os.environ.get(STORAGE_API_OVERRIDE_ENV) or STORAGE_API_DEFAULT).rstrip("/") + "/"


class BucketFiles:
    """The files under `mounts` (a worker's mount path -> the `gs://BUCKET[/PREFIX]` behind it),
    through `session`. Raises OSError for any answer but the files' (no access, no bucket, no
    answer), naming the object and what the API said."""

    def __init__(self, mounts: Mapping[str, str], session: requests.Session):
        self.mounts = {PurePosixPath(path): url.removeprefix("gs://").rstrip("/") for path, url in mounts.items()}
        self.session = session

    def url_of(self, path: str) -> str:
        bucket, name = self._object(path)
        return f"gs://{bucket}/{name}"

    def _object(self, path: str) -> tuple[str, str]:
        worker = PurePosixPath(path)
        for mount, backing in self.mounts.items():
            if worker == mount or mount in worker.parents:
                bucket, _, prefix = backing.partition("/")
                rest = worker.relative_to(mount).as_posix()
                name = "/".join(part for part in (prefix, rest) if part and part != ".")
                return bucket, name
        raise OSError(f"{path} is on none of the cluster's bucket mounts ({', '.join(map(str, self.mounts))})")

    def _get(self, url: str, params: Mapping[str, str], what: str) -> requests.Response:
        try:
            response = self.session.get(url, params=params, timeout=REQUEST_TIMEOUT_SECONDS)
        except requests.RequestException as error:
            raise OSError(f"the Storage API did not answer for {what} ({type(error).__name__})") from None
        if response.status_code not in (200, 404):
            raise OSError(f"the Storage API answered HTTP {response.status_code} for {what}: {_reason(response)}")
        return response

    def count(self, pattern: str) -> int:
        bucket, name = self._object(pattern)
        literal = name[: match.start()] if (match := _GLOB.search(name)) else name
        what = f"gs://{bucket}/{name}"
        params = {"prefix": literal, "matchGlob": name, "fields": "items(name),nextPageToken"}
        count = 0
        while count < COUNT_AT_MOST:
            response = self._get(f"{storage_api()}b/{quote(bucket, safe='')}/o", params, what)
            if response.status_code == 404:
                raise OSError(f"the Storage API knows no bucket {bucket} (for {what})")
            page = response.json()
            count += len(page.get("items") or [])
            if not page.get("nextPageToken"):
                break
            params = {**params, "pageToken": page["nextPageToken"]}
        return count

    def read_text(self, path: str) -> str | None:
        bucket, name = self._object(path)
        url = f"{storage_api()}b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        response = self._get(url, {"alt": "media"}, f"gs://{bucket}/{name}")
        return None if response.status_code == 404 else response.text


def _reason(response: requests.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason
