"""One POST to a judge server with a total deadline, a body limit and no redirects (the openai backend's).

urllib's own timeout bounds each socket operation, so a server that sends one byte every half second never
times out, and urllib follows a 302 to another host with every header, the API key included. Here:

- the request is sent with the key as an unredirected header, and any 3xx is refused (`RedirectRefused`,
  naming where it pointed): the verdict comes from the configured origin or not at all;
- a watchdog shuts the connection's socket down when `deadline_s` has passed since the request began
  (connect, headers and body together), so a blocked read ends (`DeadlineExceeded`);
- the body is read in pieces and refused past `max_bytes` (`BodyTooLarge`), before it is decoded.

Proxies set in the environment (HTTPS_PROXY ...) are honoured as by urllib.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
import urllib.request

__all__ = ["BodyTooLarge", "DeadlineExceeded", "RedirectRefused", "post"]


class DeadlineExceeded(TimeoutError):
    pass


class BodyTooLarge(ValueError):
    pass


class RedirectRefused(OSError):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl))
        raise RedirectRefused(f"HTTP {code} redirect to {target.scheme}://{target.netloc} refused (a judge server "
                              "must answer at base_url itself; the API key is never sent elsewhere)")


def _watched(cls, conns: list):
    def make(*args, **kwargs):
        conn = cls(*args, **kwargs)
        conns.append(conn)
        return conn

    return make


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, conns: list):
        super().__init__()
        self.conns = conns

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self.conns), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, conns: list):
        super().__init__()
        self.conns = conns

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self.conns), req, context=self._context,
                            check_hostname=self._check_hostname)  # fmt: skip


def post(url: str, data: bytes, headers: dict[str, str], *, secret_headers: dict[str, str] | None = None,
         deadline_s: float, max_bytes: int) -> bytes:  # fmt: skip
    """The body of a 2xx reply to ``POST url``; urllib.error.HTTPError for other statuses, `RedirectRefused`,
    `DeadlineExceeded` when the whole exchange took longer than `deadline_s`, `BodyTooLarge` past `max_bytes`,
    OSError for connection failures. `secret_headers` (the key) are never carried to a redirect target."""
    conns: list = []
    fired = threading.Event()

    def stop():
        fired.set()
        for conn in conns:
            sock = getattr(conn, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    opener = urllib.request.build_opener(_NoRedirect(), _HTTP(conns), _HTTPS(conns))
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    for k, v in (secret_headers or {}).items():
        req.add_unredirected_header(k, v)
    start = time.monotonic()
    watchdog = threading.Timer(deadline_s, stop)
    watchdog.daemon = True
    watchdog.start()
    try:
        with opener.open(req, timeout=deadline_s) as resp:
            declared = resp.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise BodyTooLarge(f"reply of {declared} bytes (max_reply_bytes={max_bytes})")
            parts, size = [], 0
            while True:
                piece = resp.read1(65536)
                if not piece:
                    break
                size += len(piece)
                if size > max_bytes:
                    raise BodyTooLarge(f"reply longer than max_reply_bytes={max_bytes}")
                if fired.is_set():
                    break
                parts.append(piece)
        if fired.is_set():
            raise DeadlineExceeded(f"no complete reply within {deadline_s:g} s")
        return b"".join(parts)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if fired.is_set() or time.monotonic() - start >= deadline_s:
            raise DeadlineExceeded(f"no complete reply within {deadline_s:g} s") from e
        raise
    finally:
        watchdog.cancel()
