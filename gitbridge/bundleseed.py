"""Seeding a new pooled store from a bundle list (Git's bundle-uri).

``gitbridge checkout --bundle-uri URL`` (or git config
``sharepool.bundle-uri``) names a bundle list, such as the one
``gitbridge bundlegen`` publishes, or one bundle.  When the checkout
clones a new store, it first downloads the list's bundles over HTTP(S)
and applies them, then fetches from the origin only what they lack, so a
cold worker takes most of the history from object storage or a CDN.  Git
2.39, Debian's, reads a bundle list only in ``git clone --bundle-uri``
(without creation tokens, and never into an existing repository such as
a pool's store); this is the list's own format read by Git's config
parser:

- ``bundle.version`` 1; ``bundle.mode`` ``all`` (every bundle, in order)
  or ``any`` (one is enough: the first); with ``bundle.heuristic =
  creationToken`` the bundles apply in increasing ``creationToken`` order
  (entries without a token are left out), else in the list's order.
- A bundle URI is http or https, absolute or relative to the list;
  a list named by a bundle (nested lists) is not followed.
- Each bundle's pack is streamed into ``git index-pack`` as it downloads
  (nothing is written twice), after its prerequisites are checked in the
  store; Git checks every object's hash, the pack's checksum, and that
  every object the pack refers to is in it or in the store; its refs,
  whose tips must be there, go to ``refs/bundles/``.
- A bundle the list also names as packs (``gitbridgePart``, which
  ``gitbridge bundlegen`` writes with ``bundlegen.parts``) is taken as
  those packs instead, each streamed into its own ``git index-pack``, as
  many at once as the machine has cores (at least two): one index-pack
  reads its pack on one core.  The bundle's header, read first, gives
  the refs; once every pack is in, ``git rev-list --objects`` must find
  all the objects those refs reach.  If anything about the packs fails
  (packs of a bundle with prerequisites too), what they added is
  deleted and the bundle itself is taken, with one line saying why; a bundle named with
  one pack, more than 64, or one that is not http or https is taken as
  itself.  Those refs then
  tell the origin what the store has; they are deleted once the origin's
  fetch has succeeded.  The store's
  ``gitbridge.bundletoken`` records the highest creation token applied.

Every wait is bounded: a read, and an answer's status line and headers
in all, wait at most ``sharepool.bundle-timeout`` seconds (30), a host
sending less than ``sharepool.bundle-low-speed`` bytes a second (65536)
over that long is given up, and all of the seeding at most
``sharepool.bundle-deadline`` seconds (1800).  A list holds at most
1 MiB and 64 bundles, whose headers name at most 10,000 refs in all.
Whatever goes wrong (a host that is down, stalls, trickles or answers
an error, a list that is not one or names nothing usable, a bundle that
is cut short, corrupt, of another history, or lacks its prerequisites)
ends the seeding with one line, and the origin sends the rest: what was
applied before stays, it is verified history.  The seeding never
decides the tree: the commit checked out is the one the origin names,
and in a seeded store a commit asked for by its hash must be on one of
the origin's branches or tags (else it is fetched, and not found if the
origin lacks it): a bundle's pack may hold objects its refs do not
reach.
"""

import collections
import http.client
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from vcsperf.core import pooling
from vcsperf.core.pooling import format_bytes
from vcsperf.core.process import CommandError, git, run

#: The most a bundle list may hold, and how many bundles it may name.
MAX_LIST_BYTES = 1 << 20
MAX_BUNDLES = 64
#: The most packs a bundle is taken as; a list naming more for one
#: bundle gets the bundle itself.
MAX_PARTS = 64
DEFAULT_TIMEOUT = 30.0
DEFAULT_LOW_SPEED = 65536.0
DEFAULT_DEADLINE = 1800.0
#: What a file of Git's bundle format starts with (v2 and v3).
BUNDLE_SIGNATURES = (b"# v2 git bundle\n", b"# v3 git bundle\n")
REFS = "refs/bundles/"
TOKEN_KEY = "gitbridge.bundletoken"
#: Set in a store any bundle was applied to.
SEEDED_KEY = "gitbridge.seeded"
_CHUNK = 1 << 20
_TOKEN = re.compile(r"^[0-9]{1,19}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
#: The longest line a bundle's header may have, and the most bytes.
MAX_HEADER_LINE = 1 << 16
MAX_HEADER = 64 << 20
#: The most refs the bundles of one seeding may name in all: each is a
#: ref to write, to show the origin and to delete, and a header of
#: 200,000 (17 MB) took minutes past the deadline.  ``bundlegen``'s
#: bundles name the branches and tags.
MAX_REFS = 10000
_C_LOCALE = dict(os.environ, LC_ALL="C", GIT_TERMINAL_PROMPT="0")


class Failed(Exception):
    """Why seeding stopped: one line."""


class _PacksFailed(Failed):
    """Why a bundle's packs could not stand for it: one line."""


class Limits:
    """The bounds of one seeding (``sharepool.bundle-*``)."""

    def __init__(self, timeout=DEFAULT_TIMEOUT, low_speed=DEFAULT_LOW_SPEED,
                 deadline=DEFAULT_DEADLINE):
        self.timeout = timeout
        self.low_speed = low_speed
        self.deadline = deadline


class Seeded:
    """What a seeding applied: bundles, bytes downloaded, the highest
    creation token, and why it stopped early (None: it did not)."""

    def __init__(self):
        self.bundles = 0
        self.bytes = 0
        self.refs = 0
        self.token = None
        self.failure = None
        #: Why a bundle's packs were not used (one line each).
        self.fallbacks = []


def seed(store, list_url, limits, env=None):
    """Apply the bundles of ``list_url`` to the (new, bare) ``store``;
    returns a ``Seeded``.  Never raises for what the host or the list
    does: that is ``Seeded.failure``."""
    seeded = Seeded()
    download = _Download(limits)
    with pooling.StepDeadline(limits.deadline) as deadline, \
            deadline.watching(download.interrupt):
        try:
            for listed in bundles_of(download, list_url):
                if deadline.expired:
                    raise Failed("past sharepool.bundle-deadline")
                got, refs = _apply_listed(store, download, listed, limits,
                                          deadline, env,
                                          MAX_REFS - seeded.refs, seeded)
                seeded.bytes += got
                seeded.refs += refs
                seeded.bundles += 1
                if listed.token is not None:
                    seeded.token = max(listed.token, seeded.token or 0)
        except Failed as failure:
            seeded.failure = ("past sharepool.bundle-deadline (%gs)"
                              % limits.deadline if deadline.expired
                              else str(failure))
            _remove_temporary_packs(store)
    if seeded.token is not None:
        git("config", TOKEN_KEY, str(seeded.token), cwd=store)
    if seeded.bundles:
        git("config", SEEDED_KEY, "true", cwd=store)
    return seeded


def _apply_listed(store, download, listed, limits, deadline, env, most_refs,
                  seeded):
    """Apply one bundle of the list: as its packs when it names some
    (``_apply_parts``), else, or when they fail, as itself."""
    if len(listed.parts) > 1:
        try:
            return _apply_parts(store, listed, limits, deadline, env,
                                most_refs)
        except _PacksFailed as failure:
            if deadline.expired:
                raise
            seeded.fallbacks.append("%s; taking the bundle itself"
                                    % failure)
    return _apply(store, download, listed.uri, deadline, env, most_refs)


def _apply_parts(store, listed, limits, deadline, env, most_refs):
    """Take the bundle ``listed`` as its packs: the bundle's header (its
    refs), then every pack into its own ``git index-pack`` side by side,
    then a walk of all the objects the refs reach, which must all be
    there.  A failure after the header is a ``_PacksFailed``, and what
    the packs added is deleted: never a pack the store had before (a
    pack's name is its objects', so a host can send an earlier bundle's
    pack again as a part)."""
    header = _Download(limits)
    with deadline.watching(header.interrupt):
        chunks = header.chunks(listed.uri, 1 << 62)
        try:
            stream = _Stream(chunks)
            prerequisites, refs = _header(stream, listed.uri, most_refs)
        finally:
            chunks.close()
    if prerequisites:
        raise _PacksFailed("%s has prerequisites: its packs are not whole"
                           % _short(listed.uri))
    folder = os.path.join(store, "objects", "pack")
    before = set(os.listdir(folder))
    packs = []
    try:
        got = _index_side_by_side(store, listed.parts, limits, deadline,
                                  env, packs)
        _connected(store, [sha for sha, _name in refs], deadline)
        _point_refs(store, refs, listed.uri, deadline)
    except BaseException as failure:
        _remove_packs(folder, [name for name in packs
                               if "pack-%s.pack" % name not in before])
        _remove_temporary_packs(store)
        if isinstance(failure, Failed):
            raise _PacksFailed(str(failure))
        raise
    return stream.got + got, len(refs)


def _index_side_by_side(store, uris, limits, deadline, env, packs):
    """Download each pack of ``uris`` into its own ``git index-pack``, as
    many at once as there are cores (at least two); returns the bytes
    downloaded.  Each pack indexed is added to ``packs`` (its name); the
    first failure stops the others and is raised."""
    pending = list(uris)
    lock = threading.Lock()
    failures, downloads, running, got = [], [], [], [0]

    def stop_all():
        for download in downloads:
            download.interrupt()
        for proc in list(running):
            _kill(proc)

    def work():
        while True:
            with lock:
                if failures or not pending:
                    return
                uri = pending.pop(0)
                download = _Download(limits)
                downloads.append(download)
            try:
                with deadline.watching(download.interrupt):
                    chunks = download.chunks(uri, 1 << 62)
                    try:
                        stream = _Stream(chunks)
                        pack = _index_pack(store, stream.rest(), uri,
                                           deadline, env, (), running)
                    finally:
                        chunks.close()
                with lock:
                    packs.append(pack)
                    got[0] += stream.got
            except BaseException as failure:
                with lock:
                    failures.append(failure)
                stop_all()
                return

    workers = [threading.Thread(target=work, daemon=True,
                                name="bundle pack")
               for _ in range(min(len(pending),
                                  max(2, os.cpu_count() or 2)))]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            worker.join()
    except BaseException:  # Ctrl-C: no index-pack outlives the run
        with lock:
            failures.append(None)
        stop_all()
        for worker in workers:
            worker.join()
        raise
    failure = next((f for f in failures if isinstance(f, Failed)),
                   failures[0] if failures else None)
    if failure is not None:
        raise failure
    return got[0]


def _connected(store, shas, deadline):
    """Fail unless every object ``shas`` reach is in the store."""
    try:
        run(["git", "rev-list", "--objects", "--quiet", "--stdin"],
            _C_LOCALE, cwd=store, input="".join(s + "\n" for s in shas),
            deadline=deadline)
    except CommandError as failure:
        raise Failed("its packs lack objects its refs reach (%s)" % (
            failure.stderr.strip().splitlines() or ["?"])[0][:300])


def _remove_packs(folder, packs):
    """Delete the packs named ``packs`` (index-pack's names) from the
    store's pack ``folder``, with their indexes."""
    for name in packs:
        for suffix in (".keep", ".idx", ".rev", ".pack"):
            try:
                os.unlink(os.path.join(folder, "pack-%s%s" % (name, suffix)))
            except FileNotFoundError:
                pass


def _remove_temporary_packs(store):
    """What an index-pack that was stopped left (the store is new, and
    ours alone)."""
    pack = os.path.join(store, "objects", "pack")
    for name in os.listdir(pack):
        if name.startswith("tmp_"):
            os.unlink(os.path.join(pack, name))


def was_seeded(config):
    """Whether bundles were applied to the store whose settings (a
    ``gitconfig.GitConfig`` read with ``SEEDED_KEY`` among them) are
    ``config``: it may then hold objects no origin sent (a bundle's pack
    may carry more than its refs reach)."""
    return config.get(SEEDED_KEY) is not None


def drop_refs(store):
    """Delete the refs the bundles left: the store's refs are the
    origin's once it has been fetched."""
    names = git("for-each-ref", "--format=%(refname)", REFS,
                cwd=store).split()
    if names:
        run(["git", "update-ref", "--stdin"], _C_LOCALE, cwd=store,
            input="".join("delete %s\n" % name for name in names))


class Listed(collections.namedtuple("Listed", "uri token parts")):
    """A bundle to apply: its URI, its creation token (or None), and the
    URIs of the packs it is also published as (none, or two or more)."""


def bundles_of(download, list_url):
    """The ``Listed`` bundles to apply, in order: the list's, or
    ``list_url`` itself when it is a bundle."""
    first = download.head(list_url, MAX_LIST_BYTES + 1)
    if first.startswith(BUNDLE_SIGNATURES):
        return [Listed(list_url, None, ())]
    if len(first) > MAX_LIST_BYTES:
        raise Failed("list is over %s" % format_bytes(MAX_LIST_BYTES))
    return parse_list(first, list_url)


def parse_list(data, list_url):
    """The bundles of a bundle list (its bytes), read by Git's config
    parser, in the order they apply; ``Failed`` when it is no list or
    names none."""
    if b"\0" in data:
        raise Failed("not a bundle list (binary)")
    try:
        out = run(["git", "config", "--no-includes", "--file", "-",
                   "--list", "-z"], _C_LOCALE, input=data.decode("utf-8"))
    except CommandError:
        raise Failed("not a bundle list (git config cannot read it)")
    except UnicodeError:
        raise Failed("not a bundle list (not UTF-8 text)")
    top, entries, parts = {}, {}, {}
    for item in out.split("\0"):
        key, _, value = item.partition("\n")
        section, _, rest = key.partition(".")
        if section != "bundle":
            continue
        name, dot, field = rest.rpartition(".")
        if not dot:
            top[field] = value
        elif field == "gitbridgepart":
            parts.setdefault(name, []).append(value)
        else:
            entries.setdefault(name, {})[field] = value
    if top.get("version") != "1":
        raise Failed("not a bundle list (bundle.version is %r, not 1)"
                     % top.get("version"))
    mode = top.get("mode")
    if mode not in ("all", "any"):
        raise Failed("bundle.mode %r is neither all nor any" % mode)
    by_token = top.get("heuristic") == "creationToken"
    chosen = []
    for name, fields in entries.items():
        uri = fields.get("uri")
        token = fields.get("creationtoken")
        if not uri:
            continue
        if by_token and not (token and _TOKEN.match(token)):
            continue
        chosen.append(Listed(_absolute(list_url, uri),
                             int(token) if by_token else None,
                             _packs(list_url, parts.get(name, []))))
        if len(chosen) > MAX_BUNDLES:
            raise Failed("list names over %d bundles" % MAX_BUNDLES)
    if by_token:
        chosen.sort(key=lambda entry: entry.token)
        if len({entry.token for entry in chosen}) != len(chosen):
            raise Failed("two bundles have the same creationToken")
    if not chosen:
        raise Failed("list names no bundle it can use")
    return chosen[:1] if mode == "any" else chosen


def _packs(list_url, uris):
    """The absolute URIs of a bundle's packs; none (the bundle is taken
    as itself) for one pack, more than ``MAX_PARTS``, or any that is not
    http or https."""
    if not 2 <= len(uris) <= MAX_PARTS:
        return ()
    try:
        return tuple(_absolute(list_url, uri) for uri in uris)
    except Failed:
        return ()


def _absolute(list_url, uri):
    url = urllib.parse.urljoin(list_url, uri)
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
        raise Failed("bundle URI %r is not http or https" % uri[:200])
    return url


def _apply(store, download, uri, deadline, env, most_refs):
    """Download the bundle ``uri`` into the store, its pack streamed into
    ``git index-pack`` as it comes, and point ``refs/bundles/`` at its
    refs; the bytes downloaded.  ``--check-self-contained-and-connected``
    makes index-pack die on an object that refers to one neither the pack
    nor the store has, so a bundle's refs, whose tips it then holds, are
    whole histories: what ``git fetch`` would make sure of by walking
    every object again afterwards (a minute at Firefox's size)."""
    chunks = download.chunks(uri, 1 << 62)
    try:
        return _index(store, _Stream(chunks), uri, deadline, env,
                      most_refs)
    finally:
        chunks.close()


def _index(store, stream, uri, deadline, env, most_refs):
    prerequisites, refs = _header(stream, uri, most_refs)
    missing = _missing(store, prerequisites, deadline)
    if missing:
        raise Failed("%s: the store lacks its prerequisite commit %s"
                     % (_short(uri), missing[0]))
    _index_pack(store, stream.rest(), uri, deadline, env,
                ("--fix-thin", "--check-self-contained-and-connected"))
    _point_refs(store, refs, uri, deadline)
    return stream.got, len(refs)


def _index_pack(store, pieces, uri, deadline, env, options, running=None):
    """Stream ``pieces`` (a pack's bytes) into ``git index-pack`` with
    ``options``; returns the name it gave the pack.  ``running``: a list
    the process is on while it runs, for whoever must stop it."""
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            ["git", "index-pack", "--stdin", *options], cwd=store,
            env=dict(env or os.environ, LC_ALL="C", GIT_TERMINAL_PROMPT="0"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
            start_new_session=True)
        if running is not None:
            running.append(proc)
        try:
            with deadline.watching(lambda: _kill(proc)):
                try:
                    try:
                        for data in pieces:
                            proc.stdin.write(data)
                    finally:
                        try:
                            proc.stdin.close()
                        except OSError:
                            pass
                except BrokenPipeError:
                    pass  # index-pack has stopped: its status says why
                except BaseException:
                    _kill(proc)
                    proc.wait()
                    raise
                out = proc.stdout.read().decode("ascii", "replace")
                status = proc.wait()
        finally:
            # once reaped, its process group's number may be another's
            if running is not None:
                running.remove(proc)
        errors.seek(0)
        said = errors.read(4096).decode("utf-8", "replace").strip()
    # 1: the pack refers to objects the store had (an incremental bundle)
    if status not in (0, 1) or not out.startswith(("pack\t", "keep\t")):
        raise Failed("%s: %s" % (_short(uri), (said.splitlines() or [
            "git index-pack exited with status %d" % status])[0][:300]))
    return out.split("\t", 1)[1].strip()


def _point_refs(store, refs, uri, deadline):
    """Point ``refs/bundles/`` at the bundle's ``refs``, whose tips must
    be in the store."""
    missing = _missing(store, [sha for sha, _name in refs], deadline)
    if missing:
        raise Failed("%s: its ref names %s, which it does not hold"
                     % (_short(uri), missing[0]))
    updates = "".join("update %s%s %s\n" % (REFS, name[len("refs/"):], sha)
                      for sha, name in refs if name.startswith("refs/"))
    try:
        run(["git", "update-ref", "--stdin"], _C_LOCALE, cwd=store,
            input=updates, deadline=deadline)
    except CommandError as failure:
        raise Failed("%s: %s" % (_short(uri), (
            failure.stderr.strip().splitlines() or ["?"])[0][:300]))


def _header(stream, uri, most_refs):
    """The prerequisites (shas) and refs (``(sha, name)``, at most
    ``most_refs``) of the bundle header at the start of ``stream``."""
    signature = stream.line()
    if signature + b"\n" not in BUNDLE_SIGNATURES:
        raise Failed("%s is not a bundle" % _short(uri))
    prerequisites, refs = [], []
    while True:
        line = stream.line()
        if line is None:
            raise Failed("%s: cut short in its header" % _short(uri))
        if not line:
            return prerequisites, refs
        if stream.got > MAX_HEADER:
            raise Failed("%s: its header is over %s" % (
                _short(uri), format_bytes(MAX_HEADER)))
        text = line.decode("utf-8", "replace")
        if text.startswith("@"):
            if text != "@object-format=sha1":
                raise Failed("%s: bundle capability %r is not supported"
                             % (_short(uri), text[:100]))
            continue
        sha, _, name = text.lstrip("-").partition(" ")
        if not _SHA.match(sha):
            raise Failed("%s: its header has a line that is neither a ref "
                         "nor a prerequisite" % _short(uri))
        if text.startswith("-"):
            prerequisites.append(sha)
        else:
            refs.append((sha, name))
            if len(refs) > most_refs:
                raise Failed("%s: its header names over %d refs (%d in all "
                             "the bundles of a list)" % (
                                 _short(uri), most_refs, MAX_REFS))


def _missing(store, shas, deadline):
    """The shas of ``shas`` that the store does not hold."""
    if not shas:
        return []
    try:
        out = run(["git", "cat-file", "--batch-check=%(objectname)"],
                  _C_LOCALE, cwd=store,
                  input="".join(s + "\n" for s in shas), deadline=deadline)
    except CommandError as failure:  # killed at the deadline
        raise Failed("git cat-file: %s" % (
            failure.stderr.strip().splitlines() or ["?"])[0][:300])
    return [line.split()[0] for line in out.splitlines()
            if line.endswith(" missing")]


def _kill(proc):
    if proc.returncode is not None:
        return  # reaped: its number may be another process group's now
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


class _Stream:
    """A download's pieces read as header lines, then as the rest."""

    def __init__(self, chunks):
        self.chunks = iter(chunks)
        self.buffer = b""
        self.got = 0

    def _more(self):
        data = next(self.chunks, b"")
        self.got += len(data)
        self.buffer += data
        return bool(data)

    def line(self):
        """The next line without its newline; None at the end."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_HEADER_LINE or not self._more():
                return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def rest(self):
        if self.buffer:
            yield self.buffer
            self.buffer = b""
        for data in self.chunks:
            self.got += len(data)
            yield data


def _short(uri):
    return uri if len(uri) <= 200 else uri[:200] + "..."


class _NoOtherSchemes(urllib.request.HTTPRedirectHandler):
    """Redirects within http and https only (urllib's own limits stop
    loops: 10 redirects, 4 to one URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise Failed("redirected to a %s URL" % (scheme or "relative"))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Download:
    """HTTP GETs within ``Limits``; ``interrupt`` (from the deadline's
    watchdog) shuts the current connection's socket, also while the
    status line and headers are read, and makes every later connection
    (a redirect's) fail at once."""

    def __init__(self, limits):
        self.limits = limits
        self.opener = urllib.request.build_opener(
            _NoOtherSchemes(), _Handler(self), _SecureHandler(self))
        self.response = None
        self.sock = None
        self.stopped = False

    def interrupt(self):
        self.stopped = True
        sock = self.sock
        if sock is not None:
            pooling.shut_down(sock)

    def connected(self, sock):
        """``sock`` is the current connection's (``_Connection``)."""
        self.sock = sock
        if self.stopped:  # the deadline passed while it connected
            pooling.shut_down(sock)

    def chunks(self, url, most):
        """The body of ``url``, in pieces, up to ``most`` bytes."""
        try:
            self.response = self.opener.open(
                urllib.request.Request(url, headers={
                    "User-Agent": "gitbridge-checkout"}),
                timeout=self.limits.timeout)
        except urllib.error.HTTPError as err:
            raise Failed("%s: HTTP %d" % (_short(url), err.code))
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise Failed("%s: %s" % (_short(url), _reason(err)))
        got, window_start, window_bytes = 0, time.monotonic(), 0
        try:
            while got < most:
                try:
                    data = self.response.read1(min(_CHUNK, most - got))
                except (OSError, ValueError,
                        http.client.HTTPException) as err:
                    raise Failed("%s: %s after %s" % (
                        _short(url), _reason(err), format_bytes(got)))
                if not data:
                    length = self.response.headers.get("Content-Length")
                    if length and length.isdigit() and int(length) > got:
                        raise Failed("%s: cut short at %s of %s" % (
                            _short(url), format_bytes(got),
                            format_bytes(int(length))))
                    return
                got += len(data)
                window_bytes += len(data)
                elapsed = time.monotonic() - window_start
                if elapsed >= self.limits.timeout:
                    if window_bytes < self.limits.low_speed * elapsed:
                        raise Failed("%s: below %s/s for %gs" % (
                            _short(url), format_bytes(self.limits.low_speed),
                            self.limits.timeout))
                    window_start, window_bytes = time.monotonic(), 0
                yield data
        finally:
            self.response.close()
            self.response = None
            self.sock = None

    def head(self, url, most):
        return b"".join(self.chunks(url, most))


class _Connection:
    """What the connections of a ``_Download`` add to http.client's: a
    stopped download opens none, the socket is handed to the download for
    its ``interrupt``, and the status line and headers, which a host can
    trickle a byte at a time without tripping the per-read timeout, must
    come within ``sharepool.bundle-timeout`` in all."""

    download = None

    def connect(self):
        if self.download.stopped:
            raise OSError("stopped")
        super().connect()
        self.download.connected(self.sock)

    def getresponse(self):
        sock, limit, late = self.sock, self.download.limits.timeout, []

        def too_late():
            late.append(True)
            pooling.shut_down(sock)
        timer = threading.Timer(limit, too_late)
        timer.daemon = True
        timer.start()
        try:
            response = super().getresponse()
        except (OSError, http.client.HTTPException):
            if late:
                raise self._too_late(limit)
            raise
        finally:
            timer.cancel()
        if late:
            response.close()
            raise self._too_late(limit)
        return response

    def _too_late(self, limit):
        return Failed("%s: timed out: no response headers within %gs"
                      % (self.host, limit))


def _connection_class(download, base):
    return type(base.__name__, (_Connection, base), {"download": download})


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, download):
        super().__init__()
        self.connection = _connection_class(download,
                                            http.client.HTTPConnection)

    def http_open(self, req):
        return self.do_open(self.connection, req)


class _SecureHandler(urllib.request.HTTPSHandler):
    def __init__(self, download):
        super().__init__()
        self.connection = _connection_class(download,
                                            http.client.HTTPSConnection)

    def https_open(self, req):
        return self.do_open(self.connection, req, context=self._context)


def _reason(err):
    reason = getattr(err, "reason", None) or err
    if isinstance(reason, socket.timeout) or "timed out" in str(reason):
        return "timed out"
    return str(reason).strip().splitlines()[0][:200] if str(reason) \
        else type(reason).__name__
