"""Issue 32, items 2 and 3: the metrics file of ``hg bundlegen`` and
``gitbridge bundlegen`` (read with Prometheus' own parser, updated by
every run, the last failure kept across later runs) and ``--check-fresh``
against a plain HTTP host and the real S3 server: fresh, stale by age or
changesets behind, and bundles deleted behind its back."""

import json
import os
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from checkout_drivers import git_commit
from test_bundlegen import fileserver  # noqa: F401 (a fixture)
from vcsperf.harness import tools

EXT = ("--config", "extensions.bundlegen=",
       "--config", "extensions.clonebundles=")


def read_metrics(directory):
    """name -> [(labels, value)] of the one ``.prom`` file in
    ``directory``, parsed by prometheus_client; every family typed and
    documented."""
    [name] = [n for n in os.listdir(directory) if n.endswith(".prom")]
    with open(os.path.join(directory, name)) as fh:
        text = fh.read()
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("vcsperf_") and family.documentation
        assert family.type in ("gauge", "counter"), family
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels,
                                                      sample.value))
    return found


def value(found, name, **labels):
    [(_, number)] = [(got, v) for got, v in found[name]
                     if all(got.get(k) == w for k, w in labels.items())]
    return number


@pytest.fixture
def small_repo(hg, hgrepo):
    for number in range(3):
        (hgrepo / ("f%d" % number)).write_text("line %d\n" % number * 50)
        hg("-R", hgrepo, "commit", "-q", "-A", "-m", "c%d" % number)
    return hgrepo


def _served(repo, server):
    with open(repo / ".hg" / "hgrc", "a") as fh:
        fh.write("[bundlegen]\noutput = %s\nbase-url = %s\nformats = gzip, "
                 "zstd\n" % (server.root, server.url.rstrip("/")))


def _commit(hg, repo, message):
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m",
       message)


def test_hg_metrics_parse_update_and_keep_the_last_failure(
        small_repo, hg, fileserver, tmp_path):  # noqa: F811
    repo = small_repo
    _served(repo, fileserver)
    metrics = tmp_path / "textfile"
    metrics.mkdir()
    hg("-R", repo, "bundlegen", *EXT, "--metrics-dir", metrics)
    first = read_metrics(metrics)
    tip = hg("log", "-R", repo, "-r", "tip", "-T", "{node}")
    subject = {"vcs": "hg", "repository": str(repo)}
    assert value(first, "vcsperf_bundlegen_published_info", tip=tip,
                 **subject) == 1
    assert value(first, "vcsperf_bundlegen_runs_total",
                 outcome="success") == 1
    assert value(first, "vcsperf_bundlegen_published_behind_revisions") == 0
    sizes = {labels["format"]: v for labels, v in
             first["vcsperf_bundlegen_bundle_size_bytes"]}
    record = json.loads((tmp_path / "cdn" / "bundles.json").read_text())
    assert sizes == {b["format"]: b["size"] for b in record["bundles"]}
    assert "vcsperf_bundlegen_last_failure_timestamp_seconds" not in first

    # Not moved far enough: nothing built, the file says how far behind.
    _commit(hg, repo, "one")
    with open(repo / ".hg" / "hgrc", "a") as fh:
        fh.write("metrics-dir = %s\nmin-changesets = 5\n" % metrics)
    hg("-R", repo, "bundlegen", *EXT)
    second = read_metrics(metrics)
    assert value(second, "vcsperf_bundlegen_published_behind_revisions") == 1
    assert value(second, "vcsperf_bundlegen_runs_total",
                 outcome="success") == 2

    # A failing run: its time is recorded, the last success kept ...
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--force", "--config",
                   "bundlegen.upload-command=exit 3")
    assert proc.returncode == 255
    # one its configuration stops, too
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--config",
                   "bundlegen.formats=bogus")
    assert proc.returncode == 255
    third = read_metrics(metrics)
    failed = value(third, "vcsperf_bundlegen_last_failure_timestamp_seconds")
    assert value(third, "vcsperf_bundlegen_last_success_timestamp_seconds") \
        == value(second, "vcsperf_bundlegen_last_success_timestamp_seconds")
    assert value(third, "vcsperf_bundlegen_last_run_success") == 0
    assert value(third, "vcsperf_bundlegen_runs_total",
                 outcome="failure") == 2
    # ... and the failure survives the next success.
    hg("-R", repo, "bundlegen", *EXT, "--force")
    fourth = read_metrics(metrics)
    assert value(fourth,
                 "vcsperf_bundlegen_last_failure_timestamp_seconds") == failed
    assert value(fourth, "vcsperf_bundlegen_last_success_timestamp_seconds") \
        > failed
    assert value(fourth, "vcsperf_bundlegen_published_behind_revisions") == 0
    assert value(fourth, "vcsperf_bundlegen_runs_total",
                 outcome="success") == 3
    # the file and its lock: the temporary files are gone
    [prom] = [n for n in os.listdir(metrics) if n.endswith(".prom")]
    assert sorted(os.listdir(metrics)) == sorted([prom, ".%s.lock" % prom])


def _age_record(path, seconds):
    """Make the published generation ``seconds`` older, as if the timer
    had stopped running then."""
    record = json.loads(path.read_text())
    record["generations"][0]["generated"] -= seconds
    path.write_text(json.dumps(record))


def test_hg_check_fresh_on_a_plain_http_host(
        small_repo, hg, fileserver, tmp_path):  # noqa: F811
    repo = small_repo
    _served(repo, fileserver)
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert proc.returncode == 1
    assert proc.stdout.startswith("stale: no bundles are published")
    hg("-R", repo, "bundlegen", *EXT)
    out = hg("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert out.startswith("fresh: the bundles of tip ") and \
        "0 changesets behind" in out and "2 URLs answer" in out
    assert len(out.splitlines()) == 1

    # moved: fresh until older than --max-age, or more than --max-behind
    _commit(hg, repo, "one")
    _commit(hg, repo, "two")
    hg("-R", repo, "bundlegen", *EXT, "--check-fresh")
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh",
                   "--max-behind", "1")
    assert (proc.returncode, proc.stdout) == (
        1, "stale: the bundles of tip %s are 2 behind the repository "
        "(--max-behind 1)\n" % proc.stdout.split()[5])
    _age_record(tmp_path / "cdn" / "bundles.json", 3 * 86400)
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert proc.returncode == 1 and "3.0 days old and the repository " \
        "moved 2 past them (--max-age 172800)" in proc.stdout
    assert hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh",
                   "--max-age", str(4 * 86400)).returncode == 0

    # a bundle the host no longer serves
    hg("-R", repo, "bundlegen", *EXT)
    manifest = (repo / ".hg" / "clonebundles.manifest").read_text()
    [gone] = [line.split()[0].rsplit("/", 1)[1]
              for line in manifest.splitlines() if ".zstd." in line]
    fileserver.missing.add(gone)
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert proc.returncode == 1
    assert proc.stdout == "stale: %s%s answers HTTP 404\n" % (
        fileserver.url, gone)


def test_hg_check_fresh_against_the_s3_server(small_repo, hg, objectserver):
    from test_bundlegen_s3 import _configure
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    hg("-R", repo, "bundlegen", *EXT)
    out = hg("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert out.startswith("fresh: ") and "2 URLs answer" in out
    [key] = objectserver.keys("bundles-euc1")
    objectserver.client().delete_object(Bucket="bundles-euc1", Key=key)
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh")
    assert proc.returncode == 1
    assert proc.stdout == "stale: %sbundles-euc1/%s answers HTTP 404\n" % (
        objectserver.url, key)
    # a run puts it back; fresh again
    hg("-R", repo, "bundlegen", *EXT)
    assert hg.proc("-R", repo, "bundlegen", *EXT,
                   "--check-fresh").returncode == 0


@pytest.fixture
def origin(git, tmp_path):
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", work)
    for number in range(3):
        (work / "f").write_text("%d\n" % number)
        git("-C", work, "add", "f")
        git("-C", work, "commit", "-q", "-m", "c%d" % number)
    bare = tmp_path / "origin.git"
    git("clone", "-q", "--bare", work, bare)
    return bare, work


def test_git_metrics_and_check_fresh(origin, git, gitbridge, objectserver,
                                     tmp_path):
    bare, work = origin
    objectserver.make_bucket("git-bundles")
    metrics = tmp_path / "textfile"
    metrics.mkdir()
    for key, setting in [("output", tmp_path / "out"),
                         ("metrics-dir", metrics),
                         ("s3.url", "s3://git-bundles/repo"),
                         ("s3.endpoint", objectserver.url.rstrip("/"))]:
        git("-C", bare, "config", "bundlegen." + key, setting)
    gitbridge("bundlegen", "--repo", bare)
    first = read_metrics(metrics)
    subject = {"vcs": "git", "repository": str(bare)}
    head = git("-C", bare, "rev-parse", "main").strip()
    assert value(first, "vcsperf_bundlegen_published_info", tip=head,
                 **subject) == 1
    assert value(first, "vcsperf_bundlegen_upload_bytes",
                 destination="s3") == value(
        first, "vcsperf_bundlegen_bundle_size_bytes", format="full")
    out = gitbridge("bundlegen", "--repo", bare, "--check-fresh").stdout
    assert out.startswith("fresh: 1 bundles, 0 commits behind") and \
        "2 URLs answer" in out

    # two commits pushed, no run since
    (work / "f").write_text("new\n")
    git("-C", work, "commit", "-q", "-am", "new")
    git("-C", work, "commit", "-q", "--allow-empty", "-m", "newer")
    git("-C", work, "push", "-q", bare, "main")
    proc = gitbridge("bundlegen", "--repo", bare, "--check-fresh",
                     "--max-behind", "1", check=False)
    assert (proc.returncode, proc.stdout) == (
        1, "stale: the published bundles are 2 behind the repository "
        "(--max-behind 1)\n")
    # a run its settings stop is a failure in the file too
    git("-C", bare, "config", "bundlegen.keep", "x")
    assert gitbridge("bundlegen", "--repo", bare,
                     check=False).returncode == 255
    assert value(read_metrics(metrics), "vcsperf_bundlegen_runs_total",
                 outcome="failure") == 1
    git("-C", bare, "config", "--unset", "bundlegen.keep")
    gitbridge("bundlegen", "--repo", bare)
    second = read_metrics(metrics)
    assert value(second, "vcsperf_bundlegen_runs_total",
                 outcome="success") == 2
    assert value(second, "vcsperf_bundlegen_bundle_size_bytes",
                 format="incremental") > 0

    # a bundle deleted from the bucket
    [key] = [k for k in objectserver.keys("git-bundles")
             if ".incremental." in k]
    objectserver.client().delete_object(Bucket="git-bundles", Key=key)
    proc = gitbridge("bundlegen", "--repo", bare, "--check-fresh",
                     check=False)
    assert (proc.returncode, proc.stdout) == (
        1, "stale: %sgit-bundles/%s answers HTTP 404\n" % (objectserver.url,
                                                           key))

    # the branch rewound by a force push: the published tips are still in
    # the object store, on no branch; a run writes a full bundle again
    gitbridge("bundlegen", "--repo", bare)
    git("-C", bare, "update-ref", "refs/heads/main", head)
    proc = gitbridge("bundlegen", "--repo", bare, "--check-fresh",
                     check=False)
    assert (proc.returncode, proc.stdout) == (
        1, "stale: 2 published commits are on no branch or tag of the "
        "repository any more (rewound or deleted)\n")
    assert "full" in gitbridge("bundlegen", "--repo", bare).stdout
    assert gitbridge("bundlegen", "--repo", bare,
                     "--check-fresh").returncode == 0


LOCKED_RUNS = """
import sys
from vcsperf.core import metrics
for _ in range(int(sys.argv[2])):
    report = metrics.Report(sys.argv[1], "checkout", "https://h/r",
                            {"vcs": "git", "repository": "https://h/r"})
    report.set("step_duration_seconds", 1.5, "help", step="clone")
    report.finish("success")
"""


def test_runs_ending_together_all_count(tmp_path):
    """Processes that end their runs at the same moments (parallel CI
    tasks checking out one URL) each count: the read-back and the rename
    happen under the file's lock."""
    import subprocess
    import sys
    processes = [subprocess.Popen([sys.executable, "-c", LOCKED_RUNS,
                                   str(tmp_path), "25"])
                 for _ in range(6)]
    assert [p.wait(timeout=120) for p in processes] == [0] * 6
    found = read_metrics(tmp_path)
    assert value(found, "vcsperf_checkout_runs_total",
                 outcome="success") == 150



def test_bundlegen_metrics_of_a_non_utf8_repository_path(git, env, tmp_path):
    """Finding: ``gitbridge bundlegen --metrics-dir`` on a repository
    whose path is not UTF-8 (Latin-1 directory names exist) builds and
    publishes the bundle, then dies in a UnicodeEncodeError traceback
    writing the metrics file (the label is written with
    ``encoding="utf-8"``, and ``write_quietly`` catches only OSError):
    exit 1 for work that succeeded, no metrics file, so the freshness
    alert fires on a healthy repository."""
    top = os.fsencode(str(tmp_path))
    repo = os.path.join(top, b"d\xe9p\xf4t.git")
    git("init", "-q", "--bare", "-b", "main", os.fsdecode(repo))
    work = tmp_path / "work"
    git("clone", "-q", os.fsdecode(repo), work)
    git_commit(git, work, {"a.txt": "a\n"}, "one")
    out, metrics_dir = tmp_path / "out", tmp_path / "metrics"
    out.mkdir()
    metrics_dir.mkdir()
    proc = subprocess.run(
        [tools.executable("gitbridge"), "bundlegen", "--repo", repo,
         "--output", str(out), "--base-url", "https://cdn.example.com/b",
         "--metrics-dir", str(metrics_dir)],
        env=env, capture_output=True)
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    [prom] = [name for name in os.listdir(metrics_dir)
              if name.endswith(".prom")]
    text = (metrics_dir / prom).read_bytes()
    text.decode("utf-8")  # the text format is UTF-8
    assert b"vcsperf_bundlegen_last_run_success" in text


def test_bundlegen_metrics_count_runs_of_a_path_with_a_line_separator(
        git, env, tmp_path):
    """Finding: the previous metrics file is read back with
    ``str.splitlines()``, which also splits at U+2028, U+0085 and other
    characters the writer leaves unescaped in a label (valid UTF-8, one
    line to Prometheus): for a repository whose path holds one, every
    sample line is lost on reading, so ``runs_total`` restarts at 1 on
    every run (a counter that never grows: ``increase()`` says nothing
    ran) and the last failure's time is forgotten after a success."""
    repo = tmp_path / "a\u2028b.git"
    git("init", "-q", "--bare", "-b", "main", repo)
    work = tmp_path / "work"
    git("clone", "-q", repo, work)
    git_commit(git, work, {"a.txt": "a\n"}, "one")
    out, metrics_dir = tmp_path / "out", tmp_path / "metrics"
    out.mkdir()
    metrics_dir.mkdir()
    for _ in range(2):
        subprocess.run(
            [tools.executable("gitbridge"), "bundlegen", "--repo", str(repo),
             "--output", str(out), "--base-url", "https://cdn.example.com/b",
             "--metrics-dir", str(metrics_dir), "--force"],
            env=env, capture_output=True, check=True)
    [prom] = metrics_dir.glob("*.prom")
    [runs] = [line for line in prom.read_text().split("\n")
              if line.startswith("vcsperf_bundlegen_runs_total{")
              and 'outcome="success"' in line]
    assert runs.endswith(" 2"), runs


def test_hg_bundlegen_metrics_of_a_non_utf8_repository_path(
        hg, non_utf8_hgrepo, tmp_path):
    """The same finding on the hg side: ``hg bundlegen`` of a repository
    whose path is not UTF-8 publishes, then writes a valid UTF-8 metrics
    file (the undecodable bytes as ``\\xNN``) and exits 0, and the next
    run counts on from it."""
    repo = non_utf8_hgrepo
    out, metrics_dir = tmp_path / "out", tmp_path / "metrics"
    out.mkdir()
    metrics_dir.mkdir()
    for _ in range(2):
        proc = hg.proc("-R", repo, "bundlegen", *EXT, "--force",
                       "--metrics-dir", metrics_dir, "--config",
                       "bundlegen.output=%s" % out, "--config",
                       "bundlegen.base-url=https://cdn.example.com/b")
        assert "Traceback" not in proc.stderr
        assert proc.returncode == 0, proc.stderr[-500:]
    found = read_metrics(metrics_dir)
    assert value(found, "vcsperf_bundlegen_runs_total",
                 outcome="success") == 2
    [(labels, _)] = found["vcsperf_bundlegen_last_run_success"]
    assert labels["repository"].endswith("d\\xe9p\\xf4t")
