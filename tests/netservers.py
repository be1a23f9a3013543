"""Real servers on 127.0.0.1 for tests: a recording HTTP proxy that can cut
a response short, a static file server with an access log, and an ``ssh``
stand-in that runs the remote command locally, records what the server
sends and can cut it short.

Every server binds to a port the kernel picks and runs in a daemon thread;
``stop()`` shuts it down (the fixtures that hand them out call it).
"""

import http.client
import http.server
import os
import sys
import threading
import urllib.parse

# Headers that describe one hop, not the response, and are not forwarded.
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding",
                "content-length"}


class _Server:
    def __init__(self, handler):
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self
        self.url = "http://127.0.0.1:%d/" % self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class RecordingProxy(_Server):
    """Forwards every request to ``upstream`` and records each response as
    ``(path, status, body)`` in ``responses``.

    When ``cut`` is set to ``(query_part, nbytes)``, a response to a request
    whose path contains ``query_part`` is sent with its full length announced
    but only its first ``nbytes`` bytes, then the connection is closed: what
    a client sees when the server dies mid-response.
    """

    def __init__(self, upstream):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.responses = []
        self.cut = None
        super().__init__(_ProxyHandler)

    def bodies(self, query_part):
        return [body for path, _status, body in self.responses
                if query_part in path]


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _forward(self):
        proxy = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection(proxy.upstream.hostname,
                                          proxy.upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP_HEADERS | {"host"}}
        conn.request(self.command, self.path, body=body, headers=headers)
        upstream = conn.getresponse()
        data = upstream.read()
        conn.close()
        proxy.responses.append((self.path, upstream.status, data))
        self.send_response(upstream.status)
        for key, value in upstream.getheaders():
            if key.lower() not in _HOP_HEADERS:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        cut = proxy.cut
        if cut and cut[0] in self.path:
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[:cut[1]])
            self.close_connection = True
            return
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward


class FileServer(_Server):
    """Serves the files of ``root``; ``log`` lists ``(path, status)`` of
    every request.  ``truncate[name] = n`` serves only the first ``n`` bytes
    of that file (announcing its full length), and a name in ``missing``
    answers 404 even if the file exists."""

    def __init__(self, root):
        self.root = root
        self.log = []
        self.truncate = {}
        self.missing = set()
        super().__init__(_FileHandler)


class _FileHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server.owner
        name = urllib.parse.unquote(self.path.lstrip("/").split("?")[0])
        path = os.path.join(server.root, name)
        if name in server.missing or not os.path.isfile(path):
            server.log.append((self.path, 404))
            self.send_error(404)
            return
        with open(path, "rb") as fh:
            data = fh.read()
        server.log.append((self.path, 200))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        if name in server.truncate:
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[:server.truncate[name]])
            self.close_connection = True
            return
        self.end_headers()
        self.wfile.write(data)


SSH_WRAPPER = r'''#!%(python)s
"""Stands in for ssh: runs the remote command (the last argument) here,
copies what the server sends into $VCSPERF_SSH_RECORD when set, and kills
the server after it has sent $VCSPERF_SSH_CUT bytes when set."""
import os, subprocess, sys
server = subprocess.Popen(sys.argv[-1], shell=True, stdout=subprocess.PIPE)
record = os.environ.get("VCSPERF_SSH_RECORD")
record = open(record, "wb") if record else None
left = int(os.environ.get("VCSPERF_SSH_CUT") or -1)
out = sys.stdout.buffer
while left:
    data = os.read(server.stdout.fileno(), 65536 if left < 0 else min(left, 65536))
    if not data:
        break
    left -= len(data) if left > 0 else 0
    out.write(data)
    out.flush()
    if record:
        record.write(data)
if not left:
    server.kill()
sys.exit(server.wait() if left else 255)
'''


def write_ssh_wrapper(path):
    """Write the ``ssh`` stand-in to ``path``; use it as ``ui.ssh``."""
    with open(path, "w") as fh:
        fh.write(SSH_WRAPPER % {"python": sys.executable})
    os.chmod(path, 0o755)
    return path
