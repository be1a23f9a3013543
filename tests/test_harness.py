"""The harness itself: isolation, real servers, the real-content repo."""

import os
import socket
import urllib.request

import pytest

from vcsperf.harness import history


def test_hg_is_isolated_and_real(hg, hgrepo, hgrc):
    unset = hg.proc("config", "ui.username")
    assert (unset.returncode, unset.stdout) == (1, "")
    hgrc.write_text("[ui]\nusername = from the test hgrc\n")
    assert hg("config", "ui.username").strip() == "from the test hgrc"
    (hgrepo / "a").write_text("a\n")
    hg("commit", "-A", "-m", "first", cwd=hgrepo)
    assert hg("log", "-T", "{author}|{desc}", cwd=hgrepo) == \
        "vcsperf test <test@vcsperf.invalid>|first"
    hg("verify", "-q", cwd=hgrepo)


def test_git_is_isolated_and_real(git, gitrepo):
    (gitrepo / "a").write_text("a\n")
    git("add", "a", cwd=gitrepo)
    git("commit", "-q", "-m", "first", cwd=gitrepo)
    assert git("log", "--format=%an <%ae>|%s", cwd=gitrepo).strip() == \
        "vcsperf test <test@vcsperf.invalid>|first"
    git("fsck", "--strict", cwd=gitrepo)


def test_hgserve_serves_on_loopback_and_stops(hg, hgrepo, hgserve, tmp_path):
    (hgrepo / "f").write_text("served\n")
    hg("commit", "-A", "-m", "served", cwd=hgrepo)
    server = hgserve(hgrepo)
    assert server.url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server.url + "?cmd=capabilities") as resp:
        assert b"unbundle" in resp.read()
    hg("clone", "-q", server.url, tmp_path / "clone")
    assert (tmp_path / "clone" / "f").read_text() == "served\n"
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    server.stop()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_real_content_repository(hg, real_hg_repo):
    releases = history.pip_release_table()
    log = hg("log", "-r", "all()", "-T", "{date|hgdate}|{desc}\n",
             cwd=real_hg_repo).splitlines()
    assert len(log) == len(releases) >= 50
    assert [line.split("|")[1] for line in log] == \
        ["pip %s" % r.version for r in releases]
    assert [int(line.split()[0]) for line in log] == [r.date for r in releases]
    revisions = sum(int(n) for n in hg("log", "-T", "{files|count}\n",
                                       cwd=real_hg_repo).split())
    assert revisions >= 5000
    hg("verify", "-q", cwd=real_hg_repo)


def test_release_downloads_are_hash_checked(tmp_path):
    first = history.pip_release_table()[0]
    wheels = tmp_path / "pip-wheels"
    wheels.mkdir()
    (wheels / first.filename).write_bytes(b"tampered")
    [(release, path)] = history.fetch_pip_releases(str(tmp_path), limit=1)
    assert release.version == first.version
    assert os.path.getsize(path) == first.size
    wrong = history.Release(first.version, first.date, first.filename,
                            "0" * 64, first.size)
    with pytest.raises(RuntimeError, match="expected 0000"):
        history._download(wrong, str(tmp_path / "pip-wheels-2"))
