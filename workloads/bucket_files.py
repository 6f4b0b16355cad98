"""A GKE job's files as the buckets behind the cluster's mounts hold them, read through the Cloud
Storage JSON API before anything is submitted: the dataset (the infra stack's datasetRoot, backed
by datasetUri) and the checkpoints (checkpointRoot, backed by checkpointBucketUrl); and a GKE
run's TensorBoard scalars, uploaded beside its checkpoints once it has ended.

Paths are the workers' paths (domain/training/data_files.py's FileView): `/dataset/c4/*.parquet`
is `gs://BUCKET/PREFIX/c4/*.parquet`. A pattern is listed with the API's `matchGlob`, whose `*`
stays within one path segment as a filesystem glob's does
(https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob).
The requests carry the operator's own Google token, the one gke-gcloud-auth-plugin gives for
the cluster (workloads/jobs_api/gke_access.py); gcloud's override variable points them at another endpoint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from urllib.parse import quote

import requests

from domain.training.data_files import MatchedFile

STORAGE_API_OVERRIDE_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE"
STORAGE_API_DEFAULT = "https://storage.googleapis.com/storage/v1/"
REQUEST_TIMEOUT_SECONDS = 30
# A pattern may match at most this many objects: a longer listing (a hundred requests) is not
# checked here but by the job's driver, through the mount.
LIST_AT_MOST = 100_000
_GLOB = re.compile(r"[*?\[{]")


def storage_api() -> str:
    return (os.environ.get(STORAGE_API_OVERRIDE_ENV) or STORAGE_API_DEFAULT).rstrip("/") + "/"


def upload_api() -> str:
    """The JSON API's upload endpoint: its base with `/storage/v1/` as `/upload/storage/v1/`
    (https://cloud.google.com/storage/docs/uploading-objects, the JSON API's media upload)."""
    return storage_api().replace("/storage/v1/", "/upload/storage/v1/", 1)


class BucketMounts:
    """The objects behind the workers' paths on `mounts` (a worker's mount path -> the
    `gs://BUCKET[/PREFIX]` behind it), named without asking the API."""

    def __init__(self, mounts: Mapping[str, str]):
        self.mounts = {PurePosixPath(path): url.removeprefix("gs://").rstrip("/") for path, url in mounts.items()}

    def url_of(self, path: str) -> str:
        bucket, name = self._object(path)
        return f"gs://{bucket}/{name}"

    def _mount(self, path: str) -> tuple[PurePosixPath, str, str]:
        """The mount `path` is on: its path, and the bucket and prefix behind it."""
        worker = PurePosixPath(path)
        for mount, backing in self.mounts.items():
            if worker == mount or mount in worker.parents:
                bucket, _, prefix = backing.partition("/")
                return mount, bucket, prefix
        raise OSError(f"{path} is on none of the cluster's bucket mounts ({', '.join(map(str, self.mounts))})")

    def _object(self, path: str) -> tuple[str, str]:
        mount, bucket, prefix = self._mount(path)
        rest = PurePosixPath(path).relative_to(mount).as_posix()
        return bucket, "/".join(part for part in (prefix, rest) if part and part != ".")


class BucketFiles(BucketMounts):
    """The files under `mounts` (BucketMounts), through `session`. Raises OSError for any answer
    but the files' (no access, no bucket, no answer), naming the object and what the API said."""

    def __init__(self, mounts: Mapping[str, str], session: requests.Session):
        super().__init__(mounts)
        self.session = session
        self._md5: dict[MatchedFile, str] = {}

    def _get(self, url: str, params: Mapping[str, str], what: str) -> requests.Response:
        try:
            response = self.session.get(url, params=params, timeout=REQUEST_TIMEOUT_SECONDS)
        except requests.RequestException as error:
            raise OSError(f"the Storage API did not answer for {what} ({type(error).__name__})") from None
        if response.status_code not in (200, 404):
            raise OSError(f"the Storage API answered HTTP {response.status_code} for {what}: {_reason(response)}")
        return response

    def matches(self, pattern: str) -> list[MatchedFile]:
        """The objects `pattern` matches, with their sizes; their MD5s (absent from composite
        objects) are kept for `md5`. Raises OSError past LIST_AT_MOST objects."""
        mount, _, prefix = self._mount(pattern)
        bucket, name = self._object(pattern)
        literal = name[: match.start()] if (match := _GLOB.search(name)) else name
        what = f"gs://{bucket}/{name}"
        params = {"prefix": literal, "matchGlob": name, "fields": "items(name,size,md5Hash),nextPageToken"}
        found: list[MatchedFile] = []
        while True:
            if len(found) > LIST_AT_MOST:
                raise OSError(f"{what} matches more than {LIST_AT_MOST} objects, more than this check lists")
            response = self._get(f"{storage_api()}b/{quote(bucket, safe='')}/o", params, what)
            if response.status_code == 404:
                raise OSError(f"the Storage API knows no bucket {bucket} (for {what})")
            page = response.json()
            for item in page.get("items") or []:
                # The object's path on the workers, through the pattern's mount (the listing is
                # under its prefix).
                path = str(mount / str(item["name"]).removeprefix(prefix).lstrip("/"))
                file = MatchedFile(path, int(item.get("size") or 0))
                found.append(file)
                if isinstance(item.get("md5Hash"), str):
                    self._md5[file] = item["md5Hash"]
            if not page.get("nextPageToken"):
                break
            params = {**params, "pageToken": page["nextPageToken"]}
        return found

    def md5(self, file: MatchedFile) -> str | None:
        return self._md5.get(file)

    def read_tail(self, file: MatchedFile, size: int) -> bytes:
        """The object's last `size` bytes, in one ranged read."""
        bucket, name = self._object(file.path)
        url = f"{storage_api()}b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        what = f"gs://{bucket}/{name}"
        try:
            response = self.session.get(
                url, params={"alt": "media"}, headers={"Range": f"bytes=-{size}"}, timeout=REQUEST_TIMEOUT_SECONDS
            )
        except requests.RequestException as error:
            raise OSError(f"the Storage API did not answer for {what} ({type(error).__name__})") from None
        if response.status_code not in (200, 206):
            raise OSError(f"the Storage API answered HTTP {response.status_code} for {what}: {_reason(response)}")
        return response.content[-size:] if size else b""

    def record_features(self, file: MatchedFile) -> list[str] | None:
        # An ArrayRecord file's records sit behind its footer's index and its chunks' compression,
        # which only ArrayRecord's own reader decodes: the job's driver reads the first record
        # through the bucket's mount before any worker starts.
        return None

    def read_text(self, path: str) -> str | None:
        bucket, name = self._object(path)
        url = f"{storage_api()}b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"
        response = self._get(url, {"alt": "media"}, f"gs://{bucket}/{name}")
        return None if response.status_code == 404 else response.text

    def upload(self, path: str, data: bytes) -> None:
        """Writes `data` as the object behind the worker path `path`, replacing any there, in one
        media upload (for small files: no resumable session)."""
        bucket, name = self._object(path)
        what = f"gs://{bucket}/{name}"
        try:
            response = self.session.post(
                f"{upload_api()}b/{quote(bucket, safe='')}/o",
                params={"uploadType": "media", "name": name},
                data=data,
                headers={"Content-Type": "application/octet-stream"},
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except requests.RequestException as error:
            raise OSError(f"the Storage API did not answer for {what} ({type(error).__name__})") from None
        if response.status_code != 200:
            raise OSError(f"the Storage API answered HTTP {response.status_code} for {what}: {_reason(response)}")


def _reason(response: requests.Response) -> str:
    try:
        return str(response.json()["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason
