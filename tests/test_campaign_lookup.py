"""The adversarial campaign for the lookup surface of the commitid
extension (issue 27): the index in ``.hg/cache``, ``hg commitid-lookup``
(here and ``--remote``), the ``commitidlookup`` wire command and
``/json-commitid``, each answer judged against reading every description.

- Hostile and oversized keys, seeded, to the wire command, the web
  endpoint and the command line: no 500, no traceback in the server's
  log, an answer within the bounds (``MAX_ANSWER``), each known key
  answered as the descriptions say.
- The index's files changed behind its back (truncated, deleted, a
  docket or data file replaced by a directory, a FIFO, a link to
  /dev/zero, another repository's index, an older docket): lookups are
  right or fall back to reading descriptions, under an address-space
  limit and a timeout; ``hg debugupdatecaches`` makes it whole again.
- A stock hg (the extension off) committing, stripping, adding the
  stripped changesets back in a seeded order and rolling back beside it:
  every lookup stays right.
- A server that lies to ``--remote`` (malformed lines, keys it was not
  asked, short or non-hex nodes, an endless answer, errors, a stall):
  one ``abort:`` line, bounded time and memory.
- Special files: the docket's name taken by a directory (an index that
  cannot be written, as on a read-only repository; the tests run as
  root, whom permissions do not stop): lookups answer by reading the
  descriptions, nothing in it is deleted.
"""

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import campaign
from test_all_extensions import HGRC
from test_commitindex_hg import scan, wire_lookup
from vcsperf.core import commitindex, commitkeys
from vcsperf.harness import servers

pytestmark = pytest.mark.campaign

MAX_ANSWER = 4 << 20
PLAIN = ("--config", "extensions.commitid=!")


def summary(rng, number):
    # Mostly a bug of its own (a changeset numbered otherwise then
    # answers for another bug), sometimes one shared.
    return rng.choice(["Bug %d - change %d", "bug %d: change %d",
                       "Fix %d then %d"]) % (
        100 + number if rng.random() < 0.8 else 7, number)


def commit(hg, repo, rng, number, plain=False):
    (repo / ("f%d" % number)).write_text("x")
    message = "%s\n\nDifferential Revision: https://x/D%d\n" % (
        summary(rng, number), number)
    hg(*(PLAIN if plain else ()), "commit", "-qAm", message, cwd=repo)


def lookup_all(hg, repo, keys, **kwargs):
    """``(proc, {key: {node, ...}})`` of ``hg commitid-lookup --hidden``
    for ``keys``, under an address-space limit and a timeout."""
    proc = campaign.run_bounded(
        [hg.binary, "commitid-lookup", "--hidden", *keys, "-T",
         "{key} {node}\\n"], env=hg.env, cwd=repo, timeout=120, **kwargs)
    found = {}
    for line in proc.stdout.splitlines():
        key, _, node = line.rpartition(" ")
        found.setdefault(key, set()).add(node)
    return proc, found


def right_answers(hg, repo, what, tally):
    """One case: every key the descriptions carry (and one none does) is
    answered as they say, with no traceback."""
    truth = scan(hg, repo)[1]
    keys = sorted(truth) + ["review:D999"]
    proc, found = lookup_all(hg, repo, keys)
    ok = found == truth and "Traceback" not in proc.stderr and \
        proc.returncode == 1
    tally.case(ok, "%s: %r != %r (%s)" % (what, found, truth,
                                          proc.stderr[-300:]))
    return ok


@pytest.fixture
def repo(hg, hgrc, hgrepo):
    hgrc.write_text(HGRC + "[ui]\nallowemptycommit = yes\n")
    rng = campaign.Tally("setup", 1).rng
    for number in range(6):
        commit(hg, hgrepo, rng, number)
    return hgrepo


def canonical(typed):
    """``kind:key`` of a key as typed."""
    return "%s:%s" % commitkeys.parse_key(typed)


def hostile_key(rng):
    choices = [
        lambda: "bug " + "9" * rng.choice([18, 19, 4301, 20000]),
        lambda: "bug " + "\u0661" * rng.randint(1, 5),
        lambda: "id:" + "".join(rng.choice("ab\n\r\0 :%&=") for _ in
                                range(rng.randint(0, 12))),
        lambda: rng.choice(["review:", "bug:", "id:", ""]) + "x" *
        rng.choice([0, 255, 256, 257, 70000]),
        lambda: "D%d" % rng.randrange(10),
        lambda: "bug %d" % (100 + rng.randrange(7)),
        lambda: "review:D" + "1" * rng.randint(1, 40),
        lambda: "".join(chr(rng.randrange(32, 0x3000))
                        for _ in range(rng.randint(1, 30))),
    ]
    return rng.choice(choices)()


@pytest.mark.slow
def test_hostile_keys_to_wire_web_and_command_line(tally, hg, repo,
                                                   hgserve, tmp_path):
    server = hgserve(repo)
    truth = scan(hg, repo)[1]
    for _ in range(campaign.size(12, 200)):
        count = tally.rng.choice([1, 3, 999, 1000, 1001, 5000])
        keys = [hostile_key(tally.rng) for _ in range(min(count, 8))]
        keys = (keys * (count // len(keys) + 1))[:count]
        if tally.rng.random() < 0.5:
            keys = keys + ["review:D%d" % n for n in range(count)]
        wire_keys = "\n".join(keys).encode("utf-8", "surrogateescape")
        what = "%d keys like %r" % (len(keys), keys[:3])
        # Mercurial's own parsing of a request (hgweb's query string, the
        # wire's POST arguments) fails on percent-encoded non-ASCII
        # bytes, before any extension runs: those go to the command line
        # below.
        if not wire_keys.isascii():
            continue
        try:
            kind, answer = wire_lookup(server.url, wire_keys)
            ok = len(answer) <= MAX_ANSWER and (
                kind == "application/hg-error" or all(
                    node.decode() in truth.get(canonical(key.decode()), ())
                    for key, _, node in (line.rpartition(b" ") for line
                                         in answer.splitlines())))
        except urllib.error.HTTPError as err:
            ok, answer = False, err
        tally.case(ok, "wire: %s -> %r" % (what, answer[:300]))
        # The web: a query of at most 64 KB (the server's line bound).
        query = urllib.parse.urlencode([("key", key) for key in keys])
        if len(query) < 60000:
            try:
                with urllib.request.urlopen(
                        server.url + "json-commitid?" + query) as response:
                    body = response.read()
                    answer = json.loads(body)
                ok = len(body) <= 2 * MAX_ANSWER and all(
                    set(nodes) == truth.get(canonical(key), set())
                    for key, nodes in answer.items())
            except urllib.error.HTTPError as err:
                ok, answer = err.code == 400, err
            tally.case(ok, "web: %s -> %r" % (what, answer))
    # The command line, here and --remote: one abort line or an answer.
    for _ in range(campaign.size(4, 50)):
        key = hostile_key(tally.rng)
        if "\0" in key or len(key) > 10000:
            continue
        for remote in ((), ("--remote", server.url)):
            proc = campaign.run_bounded(
                [hg.binary, "commitid-lookup", *remote, key], env=hg.env,
                cwd=repo, timeout=120)
            tally.case(proc.returncode in (0, 1) and not proc.stderr or
                       campaign.is_clean_abort(proc),
                       "%r %r: %s" % (remote, key, proc.stderr[-300:]))
    log = (tmp_path / "repo.error.log").read_text()
    tally.case("Traceback" not in log, "server log: " + log[-500:])
    tally.check()


def index_files(repo):
    cache = repo / ".hg" / "cache"
    return sorted(cache / name for name in os.listdir(cache)
                  if name.startswith("commitindex"))


def damage(rng, path, other):
    """Change ``path`` as something beside the index might; what was
    done."""
    how = rng.choice(["truncate", "delete", "directory", "fifo",
                      "/dev/zero", "/dev/null", "other", "empty"])
    if how == "truncate":
        size = os.path.getsize(path)
        os.truncate(path, rng.randrange(size) if size else 0)
        return how
    os.unlink(path)
    if how == "directory":
        os.mkdir(path)
    elif how == "fifo":
        os.mkfifo(path)
    elif how in ("/dev/zero", "/dev/null"):
        os.symlink(how, path)
    elif how == "other":
        shutil.copyfile(other, path)
    elif how == "empty":
        open(path, "wb").close()
    return how


def restore(path):
    """Undo what ``damage`` left that no writer replaces (a directory)."""
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)


@pytest.mark.slow
def test_index_files_changed_behind_its_back(tally, hg, repo, tmp_path):
    # Another repository's index, for "other".
    other = tmp_path / "other"
    hg("init", other)
    rng = tally.rng
    for number in range(3):
        commit(hg, other, rng, 50 + number)
    other_files = index_files(other)
    for round in range(campaign.size(6, 80)):
        commit(hg, repo, rng, 10 + round)
        hg("debugupdatecaches", cwd=repo)
        if rng.random() < 0.3:
            # An older docket, then more changesets.
            docket = repo / ".hg" / "cache" / "commitindex"
            old = docket.read_bytes()
            commit(hg, repo, rng, 100 + round, plain=True)
            docket.write_bytes(old)
            right_answers(hg, repo, "older docket", tally)
        files = index_files(repo)
        path = rng.choice(files)
        how = damage(rng, path, rng.choice(other_files))
        what = "%s %s" % (how, path.name)
        right_answers(hg, repo, what, tally)
        restore(path)
        proc = campaign.run_bounded([hg.binary, "debugupdatecaches"],
                                    env=hg.env, cwd=repo, timeout=120)
        tally.case(proc.returncode == 0 and not proc.stderr,
                   "%s: debugupdatecaches %s" % (what, proc.stderr[-300:]))
        with commitindex.Index(os.fspath(repo / ".hg" / "cache"),
                               "commitindex") as index:
            index.verify()
        _, debug = lookup_debug(hg, repo)
        tally.case(debug == [], "%s: after repair %r" % (what, debug))
        right_answers(hg, repo, what + ", repaired", tally)
    tally.check()


def lookup_debug(hg, repo):
    out = hg("commitid-lookup", "--debug", "--hidden", "review:D1",
             cwd=repo, check=False)
    return out, [line for line in out.splitlines()
                 if line.startswith("commitid:")
                 and "looked up in" not in line]


@pytest.mark.slow
def reorder(hg, repo, rng, first, directory):
    """What a stock hg can do: strip revisions ``first`` to the tip and
    add them back one by one, in a random order that puts parents before
    children (the tip may well stay the same)."""
    directory.mkdir()
    out = hg("log", "-r", "%d:" % first, "-T", "{node} {p1.node} "
             "{p2.node}\n", cwd=repo)
    parents = {}
    for line in out.splitlines():
        node, *of = line.split()
        parents[node] = set(of)
        hg(*PLAIN, "bundle", "-q", "-r", node, "--base", "parents(%s)"
           % node, directory / node, cwd=repo)
    hg(*PLAIN, "debugstrip", "-q", "--no-backup", "-r", "%d:" % first,
       cwd=repo)
    while parents:
        ready = sorted(node for node, of in parents.items()
                       if not of & set(parents))
        node = rng.choice(ready)
        hg(*PLAIN, "unbundle", "-q", directory / node, cwd=repo)
        del parents[node]


def test_stock_hg_strips_and_adds_beside_it(tally, hg, repo, tmp_path):
    rng = tally.rng
    bundles = []
    for step in range(campaign.size(10, 150)):
        revs = int(hg("log", "-r", "tip", "-T", "{rev}", cwd=repo)) + 1
        action = rng.choice(["commit", "plain commit", "strip", "reorder",
                             "reorder", "add back", "rollback"])
        if action in ("commit", "plain commit"):
            hg("update", "-q", str(rng.randrange(revs)), cwd=repo)
            commit(hg, repo, rng, 200 + step, plain=action != "commit")
        elif action == "strip" and revs > 2:
            rev = str(rng.randrange(1, revs))
            path = tmp_path / ("b%d" % step)
            hg(*PLAIN, "bundle", "-q", "-r", "%s::" % rev, "--base",
               "parents(%s)" % rev, path, cwd=repo, check=False)
            if path.exists():
                bundles.append(path)
            hg(*PLAIN, "debugstrip", "-q", "--no-backup", "-r", rev,
               cwd=repo)
        elif action == "reorder" and revs > 2:
            reorder(hg, repo, rng, rng.randrange(max(1, revs - 5), revs),
                    tmp_path / ("r%d" % step))
        elif action == "add back" and bundles:
            path = bundles.pop(rng.randrange(len(bundles)))
            hg(*PLAIN, "unbundle", "-q", path, cwd=repo, check=False)
        elif action == "rollback":
            hg(*PLAIN, "--config", "ui.rollback=yes", "rollback", "-q",
               cwd=repo, check=False)
        else:
            continue
        right_answers(hg, repo, "step %d: %s" % (step, action), tally)
    hg("debugupdatecaches", cwd=repo)
    right_answers(hg, repo, "repaired", tally)
    tally.case(lookup_debug(hg, repo)[1] == [], "debug after repair")
    tally.check()


# A lying server ------------------------------------------------------------

CAPABILITIES = b"lookup branchmap pushkey known getbundle batch commitidlookup"


def lies(rng):
    """``(name, status, content type, body or a callable writing it)``
    of each lie."""
    node = "ab" * 20
    ctype = "application/mercurial-0.1"
    return [
        ("garbage", 200, ctype, b"garbage\n"),
        ("unasked key", 200, ctype, ("id:zzz %s\n" % node).encode()),
        ("short node", 200, ctype, b"review:D1 abc\n"),
        ("non-hex node", 200, ctype, ("review:D1 %s\n" % ("zz" * 20))
         .encode()),
        ("binary", 200, ctype, bytes(rng.randrange(256)
                                     for _ in range(200))),
        ("no space", 200, ctype, b"review:D1" + b"a" * 40),
        ("endless", 200, ctype, lambda out: [out.write(b"x" * 65536)
                                             for _ in range(200)]),
        ("error", 200, "application/hg-error", b"no\n"),
        ("500", 500, "text/plain", b"boom"),
        ("html", 200, "text/html", b"<html>"),
        ("stall", 200, ctype, lambda out: time.sleep(30)),
    ]


class LyingHandler(servers.QuietHandler):
    def do_GET(self):
        self.answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()

    def answer(self):
        name, status, ctype, body = self.server_owner.lie
        if "cmd=capabilities" in self.path:
            status, ctype, body = 200, "application/mercurial-0.1", \
                CAPABILITIES
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if callable(body):
            self.end_headers()
            try:
                body(self.wfile)
            except OSError:
                pass
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_lying_server_for_remote(tally, hg, hgrc, tmp_path):
    hgrc.write_text(HGRC)
    server = servers.LocalServer(LyingHandler)
    try:
        every = lies(tally.rng)
        for number in range(campaign.size(len(every), 100)):
            # Each lie once, then drawn at random.
            server.lie = every[number] if number < len(every) else \
                tally.rng.choice(every)
            began = time.monotonic()
            try:
                proc = campaign.run_bounded(
                    [hg.binary, "--config", "http.timeout=5",
                     "commitid-lookup", "--remote", server.url, "D1"],
                    env=hg.env, cwd=tmp_path, timeout=60,
                    address_space=1 << 30)
                ok = campaign.is_clean_abort(proc)
                said = proc.stderr[-300:]
            except subprocess.TimeoutExpired:
                ok, said = False, "no end"
            tally.case(ok, "%s: %s (%.1f s)" % (
                server.lie[0], said, time.monotonic() - began))
    finally:
        server.stop()
    tally.check()


def test_an_index_that_cannot_be_written(tally, hg, repo):
    """The docket's name taken by a directory that holds a file, which
    no rename replaces: nothing can be written, as on a read-only
    repository (the tests run as root, whom permissions do not stop;
    core hg itself needs ``.hg/cache`` to be a directory).  Lookups read
    the descriptions; ``debugupdatecaches`` says it cannot write."""
    docket = repo / ".hg" / "cache" / "commitindex"
    docket.unlink()
    docket.mkdir()
    (docket / "kept").write_text("the user's")
    rng = tally.rng
    for number in range(campaign.size(2, 20)):
        commit(hg, repo, rng, 300 + number)
        right_answers(hg, repo, "docket is a directory", tally)
    proc = campaign.run_bounded([hg.binary, "debugupdatecaches"],
                                env=hg.env, cwd=repo, timeout=120)
    tally.case(proc.returncode == 0 and "Traceback" not in proc.stderr
               and "cannot write the index" in proc.stderr,
               "debugupdatecaches: " + proc.stderr[-300:])
    tally.case((docket / "kept").read_text() == "the user's", "kept")
    tally.check()
