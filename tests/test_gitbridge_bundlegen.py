"""``gitbridge bundlegen``: full and incremental Git bundles and a
bundle-uri list published to a real S3-compatible server (versitygw) on
127.0.0.1; a real ``git clone --bundle-uri`` takes the bundles (seen in
the object server's access log) and then fetches only what is newer from
``git http-backend``; retention; a cut-short or missing bundle falls back
to a normal clone."""

import glob
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading

import pytest

import campaign
from gitbridge import bundlegen
from vcsperf.harness import history, objectstore, tools
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
            ("bundlegen.keep", "1"), ("bundlegen.incrementals", "1"),
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


def _configure(git, bare, objectserver, output, **destinations):
    """Destinations NAME=BUCKET on the object server, in that order."""
    for key, value in (("bundlegen.output", output),
                       ("bundlegen.destinations", " ".join(destinations))):
        git("-C", bare, "config", key, str(value))
    for name, bucket in destinations.items():
        for key, value in (("url", "s3://%s/repo" % bucket),
                           ("region", objectstore.REGION),
                           ("endpoint", objectserver.url.rstrip("/"))):
            git("-C", bare, "config", "bundlegen.%s.%s" % (name, key), value)


@pytest.mark.parametrize("change", ["deleted", "changed"])
def test_a_bundle_gone_from_the_output_starts_a_new_full_one(
        change, origin, git, gitbridge, objectserver, tmp_path):
    """Regression (issue 27, item 11): a bundle of the list deleted from
    the output directory made every later run end in a traceback; one
    changed there was named again in the next list.  The run starts a new
    full bundle instead, and says why in one line."""
    bare, work = origin
    objectserver.make_bucket("git-bundles")
    output = tmp_path / "bundles"
    _configure(git, bare, objectserver, output, usw2="git-bundles")
    run = lambda *a: gitbridge("bundlegen", "--repo", bare, *a,  # noqa
                               check=False)
    first = json.loads(run("--json").stdout)
    full = output / first["bundle"]["file"]
    if change == "deleted":
        full.unlink()
    else:
        data = bytearray(full.read_bytes())
        data[-1] ^= 1
        full.write_bytes(bytes(data))
    _commit(git, work, 2, "second")
    proc = run("--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    second = json.loads(proc.stdout)
    assert second["kind"] == "full"
    assert second["reason"] == "%s of the list %s %s" % (
        first["bundle"]["file"], "is missing from" if change == "deleted"
        else "was changed in", output)
    assert "writing a full bundle (%s)\n" % second["reason"] in proc.stderr
    assert second["chain"] == [second["bundle"]["file"]]
    listed = objectserver.client().get_object(
        Bucket="git-bundles", Key="repo/bundle-list")["Body"].read().decode()
    assert first["bundle"]["file"] not in listed
    assert second["bundle"]["file"] in listed
    # A stock clone through the new list has the whole history.
    proc = git.proc("clone", "-q", "--bundle-uri=" + objectserver.url
                    + "git-bundles/repo/bundle-list", bare, tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    assert git("-C", tmp_path / "c", "for-each-ref", "refs/bundles")
    assert git("-C", tmp_path / "c", "rev-parse", "HEAD") == git(
        "-C", bare, "rev-parse", "main")


def test_refused_deletes_stay_in_the_record_for_the_next_run(
        origin, git, gitbridge, objectserver, tmp_path):
    """Regression (issue 27, item 11): a destination that refuses to
    delete retired bundles (here Object Lock's legal hold) got a
    traceback after the new list was out, the retired names dropped out
    of the record and were never deleted, and the other destinations were
    not tried.  Now: a warning, the other destinations delete theirs, the
    names stay in the record, exit status 1; the next run deletes them
    once the server lets it."""
    bare, work = origin
    client = objectserver.client()
    client.create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True)
    objectserver.make_bucket("open")
    output = tmp_path / "bundles"
    _configure(git, bare, objectserver, output, locked="locked",
               open="open")
    git("-C", bare, "config", "bundlegen.keep", "1")
    git("-C", bare, "config", "bundlegen.incrementals", "0")
    run = lambda *a: gitbridge("bundlegen", "--repo", bare, *a,  # noqa
                               check=False)
    first = json.loads(run("--json").stdout)
    old = first["bundle"]["file"]
    client.put_object_legal_hold(Bucket="locked", Key="repo/" + old,
                                 LegalHold={"Status": "ON"})
    _commit(git, work, 1, "second")
    # keep = 1: the list this run replaces keeps its bundle
    assert json.loads(run("--json").stdout)["retired"] == []
    _commit(git, work, 1, "third")
    proc = run("--json")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    second = json.loads(proc.stdout)
    assert second["retired"] == [old] and second["refused"] == ["locked"]
    assert re.search(r"^warning: locked refused to delete 1 retired bundles "
                     r"\(%s: AccessDenied: .*\); bundles.json keeps them for "
                     r"the next run$" % re.escape(old),
                     proc.stderr, re.M), proc.stderr
    kept = sorted(["repo/bundle-list"] + [
        "repo/" + name for name in json.loads(
            (output / "bundles.json").read_text())["generations"][1]["files"]
        + second["chain"]])
    assert objectserver.keys("open") == kept
    assert objectserver.keys("locked") == sorted(kept + ["repo/" + old])
    record = json.loads((output / "bundles.json").read_text())
    assert record["undeleted"] == {"locked": [old]}
    assert not (output / old).exists()

    # Still held: the next run (nothing new) tries again, and keeps them.
    proc = run()
    assert proc.returncode == 1 and "warning: locked refused" in proc.stderr
    assert json.loads((output / "bundles.json").read_text())[
        "undeleted"] == {"locked": [old]}
    client.put_object_legal_hold(Bucket="locked", Key="repo/" + old,
                                 LegalHold={"Status": "OFF"})
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert "nothing to do" in proc.stdout and proc.stderr == ""
    assert objectserver.keys("locked") == kept
    assert not json.loads((output / "bundles.json").read_text()).get(
        "undeleted")


@pytest.mark.parametrize("url", ["not a url", "https://cdn.example.com/a b",
                                 "ftp://cdn.example.com/b",
                                 "https://cdn.example.com/b?x=1",
                                 "https://cdn.example.com/b\n[core]"])
def test_a_base_url_clients_cannot_fetch_from_is_refused(
        url, origin, git, gitbridge, tmp_path):
    """Regression (issue 27, item 19): ``--base-url 'not a url'`` went
    into the bundle list; now one abort line, as ``hg bundlegen`` says it,
    and nothing is written."""
    bare, _work = origin
    output = tmp_path / "bundles"
    for proc in (gitbridge("bundlegen", "--repo", bare, "--output", output,
                           "--base-url", url, check=False),
                 # the same from the repository's config
                 git.proc("-C", bare, "config", "bundlegen.base-url", url)
                 and gitbridge("bundlegen", "--repo", bare, "--output",
                               output, check=False)):
        assert proc.returncode == 255
        assert proc.stderr == (
            "abort: bundlegen.base-url is not a URL clients can fetch "
            "from: %s\n(give an absolute http, https or file URL without "
            "query or fragment; percent-encode other characters (a space "
            "as %%20))\n" % ascii(url))
        assert not output.exists()


@pytest.mark.parametrize("where", ["missing", "plain"])
def test_a_repository_that_is_not_there_is_refused(where, gitbridge,
                                                   tmp_path):
    """``--repo`` naming a missing path ended in a traceback; a plain
    directory got the output directory made before the abort."""
    repo = tmp_path / "repo"
    if where == "plain":
        repo.mkdir()
    output = tmp_path / "bundles"
    proc = gitbridge("bundlegen", "--repo", repo, "--output", output,
                     "--base-url", "https://cdn.example.com/b", check=False)
    assert campaign.is_clean_abort(proc), proc.stderr
    assert "abort: %s is not a Git repository\n" % repo in proc.stderr
    assert not output.exists()


def test_an_output_that_cannot_be_a_directory_is_refused(
        origin, gitbridge, tmp_path):
    """An output path that is a file: one abort line, not a traceback;
    ``--dry-run`` makes nothing."""
    bare, _work = origin
    output = tmp_path / "bundles"
    dry = gitbridge("bundlegen", "--repo", bare, "--output", output,
                    "--base-url", "https://cdn.example.com/b", "--dry-run")
    assert "would write a full bundle (no bundles yet)" in dry.stdout
    assert not output.exists()
    output.write_text("a file\n")
    proc = gitbridge("bundlegen", "--repo", bare, "--output", output,
                     "--base-url", "https://cdn.example.com/b", check=False)
    assert campaign.is_clean_abort(proc), proc.stderr
    assert "abort: cannot make the output directory %s: File exists\n" \
        % output in proc.stderr
    assert output.read_text() == "a file\n"


def test_relative_paths_on_the_command_line_are_the_callers(
        origin, git, gitbridge, tmp_path):
    """``--output`` and ``--metrics-dir`` given relative were taken
    relative to ``--repo``: the bundles were written inside the served
    repository.  They are relative to where the command runs, as any
    command line path; those of the repository's config stay relative to
    the repository (the output directory was made in the caller's
    directory and git wrote into the repository's)."""
    bare, _work = origin
    here = tmp_path / "cron"
    (here / "metrics").mkdir(parents=True)
    (bare / "metrics").mkdir()
    gitbridge("bundlegen", "--repo", bare, "--output", "bundles",
              "--metrics-dir", "metrics", "--base-url",
              "https://cdn.example.com/b", cwd=here)
    assert (here / "bundles" / "bundle-list").is_file()
    assert os.listdir(here / "metrics")
    assert not (bare / "bundles").exists()
    assert not os.listdir(bare / "metrics")
    # the same paths in the repository's config are the repository's
    # (the output beside it: inside a bare one is refused)
    for key, value in (("output", "../cfgout"), ("metrics-dir", "metrics"),
                       ("base-url", "https://cdn.example.com/b")):
        git("-C", bare, "config", "bundlegen." + key, value)
    gitbridge("bundlegen", "--repo", bare, "-f", cwd=here)
    assert (bare.parent / "cfgout" / "bundle-list").is_file()
    assert os.listdir(bare / "metrics")
    assert not (tmp_path / "cfgout").exists()


def test_booleans_take_mercurials_words(origin, git, gitbridge, tmp_path):
    """Issue 28: a destination's ``cdn = on`` was refused, and
    ``bundlegen.advertise = always``; they are Mercurial's words for
    true.  A word that is no boolean is refused naming the words."""
    bare, _work = origin
    base = "https://cdn.example.com/b"
    for key, value in (("bundlegen.output", tmp_path / "bundles"),
                       ("bundlegen.base-url", base),
                       ("bundlegen.usw2.url", "s3://git-bundles/repo"),
                       ("bundlegen.usw2.cdn", "on")):
        git("-C", bare, "config", key, str(value))
    def run(*args, check=True):
        return gitbridge("bundlegen", "--repo", bare, *args, check=check)

    assert "would write a full bundle" in run("--dry-run").stdout
    git("-C", bare, "config", "bundlegen.usw2.cdn", "maybe")
    assert run("--dry-run", check=False).stderr.startswith(
        "abort: destination usw2: cdn must be a boolean (yes or no, on or "
        "off, true or false, always or never, 1 or 0), not 'maybe'\n")
    git("-C", bare, "config", "--remove-section", "bundlegen.usw2")
    git("-C", bare, "config", "bundlegen.advertise", "always")
    result = json.loads(run("--json").stdout)
    assert result["advertised"] == base + "/bundle-list"
    assert git("-C", bare, "config", "bundle.bundlegen.uri") == \
        base + "/bundle-list\n"
    git("-C", bare, "config", "bundlegen.advertise", "maybe")
    proc = run(check=False)
    assert proc.stderr.startswith(
        "abort: bundlegen.advertise must be a boolean (yes or no, on or "
        "off, true or false, always or never, 1 or 0) or where the list "
        "to advertise is published, not 'maybe'\n"), proc.stderr


def test_a_broken_git_config_is_an_error_not_unset(origin, gitbridge,
                                                   tmp_path):
    """Issue 28: a repository config git cannot parse was read as no
    settings ("needs an output directory"), or its repository as none
    ("is not a Git repository").  It is git's one line."""
    bare, _work = origin
    with open(bare / "config", "a") as fh:
        fh.write("[bundlegen\n")
    proc = gitbridge("bundlegen", "--repo", bare, "--output",
                     tmp_path / "bundles", "--base-url",
                     "https://cdn.example.com/b", check=False)
    assert campaign.is_clean_abort(proc), proc.stderr
    assert re.match(r"abort: git config failed: fatal: bad config line "
                    r"\d+ in file \S*config\n\Z", proc.stderr), proc.stderr
    assert not (tmp_path / "bundles").exists()


def test_the_bundle_list_reads_back_through_git_config(
        origin, git, gitbridge, tmp_path):
    """A base URL holding characters Git config gives a meaning to
    (``;`` starts a comment) is written quoted: Git reads back each
    bundle's URL whole."""
    bare, _work = origin
    output = tmp_path / "bundles"
    base = "https://cdn.example.com/a;b/c'd=e[1]"
    result = json.loads(gitbridge("bundlegen", "--repo", bare, "--output",
                                  output, "--base-url", base,
                                  "--json").stdout)
    read = git("config", "-f", output / "bundle-list", "--get-regexp",
               r"^bundle\..*\.uri$")
    assert read.split() == ["bundle.full-%d.uri" % result["bundle"]["token"],
                            "%s/%s" % (base, result["bundle"]["file"])]


def test_the_documented_settings_parse_as_git_config(tmp_path, git):
    """The settings example of ``gitbridge bundlegen --help`` is read by
    Git's own parser as it is written, with the values it shows."""
    doc = bundlegen.__doc__
    start = doc.index("::\n\n  [bundlegen]\n") + 3
    example = doc[start:doc.index("\n\n", start)]
    path = tmp_path / "example.config"
    path.write_text(example + "\n")
    read = dict(line.split(" ", 1) for line in git(
        "config", "-f", path, "--get-regexp", r"^bundlegen\.").splitlines())
    assert read["bundlegen.advertise"] == "true"
    assert read["bundlegen.destinations"] == "usw2 euc1"
    assert read["bundlegen.euc1.endpoint"] == "http://127.0.0.1:7070"
    assert read["bundlegen.metrics-dir"] == \
        "/var/lib/prometheus/node-exporter"
    assert read["bundlegen.parts"] == "4"
    assert len(read) == 16


def _git_version(binary):
    proc = subprocess.run([binary, "--version"], capture_output=True,
                          text=True)
    found = re.match(r"git version (\d+)\.(\d+)", proc.stdout)
    return tuple(map(int, found.groups())) if found else (0, 0)


@pytest.fixture
def bundle_uri_git():
    """A Git whose server and client speak protocol v2's ``bundle-uri``
    command (2.40 or later): on PATH, or the one contrib/newer_git.sh
    builds into the cache (CI runs it; Debian 12 has 2.39)."""
    candidates = [shutil.which("git")] + sorted(glob.glob(os.path.join(
        history.default_cache_dir(), "git-2.*", "bin", "git")))
    for binary in filter(None, candidates):
        if _git_version(binary) >= (2, 40):
            return binary
    pytest.skip("needs Git 2.40 or later: sh contrib/newer_git.sh builds "
                "one")


def test_the_git_server_advertises_the_bundle_list(
        origin, git, gitbridge, bundle_uri_git, env, monkeypatch, tmp_path):
    """Regression (issue 27, item 19): a Git server never advertised the
    bundle list, so every client had to be told its URL.  With
    ``bundlegen.advertise``, a plain ``git clone`` of the served
    repository by a client that sets ``transfer.bundleURI`` fetches the
    list and its bundles (the file server's log; the client's packet
    trace shows the server's answer to ``command=bundle-uri``), then
    fetches the rest from the server."""
    bare, work = origin
    output = tmp_path / "bundles"
    output.mkdir()
    newer = os.path.dirname(bundle_uri_git)
    # the server's git http-backend is this Git too
    monkeypatch.setenv("PATH", newer + os.pathsep + os.environ["PATH"])
    client_env = dict(env, PATH=newer + os.pathsep + env["PATH"])

    def clone(name, *config):
        trace = tmp_path / (name + ".packets")
        proc = subprocess.run(
            [bundle_uri_git, *config, "clone", "--no-progress",
             server.url + "repo.git", str(tmp_path / name)],
            env=dict(client_env, GIT_TRACE_PACKET=str(trace)),
            capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return trace.read_text()

    with FileServer(output) as files, GitServer(bare.parent) as server:
        git("-C", bare, "config", "bundlegen.advertise", "true")
        result = json.loads(gitbridge(
            "bundlegen", "--repo", bare, "--output", output, "--base-url",
            files.url.rstrip("/"), "--json").stdout)
        assert result["advertised"] == files.url + "bundle-list"
        assert git("-C", bare, "config", "bundle.bundlegen.uri") == \
            files.url + "bundle-list\n"
        _commit(git, work, 2, "newer")

        # Not asked for: the client does not look for bundles.
        assert "clone> command=bundle-uri" not in clone("plain")
        assert files.log == []
        trace = clone("bundled", "-c", "transfer.bundleURI=true")
        assert [path for path, status in files.log if status == 200] == [
            "/bundle-list", "/" + result["bundle"]["file"]]
        answer = re.findall(r"packet: +clone([<>]) (.*)", trace)
        assert (">", "command=bundle-uri") in answer
        assert ("<", "bundle.bundlegen.uri=%sbundle-list" % files.url) \
            in answer
        assert len(server.fetches()) == 2
    clone_dir = tmp_path / "bundled"
    assert git("-C", clone_dir, "for-each-ref", "refs/bundles")
    assert git("-C", clone_dir, "rev-parse", "HEAD") == git(
        "-C", bare, "rev-parse", "main")
    git("-C", clone_dir, "fsck", "--no-progress")


CONTRIB = os.path.join(os.path.dirname(__file__), os.pardir, "contrib",
                       "bundlegen")


def test_cron_script_runs_the_virtualenv_gitbridge_for_each_repository(
        origin, git, env, tmp_path):
    """Regression (issue 27, item 19): there was no cron example for
    ``gitbridge bundlegen``.  It runs the virtualenv's gitbridge (not one
    on cron's PATH), every repository, and says which failed."""
    bare, _work = origin
    output = tmp_path / "bundles"
    git("-C", bare, "config", "bundlegen.output", output)
    git("-C", bare, "config", "bundlegen.base-url", "https://cdn.example.com")
    unconfigured = tmp_path / "unconfigured.git"
    git("init", "-q", "--bare", unconfigured)
    venv = os.path.dirname(os.path.dirname(tools.executable("gitbridge")))
    proc = subprocess.run(
        ["sh", os.path.join(CONTRIB, "gitbridge-bundlegen-cron.sh"),
         str(unconfigured), str(bare)],
        env=dict(env, VCSPERF_VENV=venv, PATH="/usr/bin:/bin"),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "gitbridge bundlegen failed for %s" % unconfigured in proc.stderr
    assert "abort: gitbridge bundlegen needs an output directory" \
        in proc.stderr
    assert ".full." in (output / "bundle-list").read_text()


@pytest.mark.parametrize("name", ["gitbridge-bundlegen@.service",
                                  "gitbridge-bundlegen@.timer"])
def test_systemd_units_for_gitbridge_bundlegen(name):
    """The unit runs the virtualenv's gitbridge with a timeout, hardened
    as the hg one."""
    unit = os.path.join(CONTRIB, name)
    text = open(unit).read()
    if name.endswith(".service"):
        assert "\nExecStart=/opt/vcsperf/venv/bin/gitbridge bundlegen " \
            "--repo %f\n" in text
        assert re.search(r"\nTimeoutStartSec=\d+h\n", text)
        assert "\nReadWritePaths=%f /var/lib/git-bundles " \
            "-/var/lib/prometheus/node-exporter\n" in text
    # systemd has no comments after a value: every "#" starts a line
    assert all(line.startswith("#") or "#" not in line
               for line in text.splitlines())
    # systemd's parser and systemd-analyze security:
    # test_contrib_monitoring.py, for every unit of contrib/bundlegen


def test_objects_deleted_from_the_bucket_are_uploaded_again(
        origin, git, gitbridge, objectserver, tmp_path):
    """Regression (issue 27, item 5, Git side): a bundle or the list
    deleted by hand from the bucket was never published again ("nothing
    to do" on every rerun) while clones lost the bundles."""
    bare, _work = origin
    objectserver.make_bucket("git-bundles")
    _configure(git, bare, objectserver, tmp_path / "bundles",
               usw2="git-bundles")
    first = json.loads(gitbridge("bundlegen", "--repo", bare,
                                 "--json").stdout)
    published = objectserver.keys("git-bundles")
    objectserver.client().delete_objects(Bucket="git-bundles", Delete={
        "Objects": [{"Key": key} for key in published]})
    proc = gitbridge("bundlegen", "--repo", bare)
    assert "uploaded 1 missing bundles to usw2 again\n" in proc.stdout
    assert "wrote the bundle list to usw2 again\n" in proc.stdout
    assert "nothing to do: the bundles of these tips are published " \
        "already" in proc.stdout
    assert objectserver.keys("git-bundles") == published
    got = objectserver.client().get_object(
        Bucket="git-bundles", Key="repo/" + first["bundle"]["file"])
    assert hashlib.sha256(got["Body"].read()).hexdigest() == \
        first["bundle"]["sha256"]


def test_a_stalled_object_server_ends_the_run_at_its_deadline(
        origin, git, gitbridge, env, tmp_path):
    """Regression (issue 27, item 8, Git side): a server that accepts and
    never answers held the run (and its lock) for minutes; now
    ``bundlegen.upload-timeout`` bounds each phase, and the run ends in
    one abort line naming it, before building anything."""
    bare, _work = origin
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        for key, value in (
                ("bundlegen.output", tmp_path / "bundles"),
                ("bundlegen.upload-timeout", "2"),
                ("bundlegen.stall.url", "s3://git-bundles/repo"),
                ("bundlegen.stall.endpoint",
                 "http://127.0.0.1:%d" % listener.getsockname()[1])):
            git("-C", bare, "config", key, str(value))
        env.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
                   AWS_EC2_METADATA_DISABLED="true")
        proc = gitbridge("bundlegen", "--repo", bare, check=False)
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    assert campaign.is_clean_abort(proc), proc.stderr
    assert "bundlegen.upload-timeout" in proc.stderr
    assert held, "the run never reached the server"
    assert not [n for n in os.listdir(tmp_path / "bundles")
                if n.endswith(".bundle")]


def test_full_bundles_are_published_as_packs_too_and_retired_with_them(
        origin, git, gitbridge, objectserver, tmp_path):
    """``bundlegen.parts``: each full bundle is also published as that
    many packs, named in its section of the list, which a stock ``git
    clone --bundle-uri`` ignores and ``gitbridge checkout --bundle-uri``
    takes instead of the bundle; they are checked, uploaded again and
    retired like the bundles."""
    bare, work = origin
    objectserver.make_bucket("git-bundles")
    output = tmp_path / "bundles"
    _configure(git, bare, objectserver, output, usw2="git-bundles")
    git("-C", bare, "config", "bundlegen.incrementals", "1")
    git("-C", bare, "config", "bundlegen.parts", "3")
    run = lambda *a: gitbridge("bundlegen", "--repo", bare, *a,  # noqa
                               check=False)
    first = json.loads(run("--json").stdout)
    parts = [p["file"] for p in first["bundle"]["parts"]]
    assert len(parts) == 3 and all(re.match(
        r"%d\.full\.part%d\.[0-9a-f]{16}\.pack$" % (first["bundle"]["token"],
                                                    n + 1), name)
        for n, name in enumerate(parts)), parts
    assert objectserver.keys("git-bundles") == sorted(
        ["repo/bundle-list", "repo/" + first["bundle"]["file"]]
        + ["repo/" + name for name in parts])
    list_url = objectserver.url + "git-bundles/repo/bundle-list"
    listed = objectserver.client().get_object(
        Bucket="git-bundles", Key="repo/bundle-list")["Body"].read().decode()
    assert listed.count("\tgitbridgePart = ") == 3
    # together the packs hold the bundle's history
    store = tmp_path / "store"
    git("init", "-q", "--bare", store)
    for name in parts:
        with open(output / name, "rb") as fh:
            subprocess.run(["git", "-C", str(store), "index-pack",
                            "--stdin"], stdin=fh, check=True,
                           capture_output=True)
    git("-C", store, "rev-list", "--objects", "--quiet",
        git("-C", bare, "rev-parse", "main").strip())

    _commit(git, work, 2, "second")
    second = json.loads(run("--json").stdout)
    assert second["kind"] == "incremental" and "parts" not in second[
        "bundle"]
    # a stock clone reads the list and takes the bundles, not the packs
    before = len(objectserver.requests())
    proc = git.proc("clone", "-q", "--bundle-uri=" + list_url, bare,
                    tmp_path / "clone")
    assert proc.returncode == 0, proc.stderr
    gets = [k for op, b, k, s in objectserver.requests()[before:]
            if op.endswith("GetObject")]
    assert gets and not [k for k in gets if k.endswith(".pack")], gets
    git("-C", tmp_path / "clone", "fsck", "--no-progress")
    # gitbridge checkout takes the packs
    before = len(objectserver.requests())
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool",
                     "--bundle-uri", list_url, "-b", "main", str(bare),
                     tmp_path / "dest", check=False)
    assert proc.returncode == 0 and "bundle packs not used" not in \
        proc.stderr, proc.stderr
    gets = [k for op, b, k, s in objectserver.requests()[before:]
            if op.endswith("GetObject")]
    assert sorted(k for k in gets if k.endswith(".pack")) == sorted(
        "repo/" + name for name in parts), gets

    # a pack deleted on the destination goes up again
    objectserver.client().delete_object(Bucket="git-bundles",
                                        Key="repo/" + parts[1])
    proc = run()
    assert proc.returncode == 0 and "uploaded 1 missing bundles to usw2 " \
        "again" in proc.stdout + proc.stderr, (proc.stdout, proc.stderr)
    assert "repo/" + parts[1] in objectserver.keys("git-bundles")
    assert "fresh: 2 bundles" in gitbridge(
        "bundlegen", "--repo", bare, "--check-fresh").stdout

    # a new full bundle, then an incremental: the first one's packs retire
    _commit(git, work, 1, "third")
    third = json.loads(run("--json").stdout)
    assert third["kind"] == "full" and len(third["bundle"]["parts"]) == 3
    _commit(git, work, 1, "fourth")
    fourth = json.loads(run("--json").stdout)
    assert sorted(fourth["retired"]) == sorted(
        [first["bundle"]["file"], second["bundle"]["file"]] + parts)
    for name in parts:
        assert not (output / name).exists()
        assert "repo/" + name not in objectserver.keys("git-bundles")

    # a pack changed in the output directory starts a new full bundle
    changed = output / third["bundle"]["parts"][0]["file"]
    data = bytearray(changed.read_bytes())
    data[-1] ^= 1
    changed.write_bytes(bytes(data))
    git("-C", bare, "config", "bundlegen.incrementals", "6")
    _commit(git, work, 1, "fifth")
    fifth = json.loads(run("--json").stdout)
    assert fifth["kind"] == "full" and fifth["reason"] == (
        "%s of the list was changed in %s" % (changed.name, output))

    for value in ("65", "x"):
        git("-C", bare, "config", "bundlegen.parts", value)
        proc = run()
        assert campaign.is_clean_abort(proc) and "bundlegen.parts" in \
            proc.stderr, proc.stderr


@pytest.mark.parametrize("broken", ["sort fails", "sort missing",
                                    "killed"])
def test_a_run_stopped_while_writing_packs_leaves_nothing(
        broken, origin, git, gitbridge, env, tmp_path):
    """Outside tester's finding: a failure while the packs were written
    left the full bundle under its final name, in no record, for good; a
    killed run left its work directory.  Now a failed run removes what it
    wrote, and the next run sweeps what a killed one left."""
    bare, _work = origin
    git("-C", bare, "config", "bundlegen.parts", "2")
    output = tmp_path / "bundles"
    tools_dir = tmp_path / "bin"
    tools_dir.mkdir()
    os.symlink(shutil.which("git"), tools_dir / "git")
    command = [tools.executable("gitbridge"), "bundlegen", "--repo",
               str(bare), "--output", str(output), "--base-url",
               "https://cdn.example.com/b"]
    path = dict(env, PATH=str(tools_dir))
    if broken == "sort fails":
        (tools_dir / "sort").write_text(
            "#!/bin/sh\n/bin/cat >/dev/null\necho boom >&2\nexit 2\n")
        (tools_dir / "sort").chmod(0o755)
    if broken == "killed":
        (tools_dir / "sort").write_text("#!/bin/sh\n/bin/sleep 60\n")
        (tools_dir / "sort").chmod(0o755)
        proc = subprocess.Popen(command, env=path, start_new_session=True)
        for _ in range(200):
            if glob.glob(str(output / ".bundlegen-tmp-*" / "objects")):
                break
            threading.Event().wait(0.05)
        os.killpg(proc.pid, 9)
        proc.wait()
        assert glob.glob(str(output / ".bundlegen-tmp-*"))
    else:
        proc = subprocess.run(command, env=path, capture_output=True,
                              text=True)
        assert campaign.is_clean_abort(proc), proc.stderr
        assert ("sort failed: boom" if broken == "sort fails"
                else "cannot run sort") in proc.stderr
        assert "Traceback" not in proc.stderr
    left = sorted(os.listdir(output))
    if broken != "killed":
        assert left == [".bundlegen.lock"] or left == [], left
    # the next run, with sort, sweeps what is left and publishes
    result = json.loads(gitbridge("bundlegen", "--repo", bare, "--output",
                                  output, "--base-url",
                                  "https://cdn.example.com/b",
                                  "--json").stdout)
    assert sorted(n for n in os.listdir(output)
                  if not n.startswith(".bundlegen.lock")) == sorted(
        ["bundle-list", "bundles.json", result["bundle"]["file"]]
        + [p["file"] for p in result["bundle"]["parts"]])
