"""zstdstore: revlog compression with trained dictionaries, end to end
with the real hg on the real-content repository."""

import json
import os
import random
import re
import signal
import subprocess
import time

import pytest
from mercurial import store

from vcsperf import storebench

ENABLE = "[extensions]\nzstdstore =\n"


def revlog_bytes(repo):
    sizes = storebench.store_bytes(str(repo))
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


def test_stock_mercurial_refuses_cleanly(hg, hgrc, dict_repo):
    hgrc.write_text("")
    proc = hg.proc("log", "-l", "1", cwd=dict_repo)
    assert proc.returncode == 255
    assert "repository requires features unknown to this Mercurial: " \
        "exp-compression-zstd-dict" in proc.stderr


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


def test_upgrade_back_to_core_zstd(hg, hgrc, dict_repo):
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd", cwd=dict_repo)
    requires = (dict_repo / ".hg" / "store" / "requires").read_text().split()
    assert "exp-compression-zstd-dict" not in requires
    assert "revlog-compression-zstd" in requires
    hgrc.write_text("")
    hg("verify", "-q", cwd=dict_repo)


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
    assert lines[1] == ("(copy %s from another clone of this repository, or "
                        "restore it from a backup)" % path)
    path.write_bytes(backup)
    hg("verify", "-q", cwd=dict_repo)


def _kill_at(hg, repo, args, delay):
    proc = subprocess.Popen([hg.binary, *args], cwd=repo, env=hg.env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_killed_train_and_recompress_leave_a_valid_repo(hg, hgrc,
                                                        real_hg_repo):
    hgrc.write_text(ENABLE)
    repo = real_hg_repo
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=repo)
    schedule = random.Random(20261122)
    for attempt in range(24):
        command = ["zstd-train"] if attempt % 3 == 0 else ["zstd-recompress"]
        if attempt % 3 == 1:
            # A fresh dictionary gives recompress real work to do.
            hg("zstd-train", "--dict-size", str(schedule.choice(
                [8192, 16384, 32768, 65536])), cwd=repo)
        _kill_at(hg, repo, command, schedule.uniform(0.1, 1.2))
        verify = hg.proc("verify", "-q", cwd=repo)
        assert verify.returncode == 0, (attempt, verify.stderr)
        assert "error" not in verify.stderr
    hg("zstd-train", cwd=repo)
    hg("zstd-recompress", cwd=repo)
    hg("verify", "-q", cwd=repo)
    figures = stats(hg, repo)["changelog"]
    assert figures["encodings"] == {"dictionary %d" % figures["active"]: 57}
    leftovers = [name for root, _, files in os.walk(repo / ".hg" / "store")
                 for name in files if name.startswith(".")]
    assert leftovers == []


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
