"""A fault-injecting HTTP proxy in front of the real S3 server (127.0.0.1 only).

Requests are forwarded byte for byte (the Host header too, so SigV4 signatures stay valid);
a rule chosen per request can answer ``503 SlowDown`` instead, or hold the request until the
test releases it (an upload stuck in a network path) and forward it then.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

PASS, THROTTLE, HOLD = "pass", "throttle", "hold"
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b'<Message>Please reduce your request rate.</Message></Error>')


@dataclass
class Request:
    method: str
    path: str  # /bucket/key?query
    headers: dict[str, str]


@dataclass
class Proxy:
    endpoint_url: str
    rule: Callable[[Request], str] = lambda r: PASS
    release: threading.Event = field(default_factory=threading.Event)
    held: list[Request] = field(default_factory=list)
    throttled: list[Request] = field(default_factory=list)


def _handler(upstream: str, proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b""):
                            pass
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def _forward(self) -> None:
            body = self._body()
            request = Request(self.command, self.path, dict(self.headers.items()))
            action = proxy.rule(request)
            if action == THROTTLE:
                proxy.throttled.append(request)
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(SLOW_DOWN)))
                self.end_headers()
                self.wfile.write(SLOW_DOWN)
                return
            if action == HOLD:
                proxy.held.append(request)
                proxy.release.wait()
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("transfer-encoding", "content-length")}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
            self.send_response(response.status, response.reason)
            for k, v in response.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Handler


@contextmanager
def proxy_to(upstream: str) -> Iterator[Proxy]:
    """A proxy on a free 127.0.0.1 port for the block; stopped (held requests released) at
    its end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, proxy := Proxy("")))
    server.daemon_threads = True
    proxy.endpoint_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.release.set()
        server.shutdown()
        server.server_close()
        thread.join()
