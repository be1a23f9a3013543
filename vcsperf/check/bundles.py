"""The ``bundles`` feature of ``vcsperf check``: clone bundles built by
``hg bundlegen``, served and cloned from by a stock hg, each clone
verified, beside the wire's pull of everything by core."""

import concurrent.futures
import json
import os
import shutil
import time

from vcsperf.check.outcome import Failed, command_failure
from vcsperf.check.wire import PULL_SECONDS
from vcsperf.harness import servers, tools


def _node_set(check, repo, env, revset="heads(all())"):
    return set(check.hg(["log", "-R", repo, "-r", revset, "-T",
                         "{node}\n"], env).split())


def bundles(check, work):
    core = check.hg_env()
    ours = check.hg_env(["bundlegen", "clonebundles"])
    served = check.hg_env(["clonebundles"])
    formats = ["zstd-max", "gzip", "stream"]
    out = os.path.join(work, "bundles")
    manifest = os.path.join(check.base, ".hg", "clonebundles.manifest")
    heads = _node_set(check, check.base, core)
    try:
        with servers.FileServer(work) as files:
            with check.step("hg bundlegen %s" % ", ".join(formats)):
                check.hg(["-R", check.base, "bundlegen", "--output", out,
                          "--base-url", files.url + "bundles/",
                          "--config", "bundlegen.formats=%s"
                          % ",".join(formats)], ours)
            with open(os.path.join(out, "bundles.json")) as fh:
                built = {b["format"]: b for b in json.load(fh)["bundles"]}
            with open(manifest) as fh:
                by_url = {line.split()[0]: line for line in fh
                          if line.strip()}
            lines = {fmt: by_url[bundle["url"]]
                     for fmt, bundle in built.items()}
            # core's bundle of the same changesets
            with check.step("core zstd-v2 bundle"):
                path = os.path.join(work, "core-zstd.hg")
                check.hg(["-R", check.base, "bundle", "-q", "-a", "-t",
                          "zstd-v2", path], core)
                check.compare("bundle bytes, zstd-max",
                              os.path.getsize(path),
                              built["zstd-max"]["size"], "bytes",
                              "lower", "core zstd-v2")
            check.compare("bundle bytes, zstd-max", built["gzip"]["size"],
                          built["zstd-max"]["size"], "bytes", "lower",
                          "core gzip-v2")
            clones = {}
            for fmt in formats:
                with open(manifest, "w") as fh:
                    fh.write(lines[fmt])
                with check.step("stock hg clones from %s over HTTP" % fmt):
                    clones[fmt] = _clone(check, work, core, served,
                                         ["--stream"] if fmt == "stream"
                                         else [], fmt, expect_bundle=True)
            os.unlink(manifest)
            # The wire feature's full pull by core is this clone: it is
            # not done twice, unless that feature failed before it.
            plain = check.fact_of(PULL_SECONDS)
            if plain is None:
                with check.step("plain clone --pull over HTTP"):
                    plain = _clone(check, work, core, core, ["--pull"],
                                   "pull")
    finally:
        if os.path.exists(manifest):
            os.unlink(manifest)
    dests = sorted(name for name in os.listdir(work)
                   if name.startswith("clone-"))
    with check.step("hg verify the %d clones, side by side" % len(dests)):
        # Nothing is timed here: the clones are verified on every core.
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            for done in [pool.submit(_verify, check, core,
                                     os.path.join(work, dest), heads)
                         for dest in dests]:
                done.result()
    for fmt in formats:
        check.compare("clone seconds from %s" % fmt, plain, clones[fmt],
                      "seconds", "lower", "core pull of everything")
    check.fact("bundles", {fmt: {"bytes": b["size"], "seconds": b["seconds"]}
                           for fmt, b in built.items()})
    check.fact("clones verified", len(clones))


def _clone(check, work, client, server_env, options, name,
           expect_bundle=False):
    """Seconds a stock hg takes to clone the copy over HTTP, into
    ``clone-NAME`` in ``work``, which ``_verify`` then checks."""
    dest = os.path.join(work, "clone-" + name)
    with servers.HgServer(server_env, check.base) as server:
        start = time.perf_counter()
        out = check.hg(["clone", "-U", *options, server.url, dest], client)
        seconds = time.perf_counter() - start
    if expect_bundle and "applying clone bundle" not in out:
        raise Failed("the clone did not use the clone bundle:\n%s"
                     % out.strip())
    return seconds


def _verify(check, env, dest, heads):
    """Check that the clone ``dest`` passes ``hg verify`` and holds the
    copy's heads; remove it."""
    try:
        try:
            check.hg(["verify", "-q", "-R", dest], env)
        except tools.CommandError as err:
            raise Failed("hg verify failed on a clone: %s"
                         % command_failure(err))
        if _node_set(check, dest, env) != heads:
            raise Failed("a clone does not hold the repository's heads")
    finally:
        shutil.rmtree(dest, ignore_errors=True)
