"""The harness itself: isolation, real servers, the real-content repo."""

import os
import socket
import sys
import urllib.request

import pytest

from vcsperf.core import process
from vcsperf.harness import history, proxies, servers


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


def test_streaming_git_server_behind_a_counting_proxy(git, gitrepo,
                                                      tmp_path):
    """``GitServer(stream=True)`` answers chunked as ``git http-backend``
    writes, and ``CountingProxy`` passes that on and counts the requests
    and the body bytes; a clone through both is whole."""
    (gitrepo / "a").write_bytes(os.urandom(200000))
    git("add", "a", cwd=gitrepo)
    git("commit", "-q", "-m", "first", cwd=gitrepo)
    root = tmp_path / "root"
    root.mkdir()
    git("clone", "-q", "--bare", gitrepo, root / "repo.git")
    with servers.GitServer(root, stream=True) as server, \
            proxies.CountingProxy(server.url) as proxy:
        git("clone", "-q", proxy.url + "repo.git", tmp_path / "clone")
        requests, nbytes = proxy.take()
        assert len(server.fetches()) == 1
    assert (tmp_path / "clone" / "a").read_bytes() == \
        (gitrepo / "a").read_bytes()
    assert requests >= 2 and 200000 < nbytes < 400000
    assert proxy.take() == (0, 0)


#: A ``git`` whose ``http-backend`` is killed before it answers (as the
#: OOM killer or a stray signal would), the real git otherwise.
KILLED_BACKEND = """#!/bin/sh
[ "$1" = http-backend ] && kill -9 $$
exec %s "$@"
"""


@pytest.mark.parametrize("stream", [False, True])
def test_git_server_says_502_when_its_backend_dies_before_answering(
        stream, git, gitrepo, tmp_path, monkeypatch, capfd):
    """A backend that dies before its headers is a 502, as a web server
    answers, and said on stderr: never an empty "200", which git takes
    for a dumb server's empty repository (``ls-remote`` finds no refs and
    exits 0)."""
    (gitrepo / "a").write_text("a\n")
    git("add", "a", cwd=gitrepo)
    git("commit", "-q", "-m", "first", cwd=gitrepo)
    root = tmp_path / "root"
    root.mkdir()
    git("clone", "-q", "--bare", gitrepo, root / "repo.git")
    dying = tmp_path / "dying"
    dying.mkdir()
    (dying / "git").write_text(KILLED_BACKEND % process.executable("git"))
    (dying / "git").chmod(0o755)
    with servers.GitServer(root, stream=stream) as server:
        url = server.url + "repo.git"
        assert "refs/heads/main" in git("ls-remote", url)
        monkeypatch.setenv("PATH", "%s:%s" % (dying, os.environ["PATH"]))
        proc = git.proc("ls-remote", url)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "502" in proc.stderr, proc.stderr
    assert server.log[-1][2] == "502 Bad Gateway"
    assert "git http-backend GET /repo.git/info/refs?service=" \
        "git-upload-pack: exit status -9 before its headers" in \
        capfd.readouterr().err


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


def test_hgserve_takes_serve_arguments_and_says_why_it_did_not_start(
        hg, hgrepo, env, tmp_path):
    log = tmp_path / "requests.log"
    with servers.HgServer(env, hgrepo, "--config", "web.name=named here",
                          "--accesslog", log) as server:
        with urllib.request.urlopen(server.url) as resp:
            assert b"named here" in resp.read()
    assert "GET / HTTP" in log.read_text()
    with pytest.raises(RuntimeError, match="hg serve did not start: abort: "
                       "repository .*missing not found"):
        servers.HgServer(env, tmp_path / "missing")


def test_runner_streams_lines_and_progress_and_keeps_failures():
    script = ("import sys\n"
              "for n in range(3):\n"
              "    sys.stderr.write('step %d\\r' % n); sys.stderr.flush()\n"
              "    print('line', n, flush=True)\n"
              "sys.stderr.write('abort: no more\\n')\n"
              "sys.exit(3)\n")
    lines, progress = [], []
    proc = process.completed([sys.executable, "-c", script], None,
                             on_line=lines.append, on_progress=progress.append)
    assert lines == ["line 0\n", "line 1\n", "line 2\n"]
    assert progress == ["step 0", "step 1", "step 2"]
    assert (proc.returncode, proc.stdout, proc.stderr) == \
        (3, "".join(lines), "abort: no more\n")
    with pytest.raises(process.CommandError, match="abort: no more") as err:
        process.run([sys.executable, "-c", script], None,
                    on_line=lambda line: None)
    assert err.value.stdout == "".join(lines)
    assert process.run([sys.executable, "-c", "print(input())"], None,
                       input="given\n") == "given\n"


@pytest.mark.parametrize("size", [0, 1, 2, 3, 8, 57, 100])
def test_spread_picks_newest_first_then_farthest(size):
    revisions = ["r%d" % i for i in range(size)]      # the newest first
    for count in range(1, size + 2):
        picks = history.spread(revisions, count)
        assert len(picks) == min(count, size) == len(set(picks))
        assert picks == history.spread(revisions, count + 1)[:count]
        if picks:
            assert picks[0] == "r0"
    if size >= 4:
        # the second pick halves the history, the next two the halves
        half = size // 2
        picks = history.spread(revisions, 4)
        assert picks[:2] == [revisions[0], revisions[half]]
        assert sorted(picks[2:]) == [revisions[half // 2],
                                     revisions[(half + size) // 2]]
    window = history.spread(revisions, 5, newest=0.1)
    assert set(window) <= set(revisions[:max(5, size // 10)])
    even = history.spread(revisions, 4, usable=lambda r: int(r[1:]) % 2 == 0)
    assert all(int(r[1:]) % 2 == 0 for r in even)
    assert len(even) == min(4, (size + 1) // 2)


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
