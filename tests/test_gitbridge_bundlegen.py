"""``gitbridge bundlegen``: full and incremental Git bundles and a
bundle-uri list published to a real S3-compatible server (versitygw) on
127.0.0.1; a real ``git clone --bundle-uri`` takes the bundles (seen in
the object server's access log) and then fetches only what is newer from
``git http-backend``; retention; a cut-short or missing bundle falls back
to a normal clone."""

import json
import os
import re

import pytest

from vcsperf.harness import objectstore
from vcsperf.harness.servers import FileServer, GitServer


def _commit(git, work, count, tag):
    for number in range(count):
        path = os.path.join(work, "%s-%d.txt" % (tag, number))
        with open(path, "w") as fh:
            fh.write(("%s line %d\n" % (tag, number)) * 200)
        git("-C", work, "add", path)
        git("-C", work, "commit", "-q", "-m", "%s %d" % (tag, number))
    git("-C", work, "push", "-q", "origin", "main")


@pytest.fixture
def origin(git, tmp_path):
    """A bare repository under ``tmp_path/served`` and a working clone
    that pushes to it."""
    bare = tmp_path / "served" / "repo.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    work = tmp_path / "work"
    git("clone", "-q", bare, work)
    git("-C", work, "checkout", "-q", "-b", "main")
    _commit(git, work, 10, "first")
    return bare, work


def _objects(git, repo):
    return len(git("-C", repo, "rev-list", "--objects", "--all")
               .splitlines())


def test_bundle_uri_clone_takes_the_bundles_then_fetches_what_is_newer(
        origin, git, gitbridge, objectserver, tmp_path):
    bare, work = origin
    objectserver.make_bucket("git-bundles")
    for key, value in (
            ("bundlegen.output", tmp_path / "bundles"),
            ("bundlegen.keep", "2"), ("bundlegen.incrementals", "1"),
            ("bundlegen.usw2.url", "s3://git-bundles/repo"),
            ("bundlegen.usw2.region", objectstore.REGION),
            ("bundlegen.usw2.endpoint", objectserver.url.rstrip("/"))):
        git("-C", bare, "config", key, str(value))
    run = lambda *a: gitbridge("bundlegen", "--repo", bare, *a)  # noqa
    first = json.loads(run("--json").stdout)
    assert first["kind"] == "full" and first["uploaded_bytes"] > 0
    assert "nothing to do: the bundles of these tips are published " \
        "already" in run().stdout
    _commit(git, work, 3, "second")
    assert "would write an incremental bundle" in run("--dry-run").stdout
    second = json.loads(run("--json").stdout)
    assert second["kind"] == "incremental"
    assert second["chain"] == [first["bundle"]["file"],
                               second["bundle"]["file"]]
    listed = objectserver.client().get_object(
        Bucket="git-bundles", Key="repo/bundle-list")["Body"].read().decode()
    assert "\tmode = all\n\theuristic = creationToken\n" in listed
    tokens = [int(t) for t in re.findall(r"creationToken = (\d+)", listed)]
    assert len(tokens) == 2 and tokens[0] < tokens[1]

    # Newer than the bundles: only this is fetched from the server.
    _commit(git, work, 2, "third")
    with GitServer(bare.parent) as server:
        before = len(objectserver.requests())
        trace = tmp_path / "packets"
        git.env["GIT_TRACE_PACKET"] = str(trace)
        proc = git.proc("clone", "--progress", "--bundle-uri="
                        + objectserver.url + "git-bundles/repo/bundle-list",
                        server.url + "repo.git", tmp_path / "clone")
        del git.env["GIT_TRACE_PACKET"]
        assert proc.returncode == 0, proc.stderr
        fetched = server.fetches()
    gets = [k for op, b, k, s in objectserver.requests()[before:]
            if op.endswith("GetObject") and s == "200"]
    assert sorted(gets) == sorted(["repo/bundle-list"] + [
        "repo/" + name for name in second["chain"]])
    assert len(fetched) == 1
    received = re.findall(r"Receiving objects: 100% \((\d+)/", proc.stderr)
    assert received
    if re.search(r"clone> have [0-9a-f]{40}", trace.read_text()):
        # a Git that negotiates with the bundles' refs: 2 commits, 2
        # blobs, 2 trees; the rest came from the bundles
        assert int(received[-1]) < 10 < _objects(git, bare)
    else:
        # Git 2.39 (Debian 12) sends no "have" after unbundling, so the
        # server sends everything again: the clone is right, only not
        # cheaper; the bundles' refs are there for the next fetch
        assert int(received[-1]) == _objects(git, bare)
    assert git("-C", tmp_path / "clone", "rev-parse", "HEAD") == git(
        "-C", bare, "rev-parse", "main")
    assert git("-C", tmp_path / "clone", "for-each-ref", "refs/bundles")
    git("-C", tmp_path / "clone", "fsck", "--no-progress")

    # A full bundle again after one incremental; the list before last
    # keeps its bundles, older ones go everywhere.
    third = json.loads(run("--json").stdout)
    assert third["kind"] == "full" and third["retired"] == []
    _commit(git, work, 1, "fourth")
    fourth = json.loads(run("--json").stdout)
    assert fourth["kind"] == "incremental"
    assert sorted(fourth["retired"]) == sorted(second["chain"])
    keys = objectserver.keys("git-bundles")
    assert sorted(keys) == sorted(["repo/bundle-list"] + [
        "repo/" + name for name in fourth["chain"]])
    assert sorted(n for n in os.listdir(tmp_path / "bundles")
                  if n.endswith(".bundle")) == sorted(fourth["chain"])


@pytest.mark.parametrize("failure", ["truncated", "missing"])
def test_a_broken_bundle_falls_back_to_a_normal_clone(
        failure, origin, git, gitbridge, tmp_path):
    bare, _work = origin
    output = tmp_path / "bundles"
    output.mkdir()
    with FileServer(output) as files, GitServer(bare.parent) as server:
        gitbridge("bundlegen", "--repo", bare, "--output", output,
                  "--base-url", files.url.rstrip("/"))
        [name] = [n for n in os.listdir(output) if n.endswith(".bundle")]
        if failure == "missing":
            files.missing.add(name)
        else:
            files.truncate[name] = os.path.getsize(output / name) // 2
        proc = git.proc("clone", "--bundle-uri=" + files.url
                        + "bundle-list", server.url + "repo.git",
                        tmp_path / "clone")
        assert proc.returncode == 0, proc.stderr
        assert [path for path, _status in files.log] == [
            "/bundle-list", "/" + name]
        assert len(server.fetches()) == 1
    assert "failed to" in proc.stderr  # git's warning, then a full clone
    assert git("-C", tmp_path / "clone", "rev-parse", "HEAD") == git(
        "-C", bare, "rev-parse", "main")
    git("-C", tmp_path / "clone", "fsck", "--no-progress")
