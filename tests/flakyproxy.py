"""A reverse HTTP proxy on 127.0.0.1 that misbehaves on purpose.

It sits in front of a real server (``hg serve``, ``git http-backend``) and,
for the requests a test names, cuts the response after a number of body
bytes, answers with an HTTP error instead, or stalls without answering.
Every other request passes through unchanged.  ``log`` records each
request and what was done to it.
"""

import http.client
import socket
import time
import urllib.parse

from vcsperf.harness.servers import LocalServer, QuietHandler

#: Request headers not passed on: the proxy opens its own connection.
_HOP_HEADERS = {"connection", "keep-alive", "host", "proxy-connection",
                "transfer-encoding", "te", "upgrade"}


class Fault:
    """What to do to the next request that contains ``match`` in its
    method, path or body (``"cmd=getbundle"``, ``"command=fetch"``):
    ``cut`` sends the status, the headers and that many body bytes, then
    drops the connection; ``status`` answers with that HTTP code;
    ``stall`` waits that many seconds, then drops the connection.
    ``times`` is how many matching requests it applies to (None: all)."""

    def __init__(self, match, cut=None, status=None, stall=None, times=1):
        self.match = match
        self.cut = cut
        self.status = status
        self.stall = stall
        self.times = times

    def __repr__(self):
        kind = ("cut=%d" % self.cut if self.cut is not None else
                "status=%d" % self.status if self.status else
                "stall=%gs" % self.stall)
        return "<%s on %s>" % (kind, self.match)


class FlakyProxy(LocalServer):
    def __init__(self, upstream):
        parts = urllib.parse.urlsplit(upstream)
        super().__init__(_Handler, parts.path or "/")
        self.upstream = (parts.hostname, parts.port)
        self.faults = []

    def add(self, *faults):
        with self._lock:
            self.faults.extend(faults)

    def fault_for(self, request):
        with self._lock:
            for fault in self.faults:
                if fault.match in request:
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times == 0:
                            self.faults.remove(fault)
                    return fault
        return None

    def record(self, method, path, what):
        with self._lock:
            self.log.append((method, path, what))

    def applied(self):
        """The faults applied so far, as logged."""
        return [entry for entry in self.log if entry[2] != "passed"]


class _Handler(QuietHandler):
    def do_GET(self):
        self._proxy()

    do_POST = do_PUT = do_HEAD = do_GET

    def _proxy(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        fault = self.server_owner.fault_for("%s %s\n%s" % (
            self.command, self.path, (body or b"").decode("latin-1")))
        if fault is not None and fault.stall is not None:
            self.server_owner.record(self.command, self.path, repr(fault))
            time.sleep(fault.stall)
            self._drop()
            return
        if fault is not None and fault.status:
            self.server_owner.record(self.command, self.path, repr(fault))
            payload = b"proxy fault\n"
            self.send_response(fault.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        status, reason, headers, payload = self._forward(body)
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_HEADERS | {"content-length"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if fault is not None and fault.cut is not None:
            self.server_owner.record(self.command, self.path, repr(fault))
            self.wfile.write(payload[:fault.cut])
            self.wfile.flush()
            self._drop()
            return
        self.server_owner.record(self.command, self.path, "passed")
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(self, body):
        conn = http.client.HTTPConnection(*self.server_owner.upstream, timeout=60)
        try:
            headers = {name: value for name, value in self.headers.items()
                       if name.lower() not in _HOP_HEADERS}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            return (response.status, response.reason, response.getheaders(),
                    payload)
        finally:
            conn.close()

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
