"""``gitbridge checkout --bundle-uri``: a cold pool seeded from the bundle
list ``gitbridge bundlegen`` publishes to a plain HTTP host, then the
origin's newer commits fetched over smart HTTP (both on 127.0.0.1)."""

import json
import os

import pytest

from checkout_drivers import git_commit, git_served, release_files  # noqa: F401
from vcsperf.harness.servers import FileServer


def head_and_status(git, dest):
    return (git("-C", dest, "rev-parse", "HEAD").strip(),
            git("-C", dest, "status", "--porcelain", "--ignored",
                "--untracked-files=all"))


def published(output):
    """The bundles in ``output``, by creation token: ``file``, ``token``
    and ``kind`` of each (bundlegen's names say them)."""
    chain = []
    for path in output.glob("*.bundle"):
        token, kind, _digest, _ = path.name.split(".")
        chain.append({"file": path.name, "token": int(token), "kind": kind})
    return sorted(chain, key=lambda bundle: bundle["token"])


def only_store(pool):
    stores = [name for name in os.listdir(pool) if name.endswith(".git")]
    assert len(stores) == 1, stores
    return os.path.join(pool, stores[0])


def spawned(git, gitbridge, *args):
    """Run ``gitbridge *args[:-1]`` with git's trace in ``args[-1]``; how
    many git processes read a store's settings, and ran rev-list."""
    *args, trace = args
    git.env["GIT_TRACE"] = str(trace)
    try:
        gitbridge(*args)
    finally:
        del git.env["GIT_TRACE"]
    counts = {}
    for line in trace.read_text().splitlines():
        _, _, command = line.partition(" trace: built-in: git ")
        if command.startswith("config") and (
                "partialclone" in command or "seeded" in command):
            counts["store settings"] = counts.get("store settings", 0) + 1
        elif command.startswith("rev-list"):
            counts["rev-list"] = counts.get("rev-list", 0) + 1
    return counts


def test_a_cold_pool_is_seeded_from_bundles_then_fetches_what_is_newer(
        git, gitbridge, git_served, tmp_path):  # noqa: F811
    """A full and an incremental bundle are applied in creation-token
    order, the origin (moved on since) sends the rest, the tree is the
    origin's tip; the store keeps the highest token and not the bundles'
    refs; a warm checkout asks the bundle host nothing, and looks for
    the commit in the pool's refs only when asked for by its hash; the
    config item does what the option does."""
    output = tmp_path / "bundles"
    output.mkdir()
    with FileServer(output) as host:
        def publish():
            gitbridge("bundlegen", "--repo", git_served.repo, "--output",
                      output, "--base-url", host.url.rstrip("/"))
        publish()
        git_commit(git, git_served.work, release_files(3, "/docs/\n"), "r3")
        publish()
        tip = git_commit(git, git_served.work, release_files(4, "/docs/\n"),
                         "release 4")
        chain = published(output)
        assert [b["kind"] for b in chain] == ["full", "incremental"]
        pool, dest = tmp_path / "pool", tmp_path / "dest"
        proc = gitbridge("checkout", "--sharebase", pool, "--bundle-uri",
                         host.url + "bundle-list", "-r", tip, "--timings",
                         git_served.repo_url, dest)
        assert "(seeded from 2 bundles of %sbundle-list" % host.url \
            in proc.stdout
        assert "seeding from bundles stopped" not in proc.stderr
        timings = json.loads(proc.stdout.splitlines()[-1])["checkout"]
        assert timings["bundles"] == 2 and timings["bundle_bytes"] > 0
        assert "bundles" in timings["steps"]
        assert head_and_status(git, dest) == (tip, "")
        assert [path for path, _ in host.log] == [
            "/bundle-list", "/" + chain[0]["file"], "/" + chain[1]["file"]]
        store = only_store(pool)
        assert git("-C", store, "for-each-ref", "refs/bundles/") == ""
        assert git("-C", store, "config", "gitbridge.bundletoken").strip() \
            == str(chain[1]["token"])
        git("-C", store, "fsck", "--connectivity-only")
        assert os.listdir(os.path.join(store, "objects", "pack"))

        # warm: the store is there, nothing is downloaded
        host.log.clear()
        proc = gitbridge("checkout", "--sharebase", pool, "--bundle-uri",
                         host.url + "bundle-list", "-r", tip,
                         git_served.repo_url, tmp_path / "dest2")
        assert host.log == [] and "(seeded from" not in proc.stdout
        # a branch's commit is the origin's: one git config reads the
        # store's settings, and no rev-list looks for it in the pool's refs
        assert spawned(git, gitbridge, "checkout", "--sharebase", pool,
                       "-b", "main", git_served.repo_url, tmp_path / "dest2",
                       tmp_path / "trace") == {"store settings": 1}
        assert spawned(git, gitbridge, "checkout", "--sharebase", pool,
                       "-r", tip, git_served.repo_url, tmp_path / "dest2",
                       tmp_path / "trace2") == {"store settings": 1,
                                                 "rev-list": 1}

        # the config item
        git("config", "--global", "sharepool.bundle-uri",
            host.url + "bundle-list")
        proc = gitbridge("checkout", "--sharebase", tmp_path / "pool2",
                         "-r", tip, git_served.repo_url, tmp_path / "dest3")
        assert "(seeded from 2 bundles" in proc.stdout
        assert head_and_status(git, tmp_path / "dest3") == (tip, "")


@pytest.mark.parametrize("uri", ["ftp://cdn.example.com/list",
                                 "/var/lib/bundles/bundle-list",
                                 "file:///etc/passwd",
                                 "http://cdn.example.com/a\nb"])
def test_a_bundle_uri_that_is_not_http_is_one_abort_line(
        gitbridge, tmp_path, uri):
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool",
                     "--bundle-uri", uri, "-r", "a" * 40,
                     "http://127.0.0.1:1/x.git", tmp_path / "dest",
                     check=False)
    assert proc.returncode == 255
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("abort: bundle URI ")
    assert lines[1].startswith("(")
    assert not (tmp_path / "pool").exists()
    assert not (tmp_path / "dest").exists()


def test_a_commit_only_a_bundle_holds_is_not_checked_out(
        git, gitbridge, git_served, tmp_path):  # noqa: F811
    """A list serving another repository's bundle seeds the pool with a
    commit the origin never had; asked for by its hash, it is not found
    on the origin (as in a pool never seeded), now or in a later run;
    the origin's tip still checks out."""
    other = tmp_path / "other"
    git("init", "-q", "-b", "main", other)
    (other / "secret.txt").write_text("not the origin's\n")
    git("-C", other, "add", "-A")
    git("-C", other, "commit", "-q", "-m", "another history")
    foreign = git("-C", other, "rev-parse", "HEAD").strip()
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    git("-C", other, "bundle", "create", "-q", host_dir / "other.bundle",
        "--all")
    (host_dir / "list").write_text(
        "[bundle]\n\tversion = 1\n\tmode = all\n"
        "\theuristic = creationToken\n"
        "[bundle \"b1\"]\n\turi = other.bundle\n\tcreationToken = 1\n")
    tip = git("-C", git_served.work, "rev-parse", "HEAD").strip()
    pool = tmp_path / "pool"
    with FileServer(host_dir) as host:
        for attempt in ("seeding", "seeded"):
            proc = gitbridge("checkout", "--sharebase", pool, "--bundle-uri",
                             host.url + "list", "-r", foreign,
                             git_served.repo_url, tmp_path / attempt,
                             check=False)
            assert proc.returncode == 255, (attempt, proc.stdout)
            assert "abort: revision %s not found on %s" % (
                foreign, git_served.repo_url) in proc.stderr
            assert not (tmp_path / attempt / "secret.txt").exists()
        proc = gitbridge("checkout", "--sharebase", pool, "-r", tip,
                         git_served.repo_url, tmp_path / "dest")
        assert head_and_status(git, tmp_path / "dest") == (tip, "")
