"""Fake HTTP services on 127.0.0.1 for the job path: a Ray Jobs API that misbehaves (every
request answered with one fixed status and body: 503, 401, a 500 with a traceback, ...), the
base they share with the fake GKE API, and a fake Kubernetes API server (HTTPS with its own CA,
bearer-token auth, the service-proxy URL scheme that consumes `Authorization`, and the Secret
KubeRay keeps the Ray token in)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# How often a fake's server thread looks for shutdown(): the most a `with` block's exit waits.
SHUTDOWN_POLL_SECONDS = 0.05

TRACEBACK_500 = (
    "Traceback (most recent call last):\n"
    '  File "job_head.py", line 591, in get_job_logs\n'
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 6: invalid start byte\n"
)

# (method, path) -> (status, body)
Answer = Callable[[str, str], tuple[int, bytes]]


class FakeHttpServer:
    """Answers every request with `answer(method, path)` and records what it was asked."""

    def __init__(self, answer: Answer, content_type: str = "text/plain"):
        self.requests: list[tuple[str, str]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers (names in lower case), in order
        self.bodies: list[bytes] = []  # each request's body, in order
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                outer.requests.append((self.command, self.path))
                outer.headers.append({name.lower(): value for name, value in self.headers.items()})
                length = int(self.headers.get("Content-Length") or 0)
                outer.bodies.append(self.rfile.read(length) if length else b"")
                status, body = answer(self.command, self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # serve_forever looks for shutdown() every poll_interval (0.5 s by default): each fake's exit
        # waited that long, in every test that starts one (issue 33).
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
        )

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeJobsApi(FakeHttpServer):
    def __init__(self, status: int, body: str = ""):
        super().__init__(lambda _method, _path: (status, body.encode()))


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A CA certificate for 127.0.0.1 and its key, as files in `directory`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "apiserver.crt", directory / "apiserver.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class FakeApiServer:
    """Forwards `/api/v1/namespaces/NS/services/SVC:PORT/proxy/...` to the Ray head on
    127.0.0.1:PORT, as the Kubernetes API server does, for requests carrying `Bearer <token>`, and
    serves the Secret `auth_secret` holding `ray_token`."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        namespace: str,
        service: str,
        head_port: int,
        ray_token: str,
        *,
        token: str,
        auth_secret: str,
    ):
        prefix = f"/api/v1/namespaces/{namespace}/services/{service}:{head_port}/proxy"
        secret_path = f"/api/v1/namespaces/{namespace}/secrets/{auth_secret}"
        self.seen_tokens: list[str] = []
        self.forwarded_headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                outer.seen_tokens.append(self.headers.get("Authorization", ""))
                if self.headers.get("Authorization") != f"Bearer {token}":
                    return self._reply(401, b'{"kind":"Status","code":401}', "application/json")
                if self.path == secret_path:
                    data = {"auth_token": base64.b64encode(ray_token.encode()).decode()}
                    return self._reply(200, json.dumps({"kind": "Secret", "data": data}).encode(), "application/json")
                if not self.path.startswith(prefix):
                    return self._reply(404, b'{"kind":"Status","code":404}', "application/json")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                # As the API server does: `Authorization` authenticated this request and is
                # dropped; every other header goes on to the service.
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in ("authorization", "host", "content-length")
                }
                outer.forwarded_headers.append(headers)
                request = urllib.request.Request(
                    f"http://127.0.0.1:{head_port}{self.path[len(prefix) :]}",
                    data=body,
                    method=self.command,
                    headers=headers,
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        self._reply(response.status, response.read(), response.headers.get("Content-Type"))
                except urllib.error.HTTPError as error:
                    self._reply(error.code, error.read(), error.headers.get("Content-Type"))

            do_GET = do_POST = do_DELETE = _forward

            def _reply(self, status, payload, content_type):
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/octet-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        # serve_forever looks for shutdown() every poll_interval (0.5 s by default): each fake's exit
        # waited that long, in every test that starts one (issue 33).
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
