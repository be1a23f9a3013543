"""Clone bundles on object storage: hg bundlegen and gitbridge bundlegen
publishing to a real S3-compatible server, and the clones they serve.

    vcsperf bench bundlegen HG_REPO [--git GIT_REPO] [--json out.json]

On a copy of each repository, with versitygw on 127.0.0.1 holding two
"regional" buckets (see ``vcsperf.harness.objectstore``):

- hg: a full generation (zstd-max, gzip, stream to both buckets), the
  bytes uploaded, a refresh that finds nothing to do (best of 3), and the
  clone time of a stock hg that prefers one region (``ui.clonebundleprefers
  = ec2region=eu-central-1``) from that region's bundle (checked in the
  server's access log), against ``clone --pull`` without bundles;
- Git: a full generation of ``gitbridge bundlegen``, its bytes, a no-op
  refresh, and ``git clone --bundle-uri`` of the bucket's bundle list
  against a plain ``git clone``, both from ``git http-backend``.
"""

import os
import shutil
import sys
import time

from vcsperf.bench import benchcli
from vcsperf.harness import objectstore, servers, tools

TARGETS = (
    ("hg no-op refresh, seconds", "hg_noop_seconds", "<=", 1.0),
    ("git no-op refresh, seconds", "git_noop_seconds", "<=", 1.0),
    ("hg clone, region bundle vs --pull", "hg_clone", "<=", 1.0),
    ("git clone, bundle-uri vs plain", "git_clone", "<=", 0.5),
)
REGIONS = (("usw2", "us-west-2"), ("euc1", "eu-central-1"))


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _best_of(count, fn):
    return min(_timed(fn) for _ in range(count))


def bucket_bytes(server, bucket):
    """The bytes of every object in ``bucket``."""
    pages = server.client().get_paginator("list_objects_v2").paginate(
        Bucket=bucket)
    return sum(item["Size"] for page in pages
               for item in page.get("Contents", ()))


def measure_hg(source, work, server, core):
    repo = os.path.join(work, "hg-repo")
    tools.hg(["clone", "-q", "-U", os.path.abspath(source), repo], core)
    lines = ["[extensions]", "bundlegen =", "clonebundles =", "wirezstd =",
             "[bundlegen]", "output = %s" % os.path.join(work, "hg-out"),
             "formats = zstd-max, gzip, stream", "zstd-threads = 2",
             "[bundlegen-destinations]"]
    for name, region in REGIONS:
        server.make_bucket("hg-" + name)
        lines += ["%s.url = s3://hg-%s/repo" % (name, name),
                  "%s.region = %s" % (name, objectstore.REGION),
                  "%s.endpoint = %s" % (name, server.url.rstrip("/")),
                  "%s.attributes = ec2region=%s" % (name, region)]
    with open(os.path.join(repo, ".hg", "hgrc"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    ours = dict(core, **server.environ())
    full = _timed(lambda: tools.hg(["-R", repo, "bundlegen"], ours))
    noop = _best_of(3, lambda: tools.hg(["-R", repo, "bundlegen"], ours))
    uploaded = sum(bucket_bytes(server, "hg-" + name)
                   for name, _ in REGIONS)
    results = {"full generation": {"seconds": full, "bytes": uploaded},
               "no-op refresh": {"seconds": noop}}
    dest = os.path.join(work, "hg-clone")
    with servers.HgServer(core, repo, "--config",
                          "extensions.clonebundles=") as hgserver:
        seconds = _timed(lambda: tools.hg(
            ["clone", "-U", "--config", "ui.clonebundles=false", "--pull",
             hgserver.url, dest], core))
        shutil.rmtree(dest)
        results["clone --pull"] = {"seconds": seconds}
        before = len(server.gets()), len(server.gets("hg-euc1"))
        seconds = _timed(lambda: tools.hg(
            ["clone", "-U", "--config",
             "ui.clonebundleprefers=ec2region=eu-central-1", hgserver.url,
             dest], core))
        fetched = (len(server.gets()) - before[0],
                   len(server.gets("hg-euc1")) - before[1])
    verified = tools.hg(["verify", "-q", "-R", dest], core) == ""
    shutil.rmtree(dest)
    results["clone, region bundle"] = {
        "seconds": seconds, "verify": verified,
        # one download, from the preferred region's bucket
        "from_region": fetched == (1, 1)}
    return results


def measure_git(source, work, server, env):
    bare = os.path.join(work, "git-served", "repo.git")
    tools.run(["git", "clone", "-q", "--mirror", os.path.abspath(source),
               bare], env)
    server.make_bucket("git-usw2")
    for key, value in (
            ("bundlegen.output", os.path.join(work, "git-out")),
            ("bundlegen.usw2.url", "s3://git-usw2/repo"),
            ("bundlegen.usw2.region", objectstore.REGION),
            ("bundlegen.usw2.endpoint", server.url.rstrip("/"))):
        tools.run(["git", "-C", bare, "config", key, value], env)
    ours = dict(env, **server.environ())
    gitbridge = [tools.executable("gitbridge"), "bundlegen", "--repo", bare]
    full = _timed(lambda: tools.run(gitbridge, ours))
    noop = _best_of(3, lambda: tools.run(gitbridge, ours))
    results = {"full generation": {"seconds": full, "bytes": bucket_bytes(
                   server, "git-usw2")},
               "no-op refresh": {"seconds": noop}}
    dest = os.path.join(work, "git-clone")
    with servers.GitServer(os.path.dirname(bare)) as gitserver:
        url = gitserver.url + "repo.git"
        results["plain clone"] = {"seconds": _timed(lambda: tools.run(
            ["git", "clone", "-q", "--no-checkout", url, dest], env))}
        shutil.rmtree(dest)
        results["bundle-uri clone"] = {"seconds": _timed(lambda: tools.run(
            ["git", "clone", "-q", "--no-checkout", "--bundle-uri="
             + server.url + "git-usw2/repo/bundle-list", url, dest], env))}
    shutil.rmtree(dest)
    return results


def format_report(source, results, table_ratios):
    lines = ["repository: %s" % source, ""]
    for side in ("hg", "git"):
        if side not in results:
            continue
        lines.append("%-32s %10s %14s" % (side, "seconds", "bytes"))
        for name, r in results[side].items():
            checks = ", ".join(key for key in ("verify", "from_region")
                               if r.get(key))
            lines.append("%-32s %10.2f %14s  %s" % (
                name, r["seconds"], r.get("bytes", ""), checks).rstrip())
        lines.append("")
    lines += benchcli.target_lines(
        [t for t in TARGETS if t[1] in table_ratios], table_ratios)
    return "\n".join(lines)


def run(source, workdir, git=None):
    """Measure on copies of ``source`` (hg) and ``git`` under
    ``workdir``; returns ``(results, ratios)``."""
    env = tools.isolated_env(workdir)
    with objectstore.ObjectServer(os.path.join(workdir, "s3")) as server:
        results = {"hg": measure_hg(source, workdir, server, env)}
        if git:
            results["git"] = measure_git(git, workdir, server, env)
    hg = results["hg"]
    ratios = {"hg_noop_seconds": hg["no-op refresh"]["seconds"],
              "hg_clone": hg["clone, region bundle"]["seconds"]
              / hg["clone --pull"]["seconds"]}
    if git:
        ratios["git_noop_seconds"] = results["git"]["no-op refresh"][
            "seconds"]
        ratios["git_clone"] = (results["git"]["bundle-uri clone"]["seconds"]
                               / results["git"]["plain clone"]["seconds"])
    return results, ratios


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("git", dict(help="the same history as a Git repository")),
    ], argv)
