"""The ``wire`` feature of ``vcsperf check``: pulls of the whole history
and of its last 100 changesets by core zstd and by wirezstd, bytes
received and server CPU."""

from vcsperf.check.outcome import Failed
from vcsperf.harness import measure

#: The fact in which the full pull's time by core is kept: the bundles
#: feature compares its clone times with it.
PULL_SECONDS = "full pull seconds, core zstd"


def wire(check, work):
    core = check.hg_env()
    ours = check.hg_env(["wirezstd"])
    with check.step("pulls, core zstd and wirezstd"):
        results = measure.measure_wire(check.base, work, core, ours)
    check.fact(PULL_SECONDS, round(results["full pull, core zstd"]["seconds"],
                                   3))
    for label in ("full pull", "pull of last 100"):
        core_r, ours_r = (results["%s, %s" % (label, side)]
                          for side in ("core zstd", "wirezstd"))
        check.compare("%s, bytes received" % label, core_r["bytes"],
                      ours_r["bytes"], "bytes", "lower", "core zstd")
        check.compare("%s, server CPU" % label, core_r["server_cpu"],
                      ours_r["server_cpu"], "seconds", "lower", "core zstd")
        if ours_r["changesets"] != core_r["changesets"]:
            raise Failed("%s: wirezstd brought %d changesets, core %d"
                         % (label, ours_r["changesets"],
                            core_r["changesets"]))
    full = results["full pull, wirezstd"]
    if full["changesets"] != check.base_changesets:
        raise Failed("the full pull brought %d of %d changesets"
                     % (full["changesets"], check.base_changesets))
