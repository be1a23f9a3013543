"""The commitid extension's index with the real hg and all six extensions:
after every history-editing command, strip, rollback, pull and unbundle
the lookups answer as reading every description would, from the index
(no fallback), and never name a changeset that is gone; readers run while
transactions append; ``hg serve`` answers over the wire (HTTP and SSH)
and on the web."""

import json
import os
import struct
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

import campaign
from netservers import write_ssh_wrapper
from test_all_extensions import HGRC
from vcsperf.core import commitindex
from vcsperf.core.commitid import message_keys
from vcsperf.harness.proxies import Fault, FlakyProxy

EVOLUTION = ("uncommit =\n[experimental]\nevolution = all\n"
             "[ui]\nrollback = yes\n")


def message(number):
    return ("Bug %d - change %d; r=me\n\nDifferential Revision: "
            "https://phabricator.example/D%d\n" % (100 + number, number,
                                                    number))


def commit(hg, repo, number, name=None):
    name = name or "file%d" % number
    with open(repo / name, "a") as fh:
        fh.write("line %d\n" % number)
    hg("commit", "-qAm", message(number), cwd=repo)


def import_changes(hg, repo, numbers):
    """One changeset per number, each adding a file, by one ``hg
    import`` (the extension gives each its commit ID)."""
    patches = "".join(
        "# HG changeset patch\n# User test\n# Date %d 0\n%s\n"
        "diff --git a/new%d b/new%d\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/new%d\n@@ -0,0 +1,1 @@\n+line %d\n"
        % (number, message(number), number, number, number, number)
        for number in numbers)
    path = repo.parent / ("patches-%d" % numbers[0])
    path.write_text(patches)
    hg("import", "-q", path, cwd=repo)


@pytest.fixture
def repo(hg, hgrc, hgrepo):
    """Four changesets with bugs, reviews and commit IDs; the first
    public."""
    hgrc.write_text(HGRC + EVOLUTION)
    import_changes(hg, hgrepo, range(1, 5))
    hg("phase", "--public", "-r", "0", cwd=hgrepo)
    return hgrepo


def scan(hg, repo):
    """``(nodes by revision, {"kind:key": {node, ...}})`` of every
    changeset, hidden ones too, read from the descriptions."""
    out = hg("log", "--hidden", "-r", "all()", "-T", "{node}\\0{desc}\\0",
             cwd=repo)
    fields = out.split("\0")[:-1]
    found = {}
    for node, desc in zip(fields[::2], fields[1::2]):
        for kind, key in message_keys(desc):
            found.setdefault("%s:%s" % (kind, key), set()).add(node)
    return fields[::2], found


def lookup(hg, repo, keys, *options):
    """({"kind:key": {node, ...}}, the debug lines about the index, but
    for the one that says how long the lookups took)."""
    out = hg("commitid-lookup", "--debug", *options, *keys, "-T",
             "{key} {node}\\n", cwd=repo, check=False)
    found, debug = {}, []
    for line in out.splitlines():
        key, _, node = line.rpartition(" ")
        if len(node) == 40 and key in keys:
            found.setdefault(key, set()).add(node)
        elif line.startswith("commitid:") and "looked up in" not in line:
            debug.append(line)
    return found, debug


def check_index(hg, repo, verify=False):
    """The index covers every changeset (its docket counts them, and it
    holds each one's node) and holds every key of every changeset, hidden
    ones too, as a scan finds them.  With ``verify``, ``hg
    commitid-lookup`` answers every key from it as the scan does (and no
    key no changeset has), and the repository verifies."""
    by_rev, expected = scan(hg, repo)
    cache = os.fspath(repo / ".hg" / "cache")
    with commitindex.Index(cache, "commitindex") as index:
        assert index.covers[:12] == b"hgheads1" + struct.pack(
            ">I", len(by_rev))
        assert [index.node(rev).hex() for rev in range(len(by_rev))] == \
            by_rev
        index.verify()
        for typed, found in expected.items():
            kind, _, key = typed.partition(":")
            assert {by_rev[rev] for rev in index.lookup(kind, key)} == found
    if verify:
        keys = sorted(expected) + ["review:D999999", "bug:1"]
        found, debug = lookup(hg, repo, keys, "--hidden")
        assert found == expected
        assert debug == []
        hg("verify", "-q", cwd=repo)
    return expected


def nodes(hg, repo, revset):
    return hg("log", "-r", revset, "-T", "{node}\\n", cwd=repo).split()


@pytest.mark.slow
def test_every_history_editing_command_leaves_a_current_index(
        hg, repo, tmp_path):
    check_index(hg, repo)
    # amend
    with open(repo / "new4", "a") as fh:
        fh.write("amended\n")
    hg("commit", "--amend", "-q", cwd=repo)
    check_index(hg, repo)
    # rebase (on disk; in memory the transaction is the same)
    hg("rebase", "-q", "-r", "review(D4)", "-d", "review(D2)", cwd=repo)
    check_index(hg, repo)
    # histedit: fold
    [first] = nodes(hg, repo, "review(D2)")
    [second] = nodes(hg, repo, "review(D4)")
    rules = tmp_path / "rules"
    rules.write_text("pick %s\nfold %s\n" % (first, second))
    hg("update", "-q", second, cwd=repo)
    hg("histedit", "-q", "--commands", rules, first, cwd=repo)
    check_index(hg, repo)
    # graft, absorb, shelve and unshelve
    hg("update", "-q", "review(D1)", cwd=repo)
    hg("graft", "-q", "-r", "review(D2)", cwd=repo)
    check_index(hg, repo)
    with open(repo / "new2", "a") as fh:
        fh.write("absorbed\n")
    hg("absorb", "-q", "--apply-changes", cwd=repo)
    check_index(hg, repo)
    with open(repo / "new1", "a") as fh:
        fh.write("shelved\n")
    hg("shelve", "-q", "-m", "wip", cwd=repo)
    hg("unshelve", "-q", cwd=repo)
    check_index(hg, repo)
    # commitid-add rewrites a changeset that had no ID
    hg("commit", "-qm", "Bug 77 - no id yet", "--config",
       "extensions.commitid=!", cwd=repo)
    hg("commitid-add", "-q", cwd=repo)
    assert len(nodes(hg, repo, "bug(77)")) == 1
    check_index(hg, repo, verify=True)
    # Hidden changesets count with --hidden only, as in core's revsets.
    # Bug 104's changeset was amended, rebased, then folded into another
    # (whose summary stays): three hidden versions, none visible.
    hidden = lookup(hg, repo, ["bug:104"], "--hidden")[0]
    assert len(hidden["bug:104"]) == 3
    assert lookup(hg, repo, ["bug:104"])[0] == {}


def test_strip_and_rollback_never_leave_the_index_past_the_repo(hg, repo):
    before = check_index(hg, repo)
    gone = nodes(hg, repo, "2")
    hg("--config", "experimental.evolution=", "strip", "-q", "-r", "2",
       cwd=repo)
    after = check_index(hg, repo)
    assert not any(set(gone) & found for found in after.values())
    assert "review:D3" not in after and "review:D3" in before
    # The backup comes back, by pull (a transaction) ...
    [backup] = os.listdir(repo / ".hg" / "strip-backup")
    hg("unbundle", "-q", repo / ".hg" / "strip-backup" / backup, cwd=repo)
    assert check_index(hg, repo) == before
    # ... and rollback undoes the last transaction.
    commit(hg, repo, 6)
    assert "review:D6" in check_index(hg, repo)
    hg("rollback", "-q", cwd=repo)
    assert check_index(hg, repo) == before
    # Rolled back and committed again by an hg without the extension: the
    # docket's tip revision has another node now, and is not trusted.
    commit(hg, repo, 7)
    plain = ("--config", "extensions.commitid=!")
    hg(*plain, "rollback", "-q", cwd=repo)
    hg(*plain, "commit", "-qAm", message(8), cwd=repo)
    found, debug = lookup(hg, repo, ["review:D8", "review:D7"])
    assert found == {"review:D8": set(nodes(hg, repo, "tip"))}
    assert any("covers changesets that are gone" in line for line in debug)
    hg("debugupdatecaches", cwd=repo)
    check_index(hg, repo, verify=True)


def test_pull_and_a_repository_without_an_index(hg, hgrc, repo, tmp_path):
    clone = tmp_path / "clone"
    hg("clone", "-q", "-r", "1", repo, clone)
    check_index(hg, clone)
    hg("pull", "-q", repo, cwd=clone)
    check_index(hg, clone)
    # Made without the extension: the revsets read the descriptions,
    # and say so; debugupdatecaches builds the index.
    plain = tmp_path / "plain"
    hg("--config", "extensions.commitid=!", "clone", "-q", repo, plain)
    assert not [f for f in os.listdir(plain / ".hg" / "cache")
                if f.startswith("commitindex")]
    found, debug = lookup(hg, plain, ["review:D2"])
    assert found == {"review:D2": set(nodes(hg, repo, "review(D2)"))}
    assert "commitid: no index (hg debugupdatecaches builds it)" in debug
    hg("debugupdatecaches", cwd=plain)
    check_index(hg, plain)
    # Other key rules: the index is rebuilt, never trusted.
    hgrc.write_text(HGRC + EVOLUTION + "[commitid]\n"
                    "index-trailers = X-Commit-ID\n")
    found, debug = lookup(hg, plain, ["review:D2"])
    assert any("other key rules" in line for line in debug)
    commit(hg, plain, 9)
    check_index(hg, plain)
    # A damaged index is found by debugupdatecaches and rebuilt.
    cache = plain / ".hg" / "cache"
    [table] = [f for f in os.listdir(cache) if f.endswith(".table")]
    data = bytearray((cache / table).read_bytes())
    data[-1] ^= 0xFF
    (cache / table).write_bytes(bytes(data))
    hg("debugupdatecaches", cwd=plain)
    with commitindex.Index(os.fspath(cache), "commitindex") as index:
        index.verify()
    check_index(hg, plain, verify=True)


def test_revsets_and_lookup_output(hg, repo, hgserve, tmp_path):
    """The revsets and ``hg commitid-lookup`` here, over the wire and on
    the web, and a server without the extension."""
    [second] = nodes(hg, repo, "1")
    commit_id = hg("log", "-r", "1", "-T", "{commitid}", cwd=repo)
    revsets = ["review(D2)", "review(2)", "bug(102)",
               "commitid(%s)" % commit_id, "commitid('re:.') and bug(102)",
               "draft() and review(D1)"]
    out = hg("log", "-r", "1", "-T", "".join(
        '{revset("%s") %% "{node}"}\\n' % revset.replace('"', '\\"')
        for revset in revsets), cwd=repo)
    assert out.splitlines() == [second] * 5 + [""]
    out = json.loads(hg("commitid-lookup", "D2", "bug 102", commit_id,
                        "-T", "json", cwd=repo))
    assert out == [{"key": key, "node": second}
                   for key in ("D2", "bug 102", commit_id)]
    proc = hg.proc("commitid-lookup", "D2", "D999", cwd=repo)
    assert (proc.returncode, proc.stdout) == (1, "D2 %s\n" % second)
    bad = hg.proc("log", "-r", "bug(x)", cwd=repo)
    assert bad.returncode and "bug requires a number" in bad.stderr

    server = hgserve(repo)
    out = hg("commitid-lookup", "--remote", server.url, "D2", "bug 102",
             "D999", cwd=tmp_path, check=False)
    assert out == "D2 %s\nbug 102 %s\n" % (second, second)
    with urllib.request.urlopen(server.url + "json-commitid?key=D2&key="
                                "bug%20102&key=D999") as response:
        assert response.headers["Content-Type"] == "application/json"
        assert json.load(response) == {"D2": [second], "bug 102": [second],
                                       "D999": []}
    plain_server = hgserve(repo, "--config", "extensions.commitid=!")
    proc = hg.proc("commitid-lookup", "--remote", plain_server.url, "D2",
                   cwd=tmp_path)
    assert proc.returncode == 255
    assert "cannot look up commit IDs" in proc.stderr
    assert "the server needs the commitid extension" in proc.stderr

    # Over SSH: Mercurial's ssh peer talks to ``hg serve --stdio`` through
    # ``ui.ssh``, a stand-in for ssh that runs the command here and keeps
    # what the server sent.
    record = tmp_path / "ssh-record"
    hg.env["VCSPERF_SSH_RECORD"] = str(record)
    ssh = ("--config", "ui.ssh=%s" % write_ssh_wrapper(
        str(tmp_path / "ssh")))
    url = "ssh://user@dummy/%s" % repo
    out = hg(*ssh, "--config", "ui.remotecmd=%s" % hg.binary,
             "commitid-lookup", "--remote", url, "D2", "bug 102", "D999",
             cwd=tmp_path, check=False)
    assert out == "D2 %s\nbug 102 %s\n" % (second, second)
    assert ("review:D2 %s\nbug:102 %s\n" % (second, second)).encode() in \
        record.read_bytes()
    # (``serve --stdio`` refuses --config.)
    without = tmp_path / "without-commitid.hgrc"
    without.write_text("[extensions]\ncommitid = !\n")
    plain_hg = tmp_path / "hg-without-commitid"
    plain_hg.write_text('#!/bin/sh\nHGRCPATH="$HGRCPATH:%s" exec %s "$@"\n'
                        % (without, hg.binary))
    plain_hg.chmod(0o755)
    proc = hg.proc(*ssh, "--config", "ui.remotecmd=%s" % plain_hg,
                   "commitid-lookup", "--remote", url, "D2", cwd=tmp_path)
    assert proc.returncode == 255
    assert "the server needs the commitid extension" in proc.stderr


@pytest.mark.slow
def test_readers_while_transactions_append(hg, repo, tmp_path):
    """Readers in this process (the index files themselves) and in hg
    processes look keys up while a pull and commits append: every answer
    is right, no reader fails."""
    source = tmp_path / "source"
    hg("clone", "-q", repo, source)
    import_changes(hg, source, range(10, 110))
    cache = os.fspath(repo / ".hg" / "cache")
    first = set(nodes(hg, repo, "0"))
    done = threading.Event()
    errors, reads = [], [0]

    def read_files():
        while not done.is_set():
            try:
                with commitindex.Index(cache, "commitindex") as index:
                    revs = index.lookup("review", "D1")
                    if revs != [0]:
                        errors.append("D1 -> %r" % revs)
                reads[0] += 1
            except Exception as err:  # any failure is the finding
                errors.append(repr(err))

    reader = threading.Thread(target=read_files)
    reader.start()
    try:
        hg_reader = subprocess.Popen(
            ["sh", "-c", "for i in 1 2 3 4; do %s commitid-lookup "
             "review:D1 bug:101 || exit 1; done" % hg.binary],
            cwd=repo, env=hg.env, stdout=subprocess.PIPE, text=True)
        hg("pull", "-q", source, cwd=repo)
        for number in range(200, 202):
            commit(hg, repo, number, name="file2")
        out, _ = hg_reader.communicate()
    finally:
        done.set()
        reader.join()
    assert errors == [] and reads[0] > 0
    assert hg_reader.returncode == 0
    assert {line.split()[1] for line in out.splitlines()
            if line.startswith("review:D1")} == first
    check_index(hg, repo, verify=True)


PLAIN = ("--config", "extensions.commitid=!")


def plain_commit(hg, repo, parent, summary, name):
    """A changeset on ``parent`` committed by an hg without the
    extension."""
    hg(*PLAIN, "update", "-q", parent, cwd=repo)
    (repo / name).write_text(summary)
    hg(*PLAIN, "commit", "-qAm", summary, cwd=repo)
    return nodes(hg, repo, ".")[0]


def test_stock_hg_strips_and_adds_back_in_another_order(hg, hgrc, hgrepo,
                                                         tmp_path):
    """Issue 27: an hg without the extension strips changesets and adds
    them (or others) back in another order, the tip unchanged.  The
    docket's tip revision and node still matched, and lookups named the
    other changeset; debugupdatecaches did not repair it."""
    hgrc.write_text(HGRC)
    repo = hgrepo
    root = plain_commit(hg, repo, "null", "Bug 100 - root", "root")
    a = plain_commit(hg, repo, root, "Bug 111 - a", "a")
    b = plain_commit(hg, repo, root, "Bug 222 - b", "b")
    hg(*PLAIN, "merge", "-q", a, cwd=repo)
    hg(*PLAIN, "commit", "-qm", "Merge", cwd=repo)
    [merge] = nodes(hg, repo, "tip")
    hg("debugupdatecaches", cwd=repo)
    check_index(hg, repo)
    # The same changesets, numbered otherwise: b first, then a, then the
    # merge (one head, the same node at the same revision).
    for name, rev, base in (("b", b, root), ("a", a, root),
                            ("m", merge, "%s+%s" % (a, b))):
        hg(*PLAIN, "bundle", "-q", "-r", rev, "--base", base,
           tmp_path / name, cwd=repo)
    hg(*PLAIN, "debugstrip", "-q", "--no-backup", "-r", a, "-r", b, cwd=repo)
    for name in "bam":
        hg(*PLAIN, "unbundle", "-q", tmp_path / name, cwd=repo)
    assert nodes(hg, repo, "all()") == [root, b, a, merge]
    found, debug = lookup(hg, repo, ["bug 111", "bug 222", "bug 100"])
    assert found == {"bug 111": {a}, "bug 222": {b}, "bug 100": {root}}
    assert any("numbers changesets otherwise" in line for line in debug)
    assert nodes(hg, repo, "bug(111)") == [a]
    hg("debugupdatecaches", cwd=repo)
    check_index(hg, repo, verify=True)
    # Another changeset at the number of one stripped: x where b was,
    # the tip (a) the same.
    hg("debugstrip", "-q", "--no-backup", "-r", merge, cwd=repo)
    check_index(hg, repo)
    hg(*PLAIN, "bundle", "-q", "-r", a, "--base", root, tmp_path / "a2",
       cwd=repo)
    hg(*PLAIN, "debugstrip", "-q", "--no-backup", "-r", b, "-r", a,
       cwd=repo)
    x = plain_commit(hg, repo, root, "Bug 333 - x", "x")
    hg(*PLAIN, "unbundle", "-q", tmp_path / "a2", cwd=repo)
    assert nodes(hg, repo, "all()") == [root, x, a]
    found, debug = lookup(hg, repo, ["bug 111", "bug 222", "bug 333"])
    assert found == {"bug 111": {a}, "bug 333": {x}}
    assert any("covers changesets that are gone" in line for line in debug)
    assert nodes(hg, repo, "bug(222)") == []
    hg("debugupdatecaches", cwd=repo)
    check_index(hg, repo, verify=True)


is_clean_abort = campaign.is_clean_abort
LONG_BUG = "1" * 4301


def test_a_bug_number_of_4301_digits_is_no_key(hg, hgrc, repo, hgserve,
                                                tmp_path):
    """Issue 27: "Bug" and 4,301 digits in a summary made int() raise:
    the commit landed, then every later commit, pull and lookup ended in
    a traceback, and a server's every push in HTTP 500."""
    long_message = "Bug %s - the digits\n" % LONG_BUG
    hg("commit", "-q", "--config", "ui.allowemptycommit=yes", "-m",
       long_message, cwd=repo)
    commit(hg, repo, 5)
    assert lookup(hg, repo, ["review:D5"])[0] == {
        "review:D5": set(nodes(hg, repo, "tip"))}
    proc = hg.proc("commitid-lookup", "bug " + "1" * 20, cwd=repo)
    assert is_clean_abort(proc) and "at most 18 digits" in proc.stderr
    proc = hg.proc("log", "-r", "bug(%s)" % LONG_BUG, cwd=repo)
    assert is_clean_abort(proc) and "at most 18 digits" in proc.stderr
    check_index(hg, repo, verify=True)
    # A server: pushes of such a changeset land with 200, pulls and
    # clones of it work, its web search and lookup answer without a 500.
    server = hgserve(repo, "--config", "web.push_ssl=no", "--config",
                     "web.allow-push=*")
    clone = tmp_path / "clone"
    hg("clone", "-q", server.url, clone)
    hg("commit", "-q", "--config", "ui.allowemptycommit=yes", "-m",
       "Bug %s - again\n" % ("2" * 4400), cwd=clone)
    hg("push", "-q", server.url, cwd=clone)
    hg("pull", "-q", server.url, cwd=clone)
    hg("clone", "-q", server.url, tmp_path / "second")
    with urllib.request.urlopen(server.url + "log?rev=bug(%s)"
                                % LONG_BUG) as response:
        assert response.status == 200
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "json-commitid?key=bug:"
                               + LONG_BUG)
    assert refused.value.code == 400
    assert "longer than 256" in json.load(refused.value)["error"]
    assert "Traceback" not in (tmp_path / "repo.error.log").read_text()
    assert len(nodes(hg, clone, "all()")) == 7


def wire_lookup(url, keys):
    """``(content type, body)`` of a raw ``commitidlookup`` request whose
    keys argument is ``keys`` (bytes), sent as Mercurial's POST
    arguments."""
    body = urllib.parse.urlencode({"keys": keys}).encode()
    request = urllib.request.Request(
        url + "?cmd=commitidlookup", data=body, headers={
            "X-HgArgs-Post": str(len(body)),
            "Content-Type": "application/mercurial-0.1"})
    with urllib.request.urlopen(request) as response:
        return response.headers["Content-Type"], response.read()


def test_served_lookups_are_bounded(hg, repo, hgserve, tmp_path):
    """Issue 27: repeated keys were answered in full (100 KB asked, 235
    MB answered), and a malformed key was a 500 with a traceback in the
    server's log."""
    server = hgserve(repo)
    [first] = nodes(hg, repo, "0")
    kind, answer = wire_lookup(server.url, b"\n".join([b"review:D1"] * 11000))
    assert answer == b"review:D1 %s\n" % first.encode()
    # Web: a 64 KB query of one key, answered once.
    with urllib.request.urlopen(server.url + "json-commitid?" +
                                "&key=D1" * 8000) as response:
        assert json.load(response) == {"D1": [first]}
    # More distinct keys than a lookup takes: refused, saying why.
    many = b"\n".join(b"review:D%d" % n for n in range(1001))
    kind, answer = wire_lookup(server.url, many)
    assert kind == "application/hg-error"
    assert b"1001 keys in one lookup, more than 1000" in answer
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "json-commitid?" + "&".join(
            "key=D%d" % n for n in range(1001)))
    assert refused.value.code == 400
    # Malformed keys on the wire: an error, no 500.
    for keys in (b"bug:x", b"id:a b", b"review:abc", b"", b"\n\n",
                 b"bug:" + b"9" * 5000):
        kind, answer = wire_lookup(server.url, keys)
        assert kind == "application/hg-error", keys
    # A --remote key that holds a line end (which would be two keys on
    # the wire): one abort line, nothing sent.
    proc = hg.proc("commitid-lookup", "--remote", server.url, "id:a\nb",
                   cwd=tmp_path)
    assert is_clean_abort(proc) and "not a commit ID" in proc.stderr
    proc = hg.proc("commitid-lookup", "--remote", server.url,
                   *["D%d" % n for n in range(1001)], cwd=tmp_path)
    assert is_clean_abort(proc) and "more than a server answers" in \
        proc.stderr
    # The same key typed twice, or in two ways, is answered for each.
    out = hg("commitid-lookup", "--remote", server.url, "D1", "D1",
             "review:D1", cwd=tmp_path)
    assert out == "D1 %s\nD1 %s\nreview:D1 %s\n" % ((first,) * 3)
    assert "Traceback" not in (tmp_path / "repo.error.log").read_text()


@pytest.mark.slow
def test_a_key_matching_too_many_changesets_is_refused(hg, hgrc, hgrepo,
                                                       hgserve):
    hgrc.write_text(HGRC)
    patches = "".join(
        "# HG changeset patch\n# User test\n# Date %d 0\nBug 5 - part %d\n"
        "\ndiff --git a/f%d b/f%d\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/f%d\n@@ -0,0 +1,1 @@\n+x\n" % (n, n, n, n, n)
        for n in range(1001))
    (hgrepo.parent / "patches").write_text(patches)
    hg("import", "-q", hgrepo.parent / "patches", cwd=hgrepo)
    server = hgserve(hgrepo)
    kind, answer = wire_lookup(server.url, b"bug:5")
    assert kind == "application/hg-error"
    assert b"matches 1001 changesets, more than a lookup answers" in answer
    # Locally there is no bound.
    assert len(nodes(hg, hgrepo, "bug(5)")) == 1001


def test_a_docket_that_is_no_file_or_names_no_file(hg, repo):
    """Issue 27: a docket that was a directory or a link to /dev/zero
    ended in a traceback (or read without end); a CRC-valid docket with
    a non-UTF-8 uid too; ``bug ١١١`` matched bug 111."""
    cache = repo / ".hg" / "cache"
    docket_path = cache / "commitindex"
    expected = check_index(hg, repo)
    keys = sorted(expected)
    docket = commitindex.read_docket(os.fspath(cache), "commitindex")
    damaged = commitindex.Docket((b"\xff\xfe" * 8, docket.table[1]),
                                 docket.tail, docket.nodes,
                                 docket.node_width, docket.rules,
                                 docket.covers)
    for how in ("uid", "/dev/zero", "directory"):
        docket_path.unlink()
        if how == "uid":
            docket_path.write_bytes(damaged.pack())
        elif how == "directory":
            docket_path.mkdir()
        else:
            docket_path.symlink_to(how)
        proc = campaign.run_bounded(
            [hg.binary, "commitid-lookup", "--hidden", *keys, "-T",
             "{key} {node}\\n"], env=hg.env, cwd=repo, timeout=60)
        assert (proc.returncode, proc.stderr) == (0, ""), how
        found = {}
        for line in proc.stdout.splitlines():
            key, _, node = line.rpartition(" ")
            found.setdefault(key, set()).add(node)
        assert found == expected, how
        proc = hg.proc("debugupdatecaches", cwd=repo)
        assert "Traceback" not in proc.stderr
        if how == "directory":
            assert "cannot write the index" in proc.stderr
            docket_path.rmdir()
            hg("debugupdatecaches", cwd=repo)
        assert not docket_path.is_symlink()
        check_index(hg, repo, verify=True)
    for typed in ("bug \u0661\u0661\u0661", "bug:\u0661\u0660\u0661"):
        proc = hg.proc("commitid-lookup", typed, cwd=repo)
        assert is_clean_abort(proc) and "not a bug number" in proc.stderr


def test_a_trickling_server_is_given_up_at_the_remote_deadline(
        hg, repo, hgserve, tmp_path):
    """Issue 27: ``--remote`` was bounded per read only (``http.timeout``,
    unset by default), so a server that trickles its answer a byte at a
    time held the lookup for as long as it trickled.  The deadline cuts
    the exchange, with one abort line that names the setting; the same
    lookup through a healthy server then answers."""
    server = hgserve(repo)
    [first] = nodes(hg, repo, "0")
    with FlakyProxy(server.url) as proxy:
        proxy.add(Fault("cmd=commitidlookup", cut=0, trickle=0.5,
                        times=None))
        # a bound for the test only: without the deadline the lookup ran
        # as long as the server trickled
        proc = subprocess.run(
            [hg.binary, "commitid-lookup", "--config",
             "commitid.remote-deadline=2", "--remote", proxy.url, "D1"],
            env=hg.env, cwd=tmp_path, capture_output=True, text=True,
            timeout=60)
    assert is_clean_abort(proc), proc.stderr
    assert "did not answer the lookup within 2 seconds" in proc.stderr
    assert "commitid.remote-deadline" in proc.stderr
    answer = hg("commitid-lookup", "--remote", server.url, "D1", "-T", "json",
                cwd=tmp_path)
    assert first in answer
    bad = hg.proc("commitid-lookup", "--config", "commitid.remote-deadline=0",
                  "--remote", server.url, "D1", cwd=tmp_path)
    assert is_clean_abort(bad) and "remote-deadline" in bad.stderr
