"""Reverse HTTP proxies on 127.0.0.1, in front of a real server (``hg
serve``, ``git http-backend``), for the tests:

- ``FlakyProxy`` misbehaves on purpose: for the requests a test names, it
  cuts the response after a number of body bytes, answers with an HTTP
  error instead, stalls (before answering or midway), trickles the body a
  byte at a time, or lies (flips bytes of the body).  Every other request
  passes through unchanged.  ``log`` records each request and what was done to
  it.
- ``RecordingProxy`` records every response as ``(path, status, body)``
  and can cut the responses to requests whose path holds a given part.
- ``CountingProxy`` passes every response on as it comes (chunked) and
  counts requests and body bytes: a big clone's pack is neither held in
  memory nor delayed until its end.  With ``slots`` it stands for a
  server with that many worker threads (at most that many requests
  upstream at a time, over kept-alive connections), counts the bytes of
  each client, and records requests and answers while asked to.
"""

import collections
import contextlib
import http.client
import queue
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
    ``cut`` sends the status, the headers and that many body bytes
    (negative: all but that many), then drops the connection; ``status`` answers with that HTTP code;
    ``stall`` waits that many seconds, then drops the connection (after
    the ``cut`` bytes, if given, else before answering); ``trickle``
    sends the body (after the ``cut`` bytes, if given, at once) one byte
    every ``trickle`` seconds, as long as the client reads; ``flip``
    lists offsets of body bytes to invert (modulo its length), the whole
    body then sent as if it were right.  ``times`` is how many matching
    requests it applies to (None: all)."""

    def __init__(self, match, cut=None, status=None, stall=None,
                 trickle=None, flip=(), times=1):
        self.match = match
        self.cut = cut
        self.status = status
        self.stall = stall
        self.trickle = trickle
        self.flip = flip
        self.times = times

    def __repr__(self):
        kinds = [text % value for text, value in (
            ("cut=%d", self.cut), ("status=%d", self.status),
            ("stall=%gs", self.stall), ("trickle=%gs", self.trickle),
            ("flip=%r", list(self.flip) or None)) if value is not None]
        return "<%s on %s>" % (" ".join(kinds), self.match)

    def lie(self, payload):
        """``payload`` with the ``flip`` bytes inverted."""
        if not payload or not self.flip:
            return payload
        data = bytearray(payload)
        for offset in self.flip:
            data[offset % len(data)] ^= 0xFF
        return bytes(data)


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


def _forward(handler, body):
    """Send ``handler``'s request to its proxy's upstream and the status
    and headers of the answer back; returns the answer's status and body,
    which the caller ends the headers of and sends (or not)."""
    conn = http.client.HTTPConnection(*handler.server_owner.upstream,
                                      timeout=60)
    try:
        headers = {name: value for name, value in handler.headers.items()
                   if name.lower() not in _HOP_HEADERS}
        conn.request(handler.command, handler.path, body=body,
                     headers=headers)
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    handler.send_response(response.status, response.reason)
    for name, value in response.getheaders():
        if name.lower() not in _HOP_HEADERS | {"content-length"}:
            handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(payload)))
    return response.status, payload


class _Handler(QuietHandler):
    def do_GET(self):
        self._proxy()

    do_POST = do_PUT = do_HEAD = do_GET

    def _proxy(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        fault = self.server_owner.fault_for("%s %s\n%s" % (
            self.command, self.path, (body or b"").decode("latin-1")))
        if fault is not None and fault.stall is not None \
                and fault.cut is None:
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
        _, payload = _forward(self, body)
        self.end_headers()
        if fault is None:
            self.server_owner.record(self.command, self.path, "passed")
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        self.server_owner.record(self.command, self.path, repr(fault))
        payload = fault.lie(payload)
        if fault.cut is not None:
            self.wfile.write(payload[:fault.cut])
            self.wfile.flush()
            payload = payload[fault.cut:] if fault.trickle else b""
        if fault.trickle:
            self._trickle(payload, fault.trickle)
        elif fault.cut is None:
            self.wfile.write(payload)
            return
        if fault.stall:
            time.sleep(fault.stall)
        self._drop()

    def _trickle(self, payload, interval):
        """Send ``payload`` a byte every ``interval`` seconds, until the
        client goes away."""
        for offset in range(len(payload)):
            time.sleep(interval)
            try:
                self.wfile.write(payload[offset:offset + 1])
                self.wfile.flush()
            except OSError:
                return

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class RecordingProxy(LocalServer):
    """Forwards every request to ``upstream`` and records each response as
    ``(path, status, body)`` in ``responses``.

    When ``cut`` is set to ``(query_part, nbytes)``, a response to a request
    whose path contains ``query_part`` is sent with its full length announced
    but only its first ``nbytes`` bytes, then the connection is closed: what
    a client sees when the server dies mid-response.
    """

    def __init__(self, upstream):
        parts = urllib.parse.urlsplit(upstream)
        super().__init__(_RecordingHandler)
        self.upstream = (parts.hostname, parts.port)
        self.responses = []
        self.cut = None

    def bodies(self, query_part):
        return [body for path, _status, body in self.responses
                if query_part in path]


class _RecordingHandler(QuietHandler):
    def _record(self):
        proxy = self.server_owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        status, payload = _forward(self, body)
        proxy.responses.append((self.path, status, payload))
        cut = proxy.cut
        if cut and cut[0] in self.path:
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload[:cut[1]])
            self.close_connection = True
            return
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _record


#: The request header that names the client a request comes from, for
#: ``CountingProxy``'s counts per client; it is not passed on.
CLIENT_HEADER = "X-Vcsperf-Client"


class CountingProxy(LocalServer):
    """Forwards every request to ``upstream``, streaming each answer back
    (chunked), and counts: ``take()`` returns ``(requests, body bytes)``
    since the last ``take()``; ``by_client`` holds the body bytes of the
    answers to each client (the ``X-Vcsperf-Client`` header of its
    requests, "" without one).

    With ``slots``, at most that many requests are forwarded at a time,
    each over one of that many kept-alive connections, as a server with
    that many worker threads answers: the others wait for a slot (up to
    ``queue_timeout`` seconds, then 503).  While ``recorded`` is a list,
    each request and its answer are appended to it as ``(method, path,
    headers, body, status, answer headers, answer body)``."""

    def __init__(self, upstream, slots=None, queue_timeout=600):
        parts = urllib.parse.urlsplit(upstream)
        super().__init__(_CountingHandler)
        self.upstream = (parts.hostname, parts.port)
        self.requests = 0
        self.bytes = 0
        self.by_client = collections.Counter()
        self.recorded = None
        self.queue_timeout = queue_timeout
        self._pool = None
        if slots:
            self._pool = queue.Queue()
            for _ in range(slots):
                self._pool.put(None)

    def count(self, requests=0, nbytes=0, client=""):
        with self._lock:
            self.requests += requests
            self.bytes += nbytes
            self.by_client[client] += nbytes

    def take(self):
        with self._lock:
            counted = (self.requests, self.bytes)
            self.requests = self.bytes = 0
        return counted

    def record(self, entry):
        with self._lock:
            if self.recorded is not None:
                self.recorded.append(entry)

    @contextlib.contextmanager
    def connection(self):
        """A connection to the upstream server for one request: a new one,
        or with ``slots`` a free one of the pool (None when none is free
        in time).  One that failed is not used again."""
        if self._pool is None:
            conn = http.client.HTTPConnection(*self.upstream, timeout=3600)
            try:
                yield conn
            finally:
                conn.close()
            return
        try:
            conn = self._pool.get(timeout=self.queue_timeout)
        except queue.Empty:
            yield None
            return
        if conn is None:
            conn = http.client.HTTPConnection(*self.upstream, timeout=3600)
        try:
            yield conn
        except BaseException:
            conn.close()
            conn = None
            raise
        finally:
            self._pool.put(conn)

    def stop(self):
        super().stop()
        if self._pool is not None:
            while not self._pool.empty():
                conn = self._pool.get()
                if conn is not None:
                    conn.close()


class _CountingHandler(QuietHandler):
    def _stream(self):
        proxy = self.server_owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        client = self.headers.get(CLIENT_HEADER, "")
        headers = {name: value for name, value in self.headers.items()
                   if name.lower() not in _HOP_HEADERS
                   and name.lower() != CLIENT_HEADER.lower()}
        with proxy.connection() as conn:
            if conn is None:
                self.send_error(503, "no worker free in time")
                return
            try:
                conn.request(self.command, self.path, body=body,
                             headers=headers)
                response = conn.getresponse()
            except (OSError, http.client.HTTPException):
                # A kept-alive connection the server closed: once more,
                # on a new one.
                conn.close()
                conn.request(self.command, self.path, body=body,
                             headers=headers)
                response = conn.getresponse()
            self.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in _HOP_HEADERS | {"content-length"}:
                    self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            proxy.count(requests=1)
            kept = [] if proxy.recorded is not None else None
            for data in iter(lambda: response.read1(1 << 16), b""):
                proxy.count(nbytes=len(data), client=client)
                if kept is not None:
                    kept.append(data)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            # Closes the answer: read1 leaves one of a known length open,
            # and its kept-alive connection would take no further request.
            response.read()
            self.wfile.write(b"0\r\n\r\n")
        if kept is not None:
            proxy.record((self.command, self.path, headers, body,
                          response.status, response.getheaders(),
                          b"".join(kept)))

    do_GET = do_POST = _stream
