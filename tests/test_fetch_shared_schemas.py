"""scripts/fetch-shared-schemas against a stand-in for raw.githubusercontent.com on 127.0.0.1.

The stand-in serves copies of the files in ../shared/schemas, taken at test time, at the URLs
written below (OWNER/REPO/COMMIT/PATH): a script asking for any other URL gets a 404, so these
tests also check the URLs it builds. What they cannot check offline is that GitHub serves the
same bytes at those URLs; the script's own sha256 check does that on CI.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.shared import PROJECT_ROOT, require_shared

SCRIPT = PROJECT_ROOT / "scripts" / "fetch-shared-schemas"

# Name in ../shared/schemas (and in DEST_DIR) -> path on raw.githubusercontent.com, as
# ../shared/schemas/SOURCES.md pins them (short shas there, expanded here).
KUBERAY = "ray-project/kuberay/59d663aeec13760646da3db9c1cf8cfe883e30b7/ray-operator/config/crd/bases"
EXPECTED_PATHS = {
    "ray.io_rayclusters.yaml": f"/{KUBERAY}/ray.io_rayclusters.yaml",
    "ray.io_rayjobs.yaml": f"/{KUBERAY}/ray.io_rayjobs.yaml",
    "computeclass_v1.json": "/datreeio/CRDs-catalog/7b1e26ef9deea49293714d204c1a2270aab1178f/cloud.google.com/computeclass_v1.json",
    "pulumi-project.json": "/pulumi/pulumi/1b5949891b3cefcb9974752b24a5ecef0acc86c8/sdk/go/common/workspace/project.json",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Mirror:
    """Serves `root` as raw.githubusercontent.com would; records every path asked for.

    `unavailable[path] = n` answers 503 to the first n requests for `path`; a path in
    `truncated` gets a Content-Length larger than the body it is sent."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: Counter[str] = Counter()
        self.unavailable: Counter[str] = Counter()
        self.truncated: set[str] = set()
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):
                mirror.requests[self.path] += 1
                if mirror.unavailable[self.path] > 0:
                    mirror.unavailable[self.path] -= 1
                    self.send_error(503, "Service Unavailable")
                elif self.path in mirror.truncated:
                    body = (mirror.root / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                else:
                    super().do_GET()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def file(self, name: str) -> Path:
        return self.root / EXPECTED_PATHS[name].lstrip("/")


@pytest.fixture
def originals() -> dict[str, bytes]:
    """The bytes of each schema in the shared folder, read now (never copied into the tree)."""
    return {name: require_shared(f"schemas/{name}").read_bytes() for name in EXPECTED_PATHS}


@pytest.fixture
def mirror(tmp_path, originals):
    root = tmp_path / "mirror"
    for name, url_path in EXPECTED_PATHS.items():
        served = root / url_path.lstrip("/")
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_bytes(originals[name])
    server = Mirror(root)
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def run_script(*args: str, mirror_url: str | None = None, **env: str) -> subprocess.CompletedProcess:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key.lower() not in {"http_proxy", "https_proxy", "all_proxy", "schema_mirror_url", "schema_fetch_attempts"}
    }
    if mirror_url is not None:
        environment["SCHEMA_MIRROR_URL"] = mirror_url
    environment.update(env)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=environment, capture_output=True, text=True, timeout=120
    )


def listing(directory: Path) -> set[str]:
    """Every entry, hidden ones (the script's temporary files) included."""
    return {path.name for path in directory.iterdir()}


def test_script_is_executable():
    assert os.access(SCRIPT, os.X_OK)


def test_all_four_schemas_arrive_with_their_names_and_bytes(mirror, originals, tmp_path):
    dest = tmp_path / "out" / "schemas"  # created by the script
    result = run_script(str(dest), mirror_url=mirror.url)
    assert result.returncode == 0, result.stderr
    assert listing(dest) == set(EXPECTED_PATHS)
    for name, data in originals.items():
        assert (dest / name).read_bytes() == data, name
    assert mirror.requests == Counter(dict.fromkeys(EXPECTED_PATHS.values(), 1))


def test_a_trailing_slash_on_the_mirror_url_is_fine(mirror, tmp_path):
    result = run_script(str(tmp_path / "dest"), mirror_url=mirror.url + "/")
    assert result.returncode == 0, result.stderr
    assert listing(tmp_path / "dest") == set(EXPECTED_PATHS)


def test_a_tampered_file_fails_naming_it_and_leaves_no_file_of_that_name(mirror, originals, tmp_path):
    tampered = bytearray(originals["ray.io_rayjobs.yaml"])
    tampered[len(tampered) // 2] ^= 0x01  # one bit, same length
    mirror.file("ray.io_rayjobs.yaml").write_bytes(tampered)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "ray.io_rayjobs.yaml").write_text("left over from an earlier run\n")

    result = run_script(str(dest), mirror_url=mirror.url)

    assert result.returncode == 1
    url = mirror.url + EXPECTED_PATHS["ray.io_rayjobs.yaml"]
    assert f"ray.io_rayjobs.yaml: sha256 mismatch for {url}" in result.stderr
    assert f"expected sha256 {sha256(originals['ray.io_rayjobs.yaml'])}" in result.stderr
    assert f"actual sha256   {sha256(bytes(tampered))}" in result.stderr
    assert listing(dest) == set(EXPECTED_PATHS) - {"ray.io_rayjobs.yaml"}  # no stale copy, no .part
    for name in listing(dest):
        assert (dest / name).read_bytes() == originals[name]
    assert mirror.requests[EXPECTED_PATHS["ray.io_rayjobs.yaml"]] == 1  # a wrong hash is not retried


def test_a_404_fails_clearly_without_retrying(mirror, tmp_path):
    mirror.file("pulumi-project.json").unlink()
    dest = tmp_path / "dest"

    result = run_script(str(dest), mirror_url=mirror.url)

    assert result.returncode == 1
    url = mirror.url + EXPECTED_PATHS["pulumi-project.json"]
    assert f"pulumi-project.json: download failed from {url}: HTTP 404" in result.stderr
    assert "1 of 4 schema(s) failed" in result.stderr
    assert listing(dest) == set(EXPECTED_PATHS) - {"pulumi-project.json"}
    assert mirror.requests[EXPECTED_PATHS["pulumi-project.json"]] == 1


def test_a_503_is_retried(mirror, originals, tmp_path):
    path = EXPECTED_PATHS["computeclass_v1.json"]
    mirror.unavailable[path] = 1
    dest = tmp_path / "dest"

    result = run_script(str(dest), mirror_url=mirror.url, SCHEMA_FETCH_ATTEMPTS="2")

    assert result.returncode == 0, result.stderr
    assert "HTTP 503" in result.stderr and "retrying" in result.stderr
    assert mirror.requests[path] == 2
    assert (dest / "computeclass_v1.json").read_bytes() == originals["computeclass_v1.json"]


def test_a_body_cut_short_leaves_no_partial_file(mirror, tmp_path):
    path = EXPECTED_PATHS["ray.io_rayclusters.yaml"]
    mirror.truncated.add(path)
    dest = tmp_path / "dest"

    result = run_script(str(dest), mirror_url=mirror.url, SCHEMA_FETCH_ATTEMPTS="1")

    assert result.returncode == 1
    assert f"ray.io_rayclusters.yaml: download failed from {mirror.url}{path}" in result.stderr
    assert listing(dest) == set(EXPECTED_PATHS) - {"ray.io_rayclusters.yaml"}


def test_an_unreachable_mirror_fails_for_every_file(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dest = tmp_path / "dest"

    result = run_script(str(dest), mirror_url=f"http://127.0.0.1:{port}", SCHEMA_FETCH_ATTEMPTS="1")

    assert result.returncode == 1
    for name, path in EXPECTED_PATHS.items():
        assert f"{name}: download failed from http://127.0.0.1:{port}{path}" in result.stderr
    assert listing(dest) == set()


def test_default_urls_are_raw_github_at_the_pinned_commits():
    result = run_script("--list")
    assert result.returncode == 0, result.stderr
    listed = {name: url for name, url, _ in (line.split("\t") for line in result.stdout.splitlines())}
    assert listed == {name: "https://raw.githubusercontent.com" + path for name, path in EXPECTED_PATHS.items()}


def test_pinned_hashes_are_those_of_the_shared_copies(originals):
    result = run_script("--list")
    listed = {name: digest for name, _, digest in (line.split("\t") for line in result.stdout.splitlines())}
    assert listed == {name: sha256(data) for name, data in originals.items()}


@pytest.mark.parametrize("args", [(), ("a", "b"), ("--help",)])
def test_usage(args):
    result = run_script(*args)
    assert result.returncode == 2
    assert "usage: fetch-shared-schemas DEST_DIR" in result.stderr
