"""Servers on 127.0.0.1 for the tests, the benchmarks and the check:

- ``HgServer``: ``hg serve`` as a child process;
- ``FileServer``: static files, with an access log, and files that a
  test cuts short or hides;
- ``GitServer``: Git over smart HTTP, the way a real server does: each
  request runs ``git http-backend`` (the CGI program Git ships for Apache
  and nginx); every request is appended to ``log`` so a caller can count
  fetches, and the bytes of its answers to ``bytes_sent``;
- ``LocalServer``, ``QuietServer``, ``QuietHandler``: the in-process
  threaded server these (and the proxies of ``proxies``) are built on;
- ``ChildServer``: the stopping of a server that runs as a child process
  (``HgServer`` here, ``objectstore.ObjectServer``).
"""

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
import urllib.parse

from vcsperf.harness import tools


class StoppedOnExit:
    """A server that ``with`` stops at the end of its block."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class ChildServer(StoppedOnExit):
    """A server running as the child process ``proc``: ``stop()`` asks it
    to end, and kills it if it has not within 30 seconds."""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class HgServer(ChildServer):
    """``hg serve`` of ``repo`` on 127.0.0.1, on a port the kernel picks,
    as a child process (so that an interrupt at any moment cannot leave it
    running), stopped by ``stop()`` or at the end of the ``with`` block.
    ``args`` are any further ``hg serve`` arguments (``--config``,
    ``--accesslog``, ``--web-conf``...).  Its access and error logs go to
    ``repo.access.log`` and ``repo.error.log`` unless ``args`` say
    otherwise, and what it writes to stderr to ``repo.serve.log``."""

    def __init__(self, env, repo, *args):
        repo = os.fspath(repo)
        with open(repo + ".serve.log", "ab") as stderr:
            self.proc = subprocess.Popen(
                [tools.executable("hg"), "serve", "-R", repo,
                 "-a", "127.0.0.1", "-p", "0", "-A", repo + ".access.log",
                 "-E", repo + ".error.log", *map(str, args)],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=stderr, text=True)
        try:
            line = self.proc.stdout.readline()
            found = re.search(r"bound to 127\.0\.0\.1:(\d+)", line)
            if not found:
                self.stop()
                with open(repo + ".serve.log") as log:
                    said = log.read().strip().splitlines()[-1:]
                raise RuntimeError("hg serve did not start: %s (%s)"
                                   % (" ".join(said) or repr(line),
                                      repo + ".serve.log"))
        except BaseException:
            self.stop()
            raise
        self.url = "http://127.0.0.1:%s/" % found.group(1)
        self.pid = self.proc.pid

    def stop(self):
        super().stop()
        self.proc.stdout.close()


class LocalServer(StoppedOnExit):
    """An HTTP server on 127.0.0.1, on a port the kernel picks, serving
    from a thread from its creation until ``stop()`` (or the end of the
    ``with`` block).  ``handler`` is a QuietHandler subclass; its
    ``server_owner`` is this object."""

    def __init__(self, handler, path="/"):
        self.log = []
        self._lock = threading.Lock()
        handler = type("Handler", (handler,), {"server_owner": self})
        self._server = QuietServer(("127.0.0.1", 0), handler)
        self.url = "http://127.0.0.1:%d%s" % (self._server.server_port, path)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class FileServer(LocalServer):
    """Serves the files of ``root``; ``log`` lists ``(path, status)`` of
    every request.  ``truncate[name] = n`` serves only the first ``n`` bytes
    of that file (announcing its full length), and a name in ``missing``
    answers 404 even if the file exists."""

    def __init__(self, root):
        self.root = os.fspath(root)
        self.truncate = {}
        self.missing = set()
        super().__init__(_FileHandler)


class GitServer(LocalServer):
    """``with GitServer(root) as server:`` serves every repository under
    ``root`` at ``server.url + NAME``; ``log`` lists ``(method, path,
    status)`` of each request, in order.  With ``stream``, each answer is
    sent as ``git http-backend`` writes it (chunked), as a real server
    does, rather than once it has ended: a client then sees the first
    bytes of a big pack while the rest is made, as its low-speed limit
    (``GIT_HTTP_LOW_SPEED_TIME``) expects.  A backend that ends before
    its headers (killed, or out of memory as it starts) is answered 502
    and said on stderr, as a web server does."""

    def __init__(self, root, log_path=None, stream=False):
        super().__init__(_Handler)
        self.root = os.fspath(root)
        #: Bytes of the backend's answers sent so far (bodies only).
        self.bytes_sent = 0
        self.log_path = log_path
        self.stream = stream

    def record(self, method, path, status, sent=0):
        with self._lock:
            self.bytes_sent += sent
            self.log.append((method, path, status))
            if self.log_path:
                with open(self.log_path, "a") as fh:
                    fh.write("%s %s %s\n" % (method, path, status))

    def fetches(self):
        """Requests that sent history: upload-pack POSTs that carried a
        pack (protocol v2 also POSTs for ls-refs, which are not counted)."""
        return [entry for entry in self.log
                if entry[0] == "POST" and entry[1].endswith("git-upload-pack")
                and entry[2].endswith(" pack")]


class QuietServer(http.server.ThreadingHTTPServer):
    """A threaded server that does not print a traceback when a client
    drops its connection (tests kill clients and cut responses); any
    other failure of a handler goes to stderr, where pytest shows it
    beside the test it broke."""

    daemon_threads = True
    # A fleet of clients connects at once: the default backlog of 5 would
    # drop their connections and delay each by the SYN retry's second.
    request_queue_size = 256

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError,
                                              TimeoutError)):
            sys.stderr.write("harness server on %s, request from %s:\n%s"
                             % (self.server_address, client_address,
                                traceback.format_exc()))


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, and no access lines on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


class _FileHandler(QuietHandler):
    def do_HEAD(self):
        """What a GET answers, without the body: how a freshness check
        asks whether a bundle is there."""
        self.do_GET(body=False)

    def do_GET(self, body=True):
        server = self.server_owner
        name = urllib.parse.unquote(self.path.lstrip("/").split("?")[0])
        path = os.path.join(server.root, name)
        if name in server.missing or not os.path.isfile(path):
            server.log.append((self.path, 404))
            self.send_error(404)
            return
        server.log.append((self.path, 200))
        with open(path, "rb") as fh:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length",
                             str(os.fstat(fh.fileno()).st_size))
            if not body:
                self.end_headers()
                return
            if name in server.truncate:
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(fh.read(server.truncate[name]))
                self.close_connection = True
                return
            self.end_headers()
            shutil.copyfileobj(fh, self.wfile)


class _Handler(QuietHandler):
    def do_GET(self):
        self._backend()

    do_POST = do_GET

    def _backend(self):
        owner = self.server_owner
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = dict(tools.isolated_env(owner.root),
                   GIT_PROJECT_ROOT=owner.root, GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=urllib.parse.unquote(path), QUERY_STRING=query,
                   REQUEST_METHOD=self.command, REMOTE_ADDR="127.0.0.1",
                   CONTENT_TYPE=self.headers.get("Content-Type", ""),
                   CONTENT_LENGTH=str(len(body)))
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if owner.stream:
            self._stream([tools.executable("git"), "http-backend"], body,
                         env, path)
            return
        proc = subprocess.run([tools.executable("git"), "http-backend"],
                              input=body, env=env, capture_output=True)
        head, ended, payload = proc.stdout.partition(b"\r\n\r\n")
        if not ended:
            self._no_answer(path, proc.returncode, proc.stderr)
            return
        status = "200 OK"
        headers = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        sent_pack = b"packfile\n" in payload[:4096] or b"PACK" in payload[:4096]
        owner.record(self.command, path,
                     status + (" pack" if sent_pack else ""), len(payload))

    def _stream(self, args, body, env, path):
        """Run the CGI program ``args`` and send its answer chunked, as it
        comes."""
        owner = self.server_owner
        with subprocess.Popen(args, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as proc:
            feeder = threading.Thread(target=_feed, args=(proc.stdin, body),
                                      daemon=True)
            feeder.start()
            status, headers, ended = "200 OK", [], False
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode("latin-1").rstrip("\r\n")
                if not line:
                    ended = True
                    break
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = value.strip()
                else:
                    headers.append((name, value.strip()))
            if not ended:
                self._no_answer(path, proc.wait(), b"")
                return
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            first = b""
            sent = 0
            for data in iter(lambda: proc.stdout.read1(1 << 16), b""):
                sent += len(data)
                if len(first) < 4096:
                    first += data[:4096 - len(first)]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            feeder.join()
        sent_pack = b"packfile\n" in first or b"PACK" in first
        owner.record(self.command, path, status + (" pack" if sent_pack
                                                   else ""), sent)

    def _no_answer(self, path, returncode, stderr):
        """What a web server does when its CGI program ends before the end
        of its headers: 502, and the failure in its error log (here
        stderr, which pytest shows with the test).  An empty "200" would
        read to git as a dumb server's empty repository: an ls-remote
        that finds no refs, not a failure."""
        said = stderr.decode("utf-8", "replace").strip()[-500:]
        sys.stderr.write("git http-backend %s %s: exit status %s before its "
                         "headers%s\n" % (self.command, self.path,
                                           returncode,
                                           ": " + said if said else ""))
        self.server_owner.record(self.command, path, "502 Bad Gateway")
        self.send_error(502, "git http-backend gave no answer")


def _feed(stdin, body):
    try:
        stdin.write(body)
        stdin.close()
    except OSError:
        pass
