"""A process of its own that holds a TCP port on 127.0.0.1, so tests can check that the port and
its holder (this process's pid) are named: `silent` accepts connections and never answers,
`404` answers every request with 404, `html` answers every request with a 200 HTML page."""

from __future__ import annotations

import subprocess
import sys

SERVER = r"""
import socket, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

mode = sys.argv[1]
if mode == "silent":
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # the kernel completes handshakes; nothing ever reads or answers
    print(server.getsockname()[1], flush=True)
    time.sleep(3600)

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = (404, b"not found") if mode == "404" else (200, b"<html><body>hello</body></html>")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if mode == "404" else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

httpd = HTTPServer(("127.0.0.1", 0), Handler)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"""


class PortHolder:
    """`with PortHolder("silent") as holder:` holder.port is taken by holder.pid."""

    def __init__(self, mode: str):
        self.mode = mode
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> PortHolder:
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, self.mode], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        return self

    def __exit__(self, *exc) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
