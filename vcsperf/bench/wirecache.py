"""A fleet of clients pulling from hg serve: core Mercurial's zstd with no
cache beside the wirecache extension at its default level, on one
repository, in one run.

    vcsperf bench wirecache REPO [--clients 8,32,128] [--json out.json]

The repository is cloned (hardlinked) under the work directory; the last
``--push`` changesets are stripped from the served copy and pushed back
over HTTP, through the wirecache server, as a developer's push lands.
Two ``hg serve`` processes serve that one repository, core's (no
extension loaded) and wirecache's, each behind a counting proxy that
forwards at most ``--server-threads`` requests at a time over kept-alive
connections: a server with that many worker threads (hg serve itself
starts a thread per connection, unbounded; on 2 cores 128 at once only
measures the scheduler).  Then, for each side, the cache emptied first:

- the push: for each ``--clients`` N, N clients that were at the
  previous tip pull the new changesets at once;
- the stream: ``--stream-pulls`` pulls of depths drawn (seeded) from 1 to
  ``--max-depth`` changesets, ``--stream-clients`` of them at a time.

A client replays the requests a real ``hg pull`` from that state sent
(capabilities, discovery, getbundle), recorded once through the proxy;
its latency is from its first request to the last byte of its last
answer.  Measured per client: server CPU seconds (``/proc`` of the ``hg
serve`` process tree, over the round, divided by its clients), the bytes
the proxy passed on, p50 and p95 latency; ratios are wirecache's over
core's.  With ``--repeat R`` each round is run R times per side, the
sides in turn (wirecache's cache emptied each time), and the figures are
over all of them: ``/proc`` counts CPU in ticks of 10 ms, a tenth of
wirecache's CPU over a round of 32 clients at Firefox scale.

Correctness, which fails the bench: every getbundle answer, decompressed,
must be byte for byte the one the cacheless core server sent that real
client for the same request, whose changesets are checked against the
repository (``hg debugbundle`` beside ``hg log`` of the requested range)
and whose result in the real client (``hg log`` of every changeset, its
phase and bookmarks) matches the served repository; after each round of
the push a real client pulls from wirecache's proxy too and is checked
the same way.
"""

import bz2
import hashlib
import http.client
import io
import os
import random
import shutil
import sys
import threading
import time
import urllib.parse
import zlib

import zstandard

from vcsperf.bench import benchcli
from vcsperf.core.errors import Abort
from vcsperf.harness import measure, tools
from vcsperf.harness.proxies import CLIENT_HEADER, CountingProxy
from vcsperf.harness.servers import HgServer

TARGETS = (
    ("at 32 clients, server CPU per client", "cpu_32", "<=", 0.2),
    ("at 32 clients, bytes per client", "bytes_32", "<=", 0.9),
)
#: Seconds a replayed request may take, queueing for a worker included.
REQUEST_TIMEOUT = 900
#: Options of ``hg serve`` on both sides: the push comes over HTTP.
SERVE_ARGS = ("--config", "web.allow-push=*", "--config",
              "web.push_ssl=false")
SIDES = ("core", "wirecache")
#: ``wirecache.memory`` of ``--memory-answers``.
MEMORY_ANSWERS = "32m"
#: The template whose output must match between a client and the server.
LOG_TEMPLATE = "{rev}:{node} {phase} {bookmarks}\\n"


class Pull:
    """The requests a real ``hg pull`` made from a client that lacked the
    last ``depth`` changesets: ``(method, path, headers, body)`` each, and
    the digest of the bundle the cacheless server answered its getbundle
    with (``reference``)."""

    def __init__(self, depth, requests, reference):
        self.depth = depth
        self.requests = requests
        self.reference = reference


def bundle_chunks(content_type, body):
    """The bundle an answer to ``getbundle`` carries, decompressed, in
    chunks; ``ValueError`` when it cannot be decoded."""
    if content_type == "application/mercurial-0.1":
        engine, data = b"zlib", body
    elif content_type == "application/mercurial-0.2" and body:
        engine, data = body[1:1 + body[0]], body[1 + body[0]:]
    else:
        raise ValueError("not a bundle answer: %r" % content_type)
    try:
        if engine == b"zstd":
            reader = zstandard.ZstdDecompressor().stream_reader(
                io.BytesIO(data), read_across_frames=True)
            yield from iter(lambda: reader.read(1 << 20), b"")
        elif engine == b"zlib":
            decompressor = zlib.decompressobj()
            yield decompressor.decompress(data)
            yield decompressor.flush()
            if not decompressor.eof:
                raise ValueError("zlib stream cut short")
        elif engine == b"bzip2":
            decompressor = bz2.BZ2Decompressor()
            yield decompressor.decompress(data)
            if not decompressor.eof or decompressor.unused_data:
                raise ValueError("bzip2 stream cut short or followed by "
                                 "other bytes")
        elif engine == b"none":
            yield data
        else:
            raise ValueError("unknown compression %r" % engine)
    except (zstandard.ZstdError, zlib.error, OSError, EOFError) as err:
        raise ValueError(str(err)) from err


def bundle_digest(content_type, body):
    """SHA-256 of the decompressed bundle, or ``"undecodable: WHY"``."""
    digest = hashlib.sha256()
    try:
        for chunk in bundle_chunks(content_type, body):
            digest.update(chunk)
    except ValueError as err:
        return "undecodable: %s" % err
    return digest.hexdigest()


def getbundle_args(headers):
    """The arguments of a recorded getbundle request (hg sends them in
    ``X-HgArg-N`` headers), as ``{name: value}``."""
    lowered = {name.lower(): value for name, value in headers.items()}
    joined = "".join(lowered["x-hgarg-%d" % n]
                     for n in range(1, len(lowered) + 1)
                     if "x-hgarg-%d" % n in lowered)
    return {name: values[0] for name, values in
            urllib.parse.parse_qs(joined, keep_blank_values=True).items()}


class Fleet:
    """The served repository and its two servers, each behind a proxy of
    ``slots`` workers (``with`` stops them); the repository the push comes
    from (``full``); a client repository real pulls are made in."""

    def __init__(self, source, work, push, slots, max_depth=1,
                 memory_answers=False):
        self.work = work
        hgrc = os.path.join(work, "wirecache.hgrc")
        with open(hgrc, "w") as fh:
            fh.write("[extensions]\nwirecache =\n")
            if memory_answers:
                fh.write("[wirecache]\nmemory = %s\n" % MEMORY_ANSWERS)
        # Core is served with no extension loaded at all.
        self.env = {"core": tools.isolated_env(work),
                    "wirecache": tools.isolated_env(work, hgrc)}
        core = self.env["core"]
        self.full = os.path.join(work, "full")
        self.served = os.path.join(work, "served")
        self.client = os.path.join(work, "client")
        tools.hg(["clone", "-q", "-U", os.path.abspath(source), self.full],
                 core)
        self.tiprev = int(tools.hg(["-R", self.full, "log", "-r", "tip",
                                    "-T", "{rev}"], core))
        if not 0 < push <= self.tiprev:
            raise Abort("cannot push %d of %d changesets"
                        % (push, self.tiprev + 1),
                        hint="give --push from 1 to %d" % self.tiprev)
        if max_depth > self.tiprev:
            raise Abort("--max-depth %d is deeper than the history"
                        % max_depth, hint="give at most %d" % self.tiprev)
        self.base = self.tiprev - push
        tools.hg(["clone", "-q", "-U", self.full, self.served], core)
        self._strip(self.served, self.base)
        # Whole, as every real pull leaves it.
        tools.hg(["clone", "-q", "-U", self.full, self.client], core)
        self.servers, self.proxies = {}, {}
        try:
            for side in SIDES:
                log = os.path.join(work, side)
                self.servers[side] = HgServer(
                    self.env[side], self.served, *SERVE_ARGS,
                    "-A", log + ".access.log", "-E", log + ".error.log")
                self.proxies[side] = CountingProxy(self.servers[side].url,
                                                   slots=slots)
        except BaseException:
            self.stop()
            raise
        self.checked = {"responses": 0, "references": 0, "real_pulls": 0}
        #: getbundle requests sent to wirecache's server since its cache
        #: was emptied.
        self.getbundles = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        for proxy in self.proxies.values():
            proxy.stop()
        for server in self.servers.values():
            server.stop()

    def _strip(self, repo, keep):
        """Strip ``repo`` to its revisions up to ``keep``."""
        tools.hg(["-R", repo, "debugstrip", "-q", "--no-backup", "-r",
                  "%d:" % (keep + 1)], self.env["core"])

    def push(self):
        """The last changesets pushed over HTTP, through the wirecache
        server, as a developer's push lands."""
        tools.hg(["-R", self.full, "push", "-q", "-r", "tip",
                  self.servers["wirecache"].url], self.env["core"])

    def log(self, repo):
        return tools.hg(["-R", repo, "log", "-r", "all()", "-T",
                         LOG_TEMPLATE], self.env["core"])

    def real_pull(self, side, depth):
        """A real ``hg pull`` through ``side``'s proxy from a client
        lacking the last ``depth`` changesets, its result checked against
        the served repository; what the proxy saw of it."""
        self._strip(self.client, self.tiprev - depth)
        proxy = self.proxies[side]
        self.getbundles += side == "wirecache"
        proxy.recorded = []
        try:
            tools.hg(["-R", self.client, "pull", "-q", proxy.url],
                     self.env["core"])
            seen = proxy.recorded
        finally:
            proxy.recorded = None
        pulled, served = self.log(self.client), self.log(self.served)
        if pulled != served:
            raise Abort("a real hg pull from %s's server left a repository "
                        "unlike the served one (%d lines of hg log, %d "
                        "served)" % (side, len(pulled.splitlines()),
                                     len(served.splitlines())))
        self.checked["real_pulls"] += 1
        return seen

    def capture(self, depth):
        """The ``Pull`` of a client lacking the last ``depth`` changesets,
        made by a real client against core's server, its bundle checked
        against the repository."""
        seen = self.real_pull("core", depth)
        [answer] = [entry for entry in seen if "cmd=getbundle" in entry[1]]
        headers = dict(answer[5])
        body = answer[6]
        args = getbundle_args(answer[2])
        path = os.path.join(self.work, "reference.hg")
        with open(path, "wb") as fh:
            for chunk in bundle_chunks(headers.get("Content-Type"), body):
                fh.write(chunk)
        sent = _nodes(tools.hg(["debugbundle", path], self.env["core"]))
        revset = "::(%s) - ::(%s)" % (
            "+".join(args["heads"].split()),
            "+".join(args.get("common", "").split()) or "null")
        wanted = tools.hg(["-R", self.served, "log", "-r", revset, "-T",
                           "{node}\\n"], self.env["core"]).split()
        if sorted(sent) != sorted(wanted) or len(wanted) != depth:
            raise Abort("core's bundle for a pull of %d changesets holds "
                        "%d of them, %d others" % (
                            depth, len(set(sent) & set(wanted)),
                            len(set(sent) - set(wanted))))
        self.checked["references"] += 1
        requests = [(method, path, headers, request_body)
                    for method, path, headers, request_body, *_ in seen]
        return Pull(depth, requests,
                    bundle_digest(headers.get("Content-Type"), body))

    def clear_cache(self):
        """The cache emptied, its counters too, as a new state of the
        repository finds it."""
        self.counters()
        shutil.rmtree(os.path.join(self.served, ".hg", "cache", "wirecache"),
                      ignore_errors=True)
        self.getbundles = 0

    def counters(self):
        """hits, misses and uncached responses of ``hg wirecache`` once
        every getbundle sent to its server is counted: the server counts
        a response after it has sent it, when its client may have gone
        (30 seconds at most)."""
        deadline = time.monotonic() + 30
        while True:
            out = tools.hg(["-R", self.served, "wirecache", "-T",
                            "{hits} {misses} {uncached}"],
                           self.env["wirecache"])
            counted = dict(zip(("hits", "misses", "uncached"),
                               map(int, out.split())))
            if (sum(counted.values()) >= self.getbundles
                    or time.monotonic() > deadline):
                return counted
            time.sleep(0.2)

    def round(self, side, name, pulls, concurrency, together=False):
        """Each of ``pulls`` replayed against ``side``'s proxy by one
        client, ``concurrency`` at a time (``together``: all released at
        once); the figures per client, every answer checked."""
        proxy, server = self.proxies[side], self.servers[side]
        proxy.by_client.clear()
        if side == "wirecache":
            self.getbundles += len(pulls)
        jobs = list(enumerate(pulls))
        results = [None] * len(jobs)
        lock = threading.Lock()
        gate = threading.Barrier(concurrency) if together else None

        def worker():
            if gate is not None:
                gate.wait()
            while True:
                with lock:
                    if not jobs:
                        return
                    index, pull = jobs.pop(0)
                results[index] = replay(proxy, pull, "%s-%d" % (side, index))

        threads = [threading.Thread(target=worker, daemon=True)
                   for _ in range(concurrency)]
        before = measure.tree_cpu_seconds(server.pid)
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
        cpu = measure.tree_cpu_seconds(server.pid) - before
        for index, (pull, result) in enumerate(zip(pulls, results)):
            self.check(side, name, index, pull, result)
        clients = len(pulls)
        return {
            "clients": clients, "concurrency": concurrency,
            "wall_seconds": wall, "server_cpu_seconds": cpu,
            "bytes": sum(proxy.by_client["%s-%d" % (side, i)]
                         for i in range(clients)),
            "latencies": [result["seconds"] for result in results],
        }

    def check(self, side, name, index, pull, result):
        """Fail the bench unless client ``index`` was answered what the
        cacheless server answers its request."""
        if result["error"] or result["digest"] != pull.reference:
            why = result["error"] or ("its bundle decompresses to other "
                                      "bytes (%s)" % result["digest"])
            raise Abort("client %d of %s (%s, a pull of depth %d) "
                        "received a response a cacheless server would not "
                        "have sent: %s" % (index + 1, name, side, pull.depth,
                                           why))
        self.checked["responses"] += 1


def _nodes(debugbundle):
    """The changeset nodes ``hg debugbundle`` lists."""
    return [line.strip() for line in debugbundle.splitlines()
            if line.startswith("    ") and len(line.strip()) == 40]


def replay(proxy, pull, client):
    """``pull``'s requests sent through ``proxy`` as client ``client``, on
    one kept-alive connection, as hg sends them: its latency, the digest
    of its bundle, and an error (a status other than 200, a dropped
    connection) or None."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", urllib.parse.urlsplit(proxy.url).port,
        timeout=REQUEST_TIMEOUT)
    answer, error = None, None
    start = time.perf_counter()
    try:
        for method, path, headers, body in pull.requests:
            conn.request(method, path, body=body,
                         headers=dict(headers, **{CLIENT_HEADER: client}))
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                error = "%s answered %d" % (path, response.status)
                break
            if "cmd=getbundle" in path:
                answer = (response.getheader("Content-Type"), data)
    except (OSError, http.client.HTTPException) as err:
        error = "%s: %s" % (type(err).__name__, err)
    finally:
        conn.close()
    seconds = time.perf_counter() - start
    if error is None and answer is None:
        error = "no getbundle answer"
    return {"seconds": seconds, "error": error,
            "digest": bundle_digest(*answer) if answer else None}


def percentile(ordered, pct):
    """The ``pct`` percentile of the sorted ``ordered`` (nearest rank)."""
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def stream_depths(pulls, max_depth, seed):
    """The depths of the stream's pulls, drawn with ``seed``."""
    rng = random.Random(seed)
    return [rng.randint(1, max_depth) for _ in range(pulls)]


def measure_sides(fleet, name, pulls, concurrency, together, repeat=1):
    """``repeat`` rounds per side, the sides in turn, the cache emptied
    before each of wirecache's; the figures per client over all of them
    (CPU is read in ticks of 10 ms: a side's few tenths of a second over
    a round are a few percent apart), the counters of wirecache's last."""
    rounds = {side: [] for side in SIDES}
    for _ in range(repeat):
        for side in SIDES:
            if side == "wirecache":
                fleet.clear_cache()
            rounds[side].append(fleet.round(side, name, pulls, concurrency,
                                            together))
    figures = {side: per_client(rounds[side]) for side in SIDES}
    figures["wirecache"].update(fleet.counters())
    return figures


def per_client(rounds):
    """The figures per client of one side's ``rounds`` together."""
    clients = sum(one["clients"] for one in rounds)
    latencies = sorted(seconds for one in rounds
                       for seconds in one["latencies"])
    return {
        "clients": rounds[0]["clients"], "rounds": len(rounds),
        "concurrency": rounds[0]["concurrency"],
        "wall_seconds": sum(one["wall_seconds"] for one in rounds),
        "server_cpu_per_client": sum(one["server_cpu_seconds"]
                                     for one in rounds) / clients,
        "bytes_per_client": sum(one["bytes"] for one in rounds) / clients,
        "p50_seconds": percentile(latencies, 50),
        "p95_seconds": percentile(latencies, 95),
    }


def side_ratios(figures):
    core, cached = figures["core"], figures["wirecache"]
    return {key: cached[key] / core[key] if core[key] else float("nan")
            for key in ("server_cpu_per_client", "bytes_per_client",
                        "p50_seconds", "p95_seconds")}


#: Short names of the ratios in ``ratios``: ``cpu_32``, ``bytes_stream``.
_SHORT = {"server_cpu_per_client": "cpu", "bytes_per_client": "bytes",
          "p50_seconds": "p50", "p95_seconds": "p95"}


def run(source, workdir, clients="8,32,128", push=5, max_depth=20,
        stream_pulls=96, stream_clients=4, server_threads=8, seed=31,
        repeat=1, memory_answers=False):
    """Measure on hardlinked clones of ``source`` under ``workdir``
    (``memory_answers``: wirecache's hg serve keeps whole answers in
    memory too); returns ``(results, ratios)``."""
    counts = _counts(clients)
    if min(max_depth, stream_pulls, stream_clients, server_threads,
           repeat) < 1:
        raise Abort("--max-depth, --stream-pulls, --stream-clients, "
                    "--server-threads and --repeat must be positive")
    with Fleet(source, workdir, push, server_threads, max_depth,
               memory_answers) as fleet:
        fleet.push()
        depths = stream_depths(stream_pulls, max_depth, seed)
        captured = {depth: fleet.capture(depth)
                    for depth in sorted(set(depths) | {push})}
        rounds, ratios = {}, {}
        for count in counts:
            name = "%d clients after the push" % count
            rounds[name] = measure_sides(fleet, name,
                                         [captured[push]] * count, count,
                                         together=True, repeat=repeat)
            # The real client, served from the cache this time.
            fleet.real_pull("wirecache", push)
            for key, value in side_ratios(rounds[name]).items():
                ratios["%s_%d" % (_SHORT[key], count)] = value
        name = "stream of %d pulls, depth 1-%d" % (stream_pulls, max_depth)
        rounds[name] = measure_sides(
            fleet, name, [captured[depth] for depth in depths],
            stream_clients, together=False, repeat=repeat)
        for key, value in side_ratios(rounds[name]).items():
            ratios["%s_stream" % _SHORT[key]] = value
        results = {
            "changesets": fleet.tiprev + 1, "pushed": push,
            "server_threads": server_threads, "stream_seed": seed,
            "repeat": repeat, "memory_answers": memory_answers,
            "rounds": rounds, "checked": dict(fleet.checked),
        }
    return results, ratios


def _counts(clients):
    try:
        counts = [int(part) for part in str(clients).split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise Abort("--clients takes positive numbers separated by commas, "
                    "not %r" % clients, hint="such as --clients 8,32,128")
    return counts


def format_report(source, results, table_ratios):
    lines = [
        "repository: %s" % source,
        "%d changesets, the last %d pushed through wirecache's hg serve; "
        "each server behind a proxy of %d workers; %d round(s) of each "
        "measurement per side; memory answers %s"
        % (results["changesets"], results["pushed"],
           results["server_threads"], results.get("repeat", 1),
           "on" if results.get("memory_answers") else "off"), "",
        "%-34s %22s %26s %22s %22s" % (
            "per client, core / wirecache", "server CPU s (ratio)",
            "bytes (ratio)", "p50 latency s", "p95 latency s"),
    ]
    for name, figures in results["rounds"].items():
        core, cached = figures["core"], figures["wirecache"]
        ratio = side_ratios(figures)
        cells = []
        for key, form, width in (
                ("server_cpu_per_client", "%.3f", 22),
                ("bytes_per_client", "%.0f", 26),
                ("p50_seconds", "%.2f", 22), ("p95_seconds", "%.2f", 22)):
            text = "%s / %s (%.2fx)" % (form % core[key], form % cached[key],
                                        ratio[key])
            cells.append("%*s" % (width, text))
        lines.append("%-34s %s" % (name, " ".join(cells)))
    lines.append("")
    for name, figures in results["rounds"].items():
        cached = figures["wirecache"]
        lines.append("wirecache, %s: %d hits, %d misses, %d uncached"
                     % (name, cached["hits"], cached["misses"],
                        cached["uncached"]))
    checked = results["checked"]
    lines += ["checked: %d answers, each the bytes the cacheless server "
              "sent a real client for the same request; %d of those "
              "checked against the repository; %d real pulls' repositories "
              "checked" % (checked["responses"], checked["references"],
                           checked["real_pulls"]), ""]
    targets = [target for target in TARGETS if target[1] in table_ratios]
    lines += benchcli.target_lines(targets, table_ratios)
    if not targets:
        lines.append("(the targets are at 32 clients, not measured)")
    return "\n".join(lines)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("clients", dict(default="8,32,128", help="how many clients pull "
                         "the push at once, a round each (default "
                         "8,32,128)")),
        ("push", dict(type=int, default=5, help="changesets pushed "
                      "(default 5)")),
        ("max-depth", dict(type=int, default=20, help="the stream's deepest "
                           "pull, in changesets (default 20)")),
        ("stream-pulls", dict(type=int, default=96, help="pulls in the "
                              "stream (default 96)")),
        ("stream-clients", dict(type=int, default=4, help="the stream's "
                                "pulls at a time (default 4)")),
        ("server-threads", dict(type=int, default=8, help="requests each "
                                "server is given at a time (default 8)")),
        ("seed", dict(type=int, default=31, help="seed of the stream's "
                      "depths")),
        ("repeat", dict(type=int, default=1, help="rounds of each "
                        "measurement per side, taken together (default "
                        "1)")),
        ("memory-answers", dict(action="store_true", help="wirecache's "
                                "hg serve also keeps whole answers in "
                                "memory (wirecache.memory=%s)"
                                % MEMORY_ANSWERS)),
    ], argv)
