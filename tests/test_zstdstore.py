"""zstdstore: revlog compression with trained dictionaries, end to end
with the real hg on the real-content repository."""

import json
import os
import re
import threading
import time
import urllib.request

import pytest
from mercurial import bundle2, hg as hgmod, store, ui as uimod, util
from mercurial.utils import urlutil

import campaign
import zstdwire
from hgext3rd.zstdstore import maintenance
from vcsperf.harness import measure

ENABLE = "[extensions]\nzstdstore =\n"


def revlog_bytes(repo):
    sizes = measure.store_bytes(str(repo))
    return sizes["total"] - sizes["dictionaries"]


def stats(hg, repo):
    return {row["kind"]: row for row in
            json.loads(hg("zstd-stats", "-T", "json", cwd=repo))}


@pytest.fixture
def dict_repo(hg, hgrc, real_hg_repo):
    """The real-content repository converted to zstd-dict, with
    dictionaries trained and every chunk recompressed."""
    hgrc.write_text(ENABLE)
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=real_hg_repo)
    hg("zstd-train", cwd=real_hg_repo)
    hg("zstd-recompress", cwd=real_hg_repo)
    return real_hg_repo


@pytest.fixture
def trained_repo(hg, hgrc, real_hg_repo):
    """The real-content repository converted to zstd-dict, with small
    dictionaries trained quickly; its chunks are not recompressed."""
    hgrc.write_text(ENABLE)
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=real_hg_repo)
    hg("zstd-train", "--dict-size", 16384, "--sample-budget", 1000000,
       cwd=real_hg_repo)
    return real_hg_repo


def is_clean_abort(proc):
    """A clean abort (see campaign.py) whose last line is its hint."""
    return campaign.is_clean_abort(proc) and \
        proc.stderr.splitlines()[-1].startswith("(")


@pytest.mark.slow
def test_story_on_real_history(hg, hgrc, real_hg_repo):
    before_log = hg("log", "-T", "{node} {desc}\n", cwd=real_hg_repo)
    before_bytes = revlog_bytes(real_hg_repo)
    hgrc.write_text(ENABLE)
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=real_hg_repo)
    requires = (real_hg_repo / ".hg" / "store" / "requires").read_text()
    assert "exp-compression-zstd-dict" in requires.split()

    trained = hg("zstd-train", cwd=real_hg_repo)
    for kind in ("changelog", "manifest", "filelog"):
        assert "%s: dictionary " % kind in trained
    out = hg("zstd-recompress", cwd=real_hg_repo)
    assert out.startswith("recompressed ")

    after_bytes = revlog_bytes(real_hg_repo)
    assert after_bytes < 0.95 * before_bytes
    figures = stats(hg, real_hg_repo)
    active = figures["changelog"]["active"]
    assert figures["changelog"]["encodings"] == {
        "dictionary %d" % active: 57}
    filelog = figures["filelog"]
    dict_share = filelog["encodings"]["dictionary %d" % filelog["active"]]
    assert dict_share > 0.5 * filelog["revisions"]
    # Every revision still hashes to its node.
    hg("verify", "-q", cwd=real_hg_repo)
    assert hg("log", "-T", "{node} {desc}\n", cwd=real_hg_repo) == before_log
    # Nothing left to do the second time.
    assert hg("zstd-recompress", cwd=real_hg_repo).startswith(
        "recompressed 0 of ")


@pytest.mark.slow
def test_one_pass_conversion(hg, hgrc, real_hg_repo):
    """Dictionaries trained on a core zstd store; one upgrade then writes
    every chunk with them, and every revision still hashes to its node."""
    before = hg("log", "-T", "{node} {desc}\n", cwd=real_hg_repo)
    hgrc.write_text(ENABLE)
    trained = hg("zstd-train", "--dict-size", 16384, "--sample-budget",
                 1000000, cwd=real_hg_repo)
    assert "changelog: dictionary " in trained
    requires = real_hg_repo / ".hg" / "store" / "requires"
    assert "zstd-dict" not in requires.read_text()
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=real_hg_repo)
    assert "exp-compression-zstd-dict" in requires.read_text().split()
    figures = stats(hg, real_hg_repo)
    active = figures["changelog"]["active"]
    assert figures["changelog"]["encodings"] == {
        "dictionary %d" % active: 57}
    hg("verify", "-q", cwd=real_hg_repo)
    assert hg("log", "-T", "{node} {desc}\n", cwd=real_hg_repo) == before
    assert hg("zstd-recompress", cwd=real_hg_repo).startswith(
        "recompressed 0 of ")


@pytest.mark.parametrize("engine", ["zlib", "zstd"])
def test_conversion_in_place(hg, hgrc, tmp_path, engine):
    """The module help's conversion for stores too big for core's upgrade,
    as documented: ``hg zstd-train``, then ``hg zstd-recompress
    --convert`` names the engine in the requirements and rewrites every
    chunk in place; the history reads the same, a stock Mercurial refuses
    the repository, and nothing is left to do the second time."""
    hgrc.write_text(ENABLE)
    repo = tmp_path / "repo"
    hg("init", "--config", "format.revlog-compression=%s" % engine, repo)
    hg("debugbuilddag", "--mergeable-file", "--new-file", "+40", cwd=repo)
    before = hg("log", "-p", "-T", "{node} {desc}\n", cwd=repo)
    requires = repo / ".hg" / "store" / "requires"
    refused = hg.proc("zstd-recompress", "--convert", cwd=repo)
    assert is_clean_abort(refused)
    assert "abort: no dictionaries to convert with" in refused.stderr
    hg("zstd-train", cwd=repo)
    out = hg("zstd-recompress", "--convert", cwd=repo)
    assert out.startswith("the repository now uses the zstd-dict engine\n"
                          "recompressed "), out
    names = requires.read_text().split()
    assert "exp-compression-zstd-dict" in names
    assert not [name for name in names if "compression-zstd" in name
                and name != "exp-compression-zstd-dict"]
    figures = stats(hg, repo)
    for kind in ("changelog", "manifest"):
        active = figures[kind]["active"]
        assert figures[kind]["encodings"] == {"dictionary %d" % active: 40}
    hg("verify", "-q", cwd=repo)
    assert hg("log", "-p", "-T", "{node} {desc}\n", cwd=repo) == before
    stock = hg.proc("log", "-l", "1", "--config", "extensions.zstdstore=!",
                    cwd=repo)
    assert "requires features unknown" in stock.stderr
    assert hg("zstd-recompress", "--convert", cwd=repo) == \
        "recompressed 0 of 43 revlogs\n"
    # new commits use the engine too
    hg("update", "-q", "tip", cwd=repo)
    (repo / "mf").write_text("changed\n" * 50)
    hg("commit", "-q", "-m", "after", cwd=repo)
    assert stats(hg, repo)["changelog"]["encodings"] == {
        "dictionary %d" % figures["changelog"]["active"]: 41}


def test_recompress_resumes_from_its_log_and_ignores_what_it_did_not_write(
        hg, small_dict_repo):
    """A run's log names the revlogs it rewrote, one a line with its index
    file's size and time: the next run skips them.  A line cut short
    mid-line, a name without them or with those of a file changed since
    (outside tester: a planted log made a conversion skip every revlog),
    a log of other dictionaries, or a FIFO or a link planted in its place
    are not followed."""
    repo = small_dict_repo
    hg("zstd-train", cwd=repo)
    store = repo / ".hg" / "store"
    state = store / "zstd-recompress.state"

    def header():
        return json.dumps({"active": json.loads(
            (store / "zstd-dicts" / "active").read_text())}) + "\n"

    def line(name):
        st = os.stat(store / name)
        return "%s\0%d:%d\n" % (name, st.st_size, st.st_mtime_ns)

    state.write_text(header() + line("00changelog.i") + line("00manifest.i")
                     + line("data/mf.i")[:-3])
    out = hg("zstd-recompress", cwd=repo)
    # the changelog and the manifest are skipped, not the cut line's file
    assert out == "recompressed 1 of 43 revlogs\n", out
    assert not state.exists()
    hg("zstd-train", cwd=repo)  # other dictionaries: three to rewrite
    stamped = line("00changelog.i")
    hg("update", "-q", "tip", cwd=repo)
    (repo / "mf").write_text("changed\n" * 20)
    hg("commit", "-q", "-m", "after the log", cwd=repo)
    state.write_text(header() + stamped + "00manifest.i\n"
                     + "data/mf.i\0forged\n")
    out = hg("zstd-recompress", cwd=repo)
    assert out == "recompressed 3 of 43 revlogs\n", out
    hg("verify", "-q", cwd=repo)
    for planted in ("fifo", "link"):
        hg("zstd-train", cwd=repo)
        if planted == "fifo":
            os.mkfifo(state)
        else:
            (repo / "elsewhere").write_text(header() + line("00changelog.i"))
            state.symlink_to(repo / "elsewhere")
        out = hg("zstd-recompress", cwd=repo)
        assert out == "recompressed 3 of 43 revlogs\n", (planted, out)
        assert not state.exists() and not state.is_symlink()
    assert "00changelog.i" in (repo / "elsewhere").read_text()
    hg("verify", "-q", cwd=repo)


def test_conversion_from_a_share_without_share_safe_is_refused(
        hg, hgrc, tmp_path):
    """Outside tester: from a share that keeps its own requirements (no
    share-safe), the conversion named the engine in the share's list only,
    and the source, converted behind its back, failed on its own chunks in
    a stock Mercurial ("unknown compression type").  Refused, as core's
    upgrade refuses such a share, pointing at the source."""
    hgrc.write_text(ENABLE)
    source = tmp_path / "source"
    hg("init", "--config", "format.use-share-safe=no", "--config",
       "format.revlog-compression=zstd", source)
    hg("debugbuilddag", "--mergeable-file", "--new-file", "+40", cwd=source)
    hg("share", "-q", "-U", "--config", "extensions.share=", source,
       tmp_path / "share")
    hg("zstd-train", cwd=source)
    requires = [source / ".hg" / "requires",
                tmp_path / "share" / ".hg" / "requires"]
    before = [path.read_text() for path in requires]
    proc = hg.proc("zstd-recompress", "--convert", cwd=tmp_path / "share")
    assert is_clean_abort(proc), proc.stderr
    assert "abort: this share keeps its own list of requirements" \
        in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "(run the command in the source repository, %s)" % source)
    assert [path.read_text() for path in requires] == before
    hg("verify", "-q", "--config", "extensions.zstdstore=!", cwd=source)


def test_new_repository_with_the_engine(hg, hgrc, tmp_path):
    hgrc.write_text(ENABLE)
    repo = tmp_path / "new"
    hg("init", "--config", "format.revlog-compression=zstd-dict", repo)
    assert "exp-compression-zstd-dict" in \
        (repo / ".hg" / "store" / "requires").read_text()
    for i in range(3):
        (repo / "file.txt").write_text("line %d\n" % i * 40)
        hg("commit", "-A", "-m", "commit %d" % i, cwd=repo)
    # Too little history to train: it says so and keeps plain zstd.
    proc = hg.proc("zstd-train", cwd=repo)
    assert proc.returncode == 0
    assert "no new dictionary" in proc.stderr
    hg("verify", "-q", cwd=repo)



@pytest.mark.parametrize("maxchainlen, longest", [(None, 500), (1000, 599)])
def test_delta_chains_stop_at_500_deltas_unless_configured(
        hg, hgrc, tmp_path, maxchainlen, longest):
    """Dictionaries shrink deltas so much that core's bound by bytes lets
    chains grow long, so zstdstore bounds them by length, unless
    ``format.maxchainlen`` is set."""
    hgrc.write_text(ENABLE + ("[format]\nmaxchainlen = %d\n" % maxchainlen
                              if maxchainlen else ""))
    repo = tmp_path / "repo"
    hg("init", "--config", "format.revlog-compression=zstd-dict", repo)
    # 600 revisions of one file, each a one-line change.
    hg("debugbuilddag", "--mergeable-file", "+600", cwd=repo)
    # debugdeltachain counts the chain's base too.
    deltas = [int(n) - 1 for n in hg("debugdeltachain", "mf", "-T",
                                     "{chainlen}\n", cwd=repo).split()]
    assert len(deltas) == 600
    assert max(deltas) == longest
    hg("verify", "-q", cwd=repo)

@pytest.mark.slow
def test_stock_mercurial_refuses_cleanly(hg, hgrc, dict_repo):
    hgrc.write_text("")
    proc = hg.proc("log", "-l", "1", cwd=dict_repo)
    assert proc.returncode == 255
    assert "repository requires features unknown to this Mercurial: " \
        "exp-compression-zstd-dict" in proc.stderr


@pytest.mark.slow
def test_dictionaries_travel(hg, hgrc, dict_repo, hgserve, tmp_path):
    dicts = sorted(os.listdir(dict_repo / ".hg" / "store" / "zstd-dicts"))
    assert "active" in dicts and len(dicts) == 4
    tip = hg("log", "-r", "tip", "-T", "{node}", cwd=dict_repo)

    def check(dest):
        assert sorted(os.listdir(dest / ".hg" / "store" / "zstd-dicts")) \
            == dicts
        hg("verify", "-q", cwd=dest)
        assert hg("log", "-r", "tip", "-T", "{node}", cwd=dest) == tip

    hg("clone", "-q", "-U", dict_repo, tmp_path / "local")
    check(tmp_path / "local")

    server = hgserve(dict_repo)
    hg("clone", "-q", "-U", "--stream", server.url, tmp_path / "stream")
    check(tmp_path / "stream")

    bundle = tmp_path / "stream.hg"
    hg("bundle", "-q", "-a", "-t", "none-v2;stream=v2", bundle,
       cwd=dict_repo)
    hg("init", tmp_path / "from-bundle")
    hg("unbundle", "-q", bundle, cwd=tmp_path / "from-bundle")
    check(tmp_path / "from-bundle")

    hg("share", "-q", "-U", "--config", "extensions.share=", dict_repo,
       tmp_path / "share")
    hg("verify", "-q", cwd=tmp_path / "share")

    # A stock Mercurial pulls over the wire; it recompresses with zstd.
    hgrc.write_text("")
    hg("clone", "-q", "-U", server.url, tmp_path / "stock")
    hg("verify", "-q", cwd=tmp_path / "stock")
    assert "zstd-dict" not in \
        (tmp_path / "stock" / ".hg" / "store" / "requires").read_text()


@pytest.mark.slow
def test_upgrade_back_to_core_zstd(hg, hgrc, dict_repo):
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd", cwd=dict_repo)
    requires = (dict_repo / ".hg" / "store" / "requires").read_text().split()
    assert "exp-compression-zstd-dict" not in requires
    assert "revlog-compression-zstd" in requires
    hgrc.write_text("")
    hg("verify", "-q", cwd=dict_repo)


@pytest.mark.slow
def test_retrain_gives_new_ids_and_old_chunks_keep_theirs(hg, dict_repo):
    first = stats(hg, dict_repo)["changelog"]["active"]
    hg("update", "-q", "tip", cwd=dict_repo)
    for i in range(30):
        (dict_repo / "NEWS.txt").write_text("drifted content %d\n" % i * 50)
        hg("commit", "-A", "-q", "-m",
           "a new style of commit message %d: %s" % (i, "x" * i),
           cwd=dict_repo)
    hg("zstd-train", cwd=dict_repo)
    figures = stats(hg, dict_repo)["changelog"]
    assert figures["active"] != first
    # Old chunks keep the first dictionary; nothing was rewritten.
    assert figures["encodings"]["dictionary %d" % first] == 57 + 30
    files = os.listdir(dict_repo / ".hg" / "store" / "zstd-dicts")
    assert str(first) in files and str(figures["active"]) in files
    hg("commit", "-q", "-m", "after retraining", "--config",
       "ui.allowemptycommit=yes", cwd=dict_repo)
    figures = stats(hg, dict_repo)["changelog"]
    assert figures["encodings"]["dictionary %d" % figures["active"]] == 1
    hg("verify", "-q", cwd=dict_repo)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_unusable_dictionary_aborts_naming_the_file(hg, dict_repo, tmp_path,
                                                    damage):
    active = stats(hg, dict_repo)["changelog"]["active"]
    path = dict_repo / ".hg" / "store" / "zstd-dicts" / str(active)
    backup = path.read_bytes()
    if damage == "missing":
        path.unlink()
    else:
        data = bytearray(backup)
        data[-10] ^= 0xFF
        path.write_bytes(bytes(data))
    proc = hg.proc("log", "-T", "{desc}\n", cwd=dict_repo)
    assert proc.returncode == 255
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("abort: zstd dictionary %d unusable: " % active)
    assert str(path) in lines[0]
    assert "missing" in lines[0] if damage == "missing" else \
        "checksum mismatch" in lines[0]
    assert lines[1] == ("(copy %s from another clone of this repository, "
                        "restore it from a backup, or clone the repository "
                        "again)" % path)
    path.write_bytes(backup)
    hg("verify", "-q", cwd=dict_repo)


@pytest.mark.slow
def test_verify_reports_each_revision_a_missing_dictionary_hides(
        hg, dict_repo):
    """A missing dictionary is a storage error: ``hg verify`` goes on past
    the first revision it cannot read, names every one, and exits 1."""
    filelogs = stats(hg, dict_repo)["filelog"]
    active = filelogs["active"]
    stored_with_it = filelogs["encodings"]["dictionary %d" % active]
    path = dict_repo / ".hg" / "store" / "zstd-dicts" / str(active)
    backup = path.read_bytes()
    path.unlink()
    verify = hg.proc("verify", "-q", cwd=dict_repo)
    assert verify.returncode == 1, verify.stderr
    output = verify.stdout + verify.stderr
    assert "Traceback" not in output
    assert not any(line.startswith("abort:") for line in output.splitlines())
    damaged = set(re.findall(
        r"^ (.+@\d+): unpacking [0-9a-f]{12}: zstd dictionary %d unusable: "
        r".*is missing$" % active, output, re.MULTILINE))
    # Every revision stored with the dictionary, and those whose delta
    # chains go through one.
    assert len(damaged) >= stored_with_it > 1, output[-2000:]
    assert "integrity errors encountered!" in output
    # A command reading one of them stops with one ``abort:`` line, its
    # hint, and Mercurial's exit code for storage errors.
    name, rev = sorted(damaged)[0].rsplit("@", 1)
    read = hg.proc("--config", "ui.detailed-exit-code=yes", "debugdata",
                   name, rev, cwd=dict_repo)
    assert read.returncode == 50, read.stderr
    lines = read.stderr.splitlines()
    assert len(lines) == 2, read.stderr
    assert lines[0].startswith("abort: zstd dictionary %d unusable: " % active)
    assert lines[1].startswith("(copy %s from another clone" % path)
    path.write_bytes(backup)
    hg("verify", "-q", cwd=dict_repo)


@pytest.mark.slow
def test_corrupt_chunk_is_reported_never_returned(hg, dict_repo):
    data = dict_repo / ".hg" / "store" / "data"
    biggest = max(data.rglob("*.i"), key=lambda p: p.stat().st_size)
    tracked = store.decodefilename(
        str(biggest.relative_to(data))[:-2].encode()).decode()
    raw = bytearray(biggest.read_bytes())
    raw[-20] ^= 0x5A
    biggest.write_bytes(bytes(raw))
    verify = hg.proc("verify", "-q", cwd=dict_repo)
    assert verify.returncode == 1
    assert "corrupt zstd frame" in verify.stderr
    damaged = re.search(r"%s@(\d+):" % re.escape(tracked), verify.stderr)
    assert damaged, verify.stderr
    cat = hg.proc("cat", "-r", damaged.group(1), tracked, cwd=dict_repo)
    assert cat.returncode == 255 and cat.stdout == ""
    assert "corrupt zstd frame" in cat.stderr


# Files of the real history whose revlogs are split (index and data
# file): the ones whose readers a replacement can strand.
SPLIT_FILES = ["pip/_vendor/pyparsing.py", "pip/_vendor/idna/uts46data.py",
               "pip/_vendor/certifi/cacert.pem",
               "pip/_vendor/pkg_resources/__init__.py"]


@pytest.mark.slow
def test_readers_during_recompress_read_what_they_read_before(
        hg, hgrc, real_hg_repo, hgserve, tmp_path):
    """Local ``hg log -p`` and an ``hg serve`` answering diffs, clones and
    pulls, in a loop while ``hg zstd-recompress`` rewrites every revlog
    again and again: no read fails, and each returns what it returned
    before."""
    hgrc.write_text(ENABLE)
    repo = real_hg_repo
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=repo)
    active_file = repo / ".hg" / "store" / "zstd-dicts" / "active"
    # Two sets of dictionaries; each round of recompression switches to
    # the other one, so it rewrites every chunk.
    actives = []
    for size in (16384, 8192):
        hg("zstd-train", "--dict-size", size, "--sample-budget", 1000000,
           cwd=repo)
        actives.append(active_file.read_bytes())
    split = [path for path in SPLIT_FILES if (
        repo / ".hg" / "store" / "data" / store.encodefilename(
            path.encode()).decode()).with_suffix(".py.d" if path.endswith(
                ".py") else ".pem.d").exists()]
    assert split == SPLIT_FILES
    includes = [arg for path in SPLIT_FILES for arg in ("-I", path)]
    # A small chunk cache makes the reader go back to the files often, as
    # on a history far longer than this one, where a read spans many
    # times the cache.
    log_p = ["log", "-p", "-r", "all()", *includes,
             "--config", "format.chunkcachesize=1024"]
    nodes = hg("log", "-T", "{node}\n", cwd=repo)
    expected_log = hg.proc(*log_p, cwd=repo).stdout
    base = tmp_path / "base"
    hg("clone", "-q", "-U", "-r", "20", repo, base)
    server = hgserve(repo)
    diff_nodes = nodes.split()[-3:]
    expected_diffs = {node: urllib.request.urlopen(
        server.url + "raw-rev/" + node, timeout=120).read()
        for node in diff_nodes}
    assert all(len(diff) > 10000 for diff in expected_diffs.values())

    def local_log(n):
        proc = hg.proc(*log_p, cwd=repo)
        return proc.returncode == 0 and proc.stdout == expected_log, \
            proc.stderr[-300:]

    def http_diff(n):
        node = diff_nodes[n % len(diff_nodes)]
        try:
            got = urllib.request.urlopen(server.url + "raw-rev/" + node,
                                         timeout=120).read()
        except OSError as err:
            return False, repr(err)
        return got == expected_diffs[node], "raw-rev %s differs" % node

    def http_clone(n):
        dest = tmp_path / ("clone-%d" % n)
        proc = hg.proc("clone", "-q", "-U", server.url, dest)
        return proc.returncode == 0 and hg(
            "log", "-T", "{node}\n", cwd=dest) == nodes, proc.stderr[-300:]

    def http_pull(n):
        dest = tmp_path / ("pull-%d" % n)
        hg("clone", "-q", "-U", base, dest)
        proc = hg.proc("pull", "-q", server.url, cwd=dest)
        return proc.returncode == 0 and hg(
            "log", "-T", "{node}\n", cwd=dest) == nodes, proc.stderr[-300:]

    readers = [local_log, http_diff, http_clone, http_pull]
    reads = {reader.__name__: [] for reader in readers}
    stop = threading.Event()

    def loop(reader):
        n = 0
        while not stop.is_set():
            start = time.monotonic()
            ok, detail = reader(n)
            reads[reader.__name__].append(
                (start, time.monotonic(), ok, detail))
            n += 1

    windows = []

    def during(read):
        return any(read[0] < end and read[1] > start
                   for start, end in windows)

    def enough(reads):
        overlapping = {name: sum(map(during, done))
                       for name, done in reads.items()}
        return overlapping["local_log"] >= 4 and all(overlapping.values())

    threads = [threading.Thread(target=loop, args=(reader,))
               for reader in readers]
    for thread in threads:
        thread.start()
    try:
        for round_ in range(12):
            active_file.write_bytes(actives[round_ % 2])
            start = time.monotonic()
            out = hg("zstd-recompress", cwd=repo)
            windows.append((start, time.monotonic()))
            assert not out.startswith("recompressed 0 ")
            if enough(reads):
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    overlapping = {name: sum(map(during, done))
                   for name, done in reads.items()}
    print("reads during recompression:", overlapping, "in",
          len(windows), "rounds")
    failed = [(name, read[3]) for name, done in reads.items()
              for read in done if not read[2]]
    assert failed == []
    assert enough(reads), overlapping
    # Clients check each revision's hash as they add it; the last clone
    # and pull once more as a whole.
    for kind in ("clone", "pull"):
        hg("verify", "-q", cwd=tmp_path / (
            "%s-%d" % (kind, len(reads["http_" + kind]) - 1)))
    hg("verify", "-q", cwd=repo)


def damaged_actives(dicts):
    """Contents of ``active`` that are not one, by what is wrong."""
    active = json.loads((dicts / "active").read_text())
    return {
        "garbage": b"\x8f\x00\xffgarbage",
        "truncated": (dicts / "active").read_bytes()[:15],
        "empty": b"",
        "a list": b"[1, 2]",
        "a string ID": b'{"changelog": "%d"}' % active["changelog"],
        "a boolean ID": b'{"changelog": true}',
        "a negative ID": b'{"changelog": -5}',
        "an ID over 32 bits": b'{"changelog": 99999999999999999999}',
        "an unknown class": b'{"tags": 12}',
        "a non-ASCII class": b'{"chang\\u00e9log": 12}',
        "deep nesting": b'{"changelog": ' + b"[" * 1500 + b"]" * 1500 + b"}",
        "oversized": b" " * 5000 + b"{}",
        "a missing dictionary": b'{"changelog": 12345}',
        "another class's dictionary": b'{"changelog": %d}' % active["filelog"],
    }


PATCH = """\
diff --git a/NEWFILE.txt b/NEWFILE.txt
new file mode 100644
--- /dev/null
+++ b/NEWFILE.txt
@@ -0,0 +1,1 @@
+%s
"""


@pytest.mark.slow
def test_damaged_active_file_aborts_writes_cleanly(hg, trained_repo,
                                                   tmp_path):
    """Every way ``active`` can be damaged: a command that writes
    revisions stops with one ``abort:`` line naming the file and a hint;
    ``hg zstd-train`` (the hint) writes a good one again."""
    repo = trained_repo
    dicts = repo / ".hg" / "store" / "zstd-dicts"
    good = (dicts / "active").read_bytes()
    patch = tmp_path / "new.patch"
    patch.write_text(PATCH % "a new file")
    commit = ("import", "--bypass", "-m", "new file", patch)
    damaged = damaged_actives(dicts)
    for damage, data in damaged.items():
        (dicts / "active").write_bytes(data)
        proc = hg.proc(*commit, cwd=repo)
        assert is_clean_abort(proc), (damage, proc.stderr)
        # After "transaction abort!" and "rollback completed".
        lines = proc.stderr.splitlines()[-2:]
        if damage == "a missing dictionary":
            assert str(dicts / "12345") in lines[0], lines
        else:
            assert str(dicts / "active") in lines[0] and " is damaged: " in \
                lines[0], (damage, lines)
            assert lines[1] == (
                "(copy it from another clone of this repository, or run hg "
                "zstd-train to write a new one)")
    # Nothing was written meanwhile.
    hg("verify", "-q", cwd=repo)
    assert hg("log", "-r", "tip", "-T", "{desc}", cwd=repo) != "new file"
    (dicts / "active").write_bytes(damaged["garbage"])
    proc = hg.proc("zstd-train", "--dict-size", 8192, "--sample-budget",
                   1000000, cwd=repo)
    assert proc.returncode == 0
    assert "warning: %s is damaged" % (dicts / "active") in proc.stderr
    assert (dicts / "active").read_bytes() != good
    hg(*commit, cwd=repo)
    assert hg("log", "-r", "tip", "-T", "{desc}", cwd=repo) == "new file"
    hg("verify", "-q", cwd=repo)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "another class's dictionary",
                                    "dictionary"])
def test_stream_clone_refuses_damaged_dictionaries(hg, trained_repo, hgserve,
                                                   tmp_path, damage):
    """What a stream clone receives is checked before it is used: a
    damaged ``active`` or dictionary of the source stops the clone with
    one ``abort:`` line, and leaves no clone whose commits would fail."""
    repo = trained_repo
    dicts = repo / ".hg" / "store" / "zstd-dicts"
    if damage == "dictionary":
        active = json.loads((dicts / "active").read_text())
        path = dicts / str(active["manifest"])
        data = bytearray(path.read_bytes())
        data[-7] ^= 0x10
        path.write_bytes(bytes(data))
        expected = "abort: zstd dictionary %d of the source is unusable: " \
            % active["manifest"]
    else:
        (dicts / "active").write_bytes(damaged_actives(dicts)[damage])
        expected = "abort: zstd-dicts/active of the source is damaged: "
    server = hgserve(repo)
    for source, args in ((server.url, ["--stream"]), (repo, [])):
        dest = tmp_path / "clone"
        proc = hg.proc("clone", "-q", "-U", *args, source, dest)
        assert is_clean_abort(proc), proc.stderr
        assert proc.stderr.startswith(expected), proc.stderr
        assert "a clone without --stream does not need it" in proc.stderr
        assert not dest.exists()


# Kills hg right after the first rename onto 00changelog.i: the moment
# hg zstd-recompress has made the changelog inline, before its new data
# file and split index.
KILL_AFTER_INLINE_CHANGELOG = """
import os
from mercurial import extensions, util

def close(orig, self):
    orig(self)
    if self._atomictempfile__name.endswith(b'00changelog.i'):
        os._exit(137)

def extsetup(ui):
    extensions.wrapfunction(util.atomictempfile, 'close', close)
"""


def inline_with_data_file(store):
    """Revlogs whose index says inline while a data file sits beside."""
    found = []
    for index in store.rglob("*.i"):
        flags = int.from_bytes(index.read_bytes()[:4], "big") >> 16
        if flags & 1 and index.with_suffix(".d").exists():
            found.append(index.name)
    return found


@pytest.mark.slow
def test_recompress_killed_with_the_changelog_inline_recovers(
        hg, trained_repo, tmp_path):
    repo = trained_repo
    store_dir = repo / ".hg" / "store"
    killer = tmp_path / "killer.py"
    killer.write_text(KILL_AFTER_INLINE_CHANGELOG)
    proc = hg.proc("zstd-recompress", "--config",
                   "extensions.killer=%s" % killer, cwd=repo)
    assert proc.returncode == 137, proc.stderr
    assert inline_with_data_file(store_dir) == ["00changelog.i"]
    hg("verify", "-q", cwd=repo)
    hg("zstd-recompress", cwd=repo)
    assert inline_with_data_file(store_dir) == []
    assert (store_dir / "00changelog.d").exists()
    hg("verify", "-q", cwd=repo)


def stream_bundle(path, files):
    """Write a stream clone bundle of ``files`` ((name, data) pairs, names
    as a hostile server chooses them) for a zstd-dict repository."""
    bundler = bundle2.bundle20(uimod.ui.load())
    part = bundler.newpart(b"stream2", data=b"".join(
        b"s" + util.uvarintencode(len(name)) + util.uvarintencode(len(data))
        + name + data for name, data in files))
    part.addparam(b"bytecount", b"%d" % sum(len(d) for _, d in files),
                  mandatory=True)
    part.addparam(b"filecount", b"%d" % len(files), mandatory=True)
    part.addparam(b"requirements", urlutil.urlreq.quote(
        b"dotencode,fncache,generaldelta,revlogv1,sparserevlog,store,"
        b"exp-compression-zstd-dict"), mandatory=True)
    with open(path, "wb") as fh:
        for chunk in bundler.getchunks():
            fh.write(chunk)


@pytest.mark.slow
def test_dictionary_names_from_a_peer_stay_in_the_store(hg, hgrc, tmp_path):
    """Dictionary file names a hostile server sends in a stream clone:
    none writes outside ``.hg/store``."""
    hgrc.write_text(ENABLE)
    marker = b"[hooks]\npre-commit = echo planted\n"
    names = [b"zstd-dicts/../../hgrc", b"zstd-dicts/../../../victim",
             b"zstd-dicts/" + b"../" * 12 + b"victim",
             os.fsencode(tmp_path / "victim-absolute"),
             b"zstd-dicts/.hg/hgrc", b"zstd-dicts/..",
             b"zstd-dicts/active/../../../victim", b"zstd-dicts/~2e~2e/x"]
    for n, name in enumerate(names):
        bundle = tmp_path / ("crafted-%d.hg" % n)
        stream_bundle(bundle, [(name, marker)])
        repo = tmp_path / ("repo-%d" % n)
        hg("init", repo)
        proc = hg.proc("unbundle", bundle, cwd=repo)
        assert proc.returncode == 0 or campaign.is_clean_abort(proc), \
            (name, proc.stderr)
        planted = [path.relative_to(tmp_path).parts
                   for path in tmp_path.rglob("*")
                   if path.is_file() and path.read_bytes() == marker]
        assert all(parts[0].startswith("repo-")
                   and parts[1:3] == (".hg", "store")
                   for parts in planted), (name, planted)
        assert "planted" not in hg.proc("commit", "-A", "-m", "x",
                                        cwd=repo).stdout


@pytest.fixture
def small_dict_repo(hg, hgrc, tmp_path):
    """A zstd-dict repository of 40 changesets, made in one command."""
    hgrc.write_text(ENABLE)
    repo = tmp_path / "small"
    hg("init", "--config", "format.revlog-compression=zstd-dict", repo)
    hg("debugbuilddag", "--mergeable-file", "--new-file", "+40", cwd=repo)
    return repo


def dictionary_ids(repo):
    return sorted(name for name in
                  os.listdir(repo / ".hg" / "store" / "zstd-dicts")
                  if name.isdigit())


def test_retraining_at_another_level_budget_or_size_adds_dictionaries(
        hg, small_dict_repo):
    # zstd's own dict ID hashes the dictionary's content, which these
    # retrains repeat with other bytes: the store names them itself.
    runs = [(), ("--config", "zstdstore.level=12"), ("--sample-budget", 3000),
            ("--dict-size", 1024), ("--config", "zstdstore.level=1"), ()]
    seen = []
    for run in runs:
        hg("zstd-train", *run, cwd=small_dict_repo)
        active = {row["kind"]: row["active"] for row in
                  json.loads(hg("zstd-stats", "-T", "json",
                                cwd=small_dict_repo))}
        assert None not in active.values()
        assert not set(active.values()) & set(seen), (run, active, seen)
        seen.extend(active.values())
        hg("update", "-q", "tip", cwd=small_dict_repo)
        (small_dict_repo / "mf").write_text("after %r\n" % (run,) * 20)
        hg("commit", "-q", "-m", "after %r" % (run,), cwd=small_dict_repo)
    assert dictionary_ids(small_dict_repo) == sorted(map(str, seen))
    hg("verify", "-q", cwd=small_dict_repo)
    hg("zstd-recompress", cwd=small_dict_repo)
    hg("verify", "-q", cwd=small_dict_repo)


@pytest.mark.parametrize("args, message", [
    (("zstd-train", "--dict-size", "10"),
     "--dict-size must be from 256 to 16777216 bytes"),
    (("zstd-train", "--dict-size", "-5"),
     "--dict-size must be from 256 to 16777216 bytes"),
    (("zstd-train", "--sample-budget", "-1"),
     "--sample-budget must be from 1024 to 1073741824 bytes"),
    (("zstd-train", "--config", "zstdstore.dict-size=-5"),
     "zstdstore.dict-size must be a size from 256 to 16m"),
    (("zstd-train", "--config", "zstdstore.dict-size=10"),
     "zstdstore.dict-size must be a size from 256 to 16m"),
    (("zstd-train", "--config", "zstdstore.sample-budget=lots"),
     "zstdstore.sample-budget must be a size from 1k to 1g"),
    (("zstd-train", "--config", "zstdstore.level=99"),
     "zstdstore.level must be a whole number from 1 to 22"),
    (("log", "--config", "zstdstore.level=abc"),
     "zstdstore.level must be a whole number from 1 to 22"),
    (("zstd-stats", "--config", "zstdstore.level=0"),
     "zstdstore.level must be a whole number from 1 to 22"),
])
def test_bad_settings_abort_naming_the_setting_and_change_nothing(
        hg, small_dict_repo, args, message):
    hg("zstd-train", cwd=small_dict_repo)
    before = dictionary_ids(small_dict_repo)
    active = (small_dict_repo / ".hg" / "store" / "zstd-dicts" /
              "active").read_bytes()
    proc = hg.proc(*args, cwd=small_dict_repo)
    assert is_clean_abort(proc), proc.stderr
    assert proc.stderr.startswith("abort: " + message), proc.stderr
    assert dictionary_ids(small_dict_repo) == before
    assert (small_dict_repo / ".hg" / "store" / "zstd-dicts" /
            "active").read_bytes() == active


def test_training_holds_only_the_newest_file_revisions(real_hg_repo_cached):
    """The filelog samples ``hg zstd-train`` takes are the newest file
    revisions by changeset, as a sort of every file's newest revisions
    gives them, though only enough to fill twice the budget are held (a
    list of all of them took hundreds of megabytes at 463,000 filelogs).
    Budgets small enough that most revisions are dropped, and one that
    keeps all of them; the repository is only read."""
    repo = hgmod.repository(uimod.ui.load(), os.fsencode(real_hg_repo_cached))
    unfi = repo.unfiltered()

    def filelogs():
        return (rl for _kind, rl in maintenance._StoreRevlogs(
            repo, (b"filelog",)))
    everything = []
    for rl in filelogs():
        for rev in range(len(rl) - 1, max(-1, len(rl) - 9), -1):
            everything.append((rl.linkrev(rev), rev, rl.target[1]))
    everything.sort(key=lambda item: item[0], reverse=True)
    assert len(everything) > 500

    def chunks(pairs):
        return (unfi.file(path)._revlog._inner._chunk(rev)
                for rev, path in pairs)
    total = sum(len(c) for c in chunks((r, p) for _l, r, p in everything))
    for budget in (2000, 60000, total * 4):
        held = maintenance._newest_file_revisions(filelogs(), budget,
                                                  lambda: None)
        wanted = zstdwire.select_recent(
            chunks((r, p) for _l, r, p in everything), budget)
        assert zstdwire.select_recent(chunks(held), budget) == wanted
        assert held == [(r, p) for _l, r, p in everything[:len(held)]]
        if budget < total:
            assert len(held) < len(everything) // 2, budget
