"""A fake Cloud Storage JSON API on 127.0.0.1: buckets of objects, listed (with `prefix` and
`matchGlob`, whose `**` crosses folders and `*` and `?` do not; with each object's size and MD5)
downloaded (`alt=media`, whole or a suffix range, at the JSON API's path and at the
`/download` path Google's client library uses) and uploaded (a media upload, `uploadType=media`,
at the `/upload` path), or every request refused with one status."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, unquote, urlparse

from domain.training.dataset_manifest import md5_base64
from tests.support.fake_jobs_api import FakeHttpServer


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The JSON API's matchGlob: `**` crosses folders, `*` and `?` do not."""
    text = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    return re.compile(text)


class FakeStorage(FakeHttpServer):
    def __init__(self, objects: dict[str, dict[str, bytes]], refuse: int | None = None):
        self.objects = objects
        self.refuse = refuse
        super().__init__(self.answer, content_type="application/json")

    def answer(self, method: str, path: str) -> tuple[int, bytes]:
        url = urlparse(path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        if self.refuse:
            permission = "storage.objects.create" if method == "POST" else "storage.objects.list"
            return self.refuse, json.dumps(
                {"error": {"code": self.refuse, "message": f"caller lacks {permission}"}}
            ).encode()
        upload = re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", url.path)
        if method == "POST" and upload and query.get("uploadType") == "media" and query.get("name"):
            bucket_name, name = unquote(upload[1]), query["name"]
            if bucket_name not in self.objects:
                return 404, b'{"error": {"code": 404, "message": "The specified bucket does not exist."}}'
            self.objects[bucket_name][name] = self.bodies[-1]
            content = self.objects[bucket_name][name]
            return 200, json.dumps({"name": name, "bucket": bucket_name, "size": str(len(content))}).encode()
        listing = re.fullmatch(r"/storage/v1/b/([^/]+)/o", url.path)
        # Object media, at the JSON API's path and at the download path Google's client uses.
        media = re.fullmatch(r"(?:/download)?/storage/v1/b/([^/]+)/o/(.+)", url.path)
        if listing:
            bucket = self.objects.get(unquote(listing[1]))
            if bucket is None:
                return 404, b'{"error": {"code": 404, "message": "The specified bucket does not exist."}}'
            match = glob_regex(query["matchGlob"]) if "matchGlob" in query else None
            names = [
                name
                for name in sorted(bucket)
                if name.startswith(query.get("prefix", "")) and (match is None or match.fullmatch(name))
            ]
            items = [
                {
                    "name": name,
                    "bucket": unquote(listing[1]),
                    "size": str(len(bucket[name])),
                    "md5Hash": md5_base64(bucket[name]),
                }
                for name in names
            ]
            return 200, json.dumps({"kind": "storage#objects", "items": items}).encode()
        if media:
            bucket_name, name = unquote(media[1]), unquote(media[2])
            content = self.objects.get(bucket_name, {}).get(name)
            if content is None:
                return 404, b'{"error": {"code": 404, "message": "No such object"}}'
            if query.get("alt") == "media":
                # A suffix range (`Range: bytes=-N`), as a ranged read of a file's end asks.
                ranged = re.fullmatch(r"bytes=-(\d+)", self.headers[-1].get("range", ""))
                return (206, content[-int(ranged[1]) :]) if ranged else (200, content)
            return 200, json.dumps({"name": name, "bucket": bucket_name, "size": str(len(content))}).encode()
        return 400, b"{}"
