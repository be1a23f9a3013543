"""Bundles, clones and the wire: core Mercurial beside wirezstd and
bundlegen, on one repository, in one run.

    vcsperf bench wirezstd /path/to/repo [--json out.json]

Measured, each with core first:

- bundles: size and build time of core ``gzip-v2``, core ``zstd-v2`` at its
  default level and at level 19 with 2 threads, ours (``zstd-v2`` at level
  19 with 2 threads and long-distance matching, which a stock hg applies),
  core's stream bundle, and ``hg bundlegen`` building zstd-max, gzip and
  stream at once;
- clones over HTTP on 127.0.0.1 by a stock hg: from each bundle (served by
  a plain file server, offered by ``hg serve``), against ``clone --pull``
  and ``clone --stream`` without bundles;
- the wire: bytes received and server CPU for a full ``clone --pull`` and
  for a pull of the last 100 changesets, core zstd against wirezstd.

The wire's pulls are ``harness.measure``'s, which ``vcsperf check`` takes
too.
"""

import os
import shutil
import sys
import time

from vcsperf.bench import benchcli
from vcsperf.harness import measure, servers, tools

#: zstd-max's level, and core's high-level zstd bundle beside it.
MAX_LEVEL = 19
TARGETS = (
    ("ours vs core gzip-v2 bytes", "vs_gzip", "<=", 0.55),
    ("ours vs core zstd max-level bytes", "vs_zstd_max", "<=", 0.85),
    ("all formats vs slowest alone, time", "generate_all", "<=", 1.3),
    ("full pull bytes, ours vs core zstd", "pull_bytes", "<=", 0.9),
    ("full pull server CPU, ours vs core", "pull_cpu", "<=", 1.2),
)


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _bundles(level):
    """(name, bundle type, extra config, with our extensions) of each
    bundle built alone."""
    high = ("experimental.bundlecomplevel.zstd=%d" % level,
            "experimental.bundlecompthreads.zstd=2")
    return (
        ("core gzip-v2", "gzip-v2", (), False),
        ("core zstd-v2", "zstd-v2", (), False),
        ("core zstd-v2 L%d T2" % level, "zstd-v2", high, False),
        ("ours zstd-max", "zstd-v2", high, True),
        ("core stream", "none-v2;stream=v2", (), False),
    )


def measure_bundles(repo, work, core, ours, level):
    results = {}
    for name, spec, config, extended in _bundles(level):
        path = os.path.join(work, name.replace(" ", "_") + ".hg")
        args = ["-R", repo, "bundle", "-q", "-a", "-t", spec, path]
        for item in config:
            args += ["--config", item]
        seconds = _timed(lambda: tools.hg(args, ours if extended else core))
        results[name] = {"bytes": os.path.getsize(path),
                         "seconds": seconds, "path": path}
    out = os.path.join(work, "bundlegen-out")
    seconds = _timed(lambda: tools.hg([
        "-R", repo, "bundlegen", "--output", out, "--base-url",
        "http://127.0.0.1/", "--config", "bundlegen.zstd-threads=2",
        "--config", "bundlegen.zstd-level=%d" % level], ours))
    results["bundlegen all three"] = {
        "bytes": sum(os.path.getsize(os.path.join(out, n))
                     for n in os.listdir(out) if n.endswith(".hg")),
        "seconds": seconds}
    return results


def measure_clones(repo, work, core, bundles, level):
    """Clone times by a stock hg over HTTP, from each bundle and without."""
    results = {}
    manifest = os.path.join(repo, ".hg", "clonebundles.manifest")
    with servers.FileServer(work) as files:
        for name in ("core gzip-v2", "core zstd-v2 L%d T2" % level,
                     "ours zstd-max", "core stream"):
            with open(manifest, "w") as fh:
                fh.write("%s%s BUNDLESPEC=%s\n" % (
                    files.url, os.path.basename(bundles[name]["path"]),
                    tools.hg(["debugbundle", "--spec", bundles[name]["path"]],
                             core).strip()))
            stream = ("--stream",) if "stream" in name else ()
            dest = os.path.join(work, "clone")
            with servers.HgServer(core, repo, "--config",
                                  "extensions.clonebundles=") as server:
                seconds = _timed(lambda: tools.hg(
                    ["clone", "-U", *stream, server.url, dest], core))
            out = tools.hg(["verify", "-q", "-R", dest], core)
            shutil.rmtree(dest, ignore_errors=True)
            results["from " + name] = {"seconds": seconds,
                                       "verify": out == ""}
        os.unlink(manifest)
    for name, extra in (("clone --pull", "--pull"),
                        ("clone --stream", "--stream")):
        dest = os.path.join(work, "clone")
        with servers.HgServer(core, repo) as server:
            seconds = _timed(lambda: tools.hg(
                ["clone", "-U", extra, "--config", "ui.clonebundles=false",
                 server.url, dest], core))
        shutil.rmtree(dest, ignore_errors=True)
        results[name] = {"seconds": seconds}
    return results


def ratios(bundles, wire, level):
    slowest = max(bundles[name]["seconds"] for name in
                  ("ours zstd-max", "core gzip-v2", "core stream"))
    ours = bundles["ours zstd-max"]["bytes"]
    return {
        "vs_gzip": ours / bundles["core gzip-v2"]["bytes"],
        "vs_zstd_max": ours / bundles["core zstd-v2 L%d T2" % level]["bytes"],
        "generate_all": bundles["bundlegen all three"]["seconds"] / slowest,
        "pull_bytes": wire["full pull, wirezstd"]["bytes"]
        / wire["full pull, core zstd"]["bytes"],
        "pull_cpu": wire["full pull, wirezstd"]["server_cpu"]
        / wire["full pull, core zstd"]["server_cpu"],
        "pull100_bytes": wire["pull of last 100, wirezstd"]["bytes"]
        / wire["pull of last 100, core zstd"]["bytes"],
    }


def format_report(source, results, table_ratios):
    lines = ["repository: %s" % source, "",
             "%-24s %12s %8s %10s" % ("bundle", "bytes", "vs gzip",
                                      "build s")]
    gzip = results["bundles"]["core gzip-v2"]["bytes"]
    for name, r in results["bundles"].items():
        lines.append("%-24s %12d %8.3f %10.1f" % (
            name, r["bytes"], r["bytes"] / gzip, r["seconds"]))
    lines += ["", "%-28s %8s" % ("clone by stock hg, HTTP", "seconds")]
    for name, r in results["clones"].items():
        lines.append("%-28s %8.1f" % (name, r["seconds"]))
    lines += ["", "%-32s %12s %10s" % ("wire", "bytes", "server cpu")]
    for name, r in results["wire"].items():
        lines.append("%-32s %12d %10.2f" % (name, r["bytes"],
                                            r["server_cpu"]))
    lines.append("")
    lines += benchcli.target_lines(TARGETS, table_ratios)
    lines.append("%-38s %6.3f" % ("pull of last 100, bytes ours vs core",
                                  table_ratios["pull100_bytes"]))
    return "\n".join(lines)


def run(source, workdir, level=MAX_LEVEL):
    """Measure on a hardlinked clone of ``source`` under ``workdir``, with
    zstd-max and core's high-level zstd at ``level``; returns
    ``(results, ratios)``."""
    hgrc = os.path.join(workdir, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\nwirezstd =\nbundlegen =\nclonebundles =\n")
    ours = tools.isolated_env(workdir, hgrc)
    # Core is measured with no extension loaded at all.
    core = tools.isolated_env(workdir)
    repo = os.path.join(workdir, "repo")
    tools.hg(["clone", "-q", "-U", os.path.abspath(source), repo], core)
    bundles = measure_bundles(repo, workdir, core, ours, level)
    results = {
        "bundles": bundles,
        "clones": measure_clones(repo, workdir, core, bundles, level),
        "wire": measure.measure_wire(repo, workdir, core, ours),
    }
    for r in bundles.values():
        r.pop("path", None)
    return results, ratios(bundles, results["wire"], level)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("level", dict(type=int, default=MAX_LEVEL,
                       help="zstd-max's level, and core's high-level zstd")),
    ], argv)
