"""The ``dictionaries`` feature of ``vcsperf check``: a clone converted to
``zstd-dict`` the way zstdstore's help says, in one rewrite (dictionaries
trained on the clone as it is stored, then ``hg debugupgraderepo``), and
verified, every full text compared with the copy's."""

import json
import os

from vcsperf.check import checkcmds
from vcsperf.check.outcome import Failed, command_failure
from vcsperf.harness import measure, tools


def _fulltexts(check, repo, env):
    """{revlog: line of hg check-fulltexts} for ``repo``."""
    lines = {}
    total = [0]

    def on_line(line):
        record = json.loads(line)
        if "revlogs" in record:
            total[0] = record["revlogs"]
        else:
            lines[record["name"]] = record
            if len(lines) % 50 == 0 or len(lines) == total[0]:
                check.console.count(len(lines), total[0], "revlogs")
    check.hg(["--config", "extensions.checkcmds=%s" % checkcmds.__file__,
              "check-fulltexts"], env, cwd=repo,
             on_line=on_line)
    return lines


def _read_speeds(lines):
    """{class: bytes per second} of the full-text reads."""
    totals = {}
    for record in lines.values():
        size, seconds = totals.get(record["class"], (0, 0.0))
        totals[record["class"]] = (size + record["bytes"],
                                   seconds + record["seconds"])
    return {name: size / seconds for name, (size, seconds) in totals.items()
            if seconds}


def dictionaries(check, work):
    ours = check.hg_env(["zstdstore"])
    core = check.hg_env()
    repo = os.path.join(work, "zstd-dict")
    # Hardlinked, hidden changesets and all, as check-fulltexts reads
    # both: a clone would leave the hidden ones out.
    with check.step("hardlinked copy", timed=False):
        check.copy_base(repo)
    with check.step("train dictionaries", timed=False):
        check.hg(["zstd-train"], ours, cwd=repo)
    with check.step("convert to zstd-dict", timed=False):
        check.hg(["debugupgraderepo", "--run", "--no-backup", "-q",
                  "--config", "format.revlog-compression=zstd-dict"], ours,
                 cwd=repo)
    with check.step("hg verify", timed=False):
        try:
            check.hg(["verify", "-q"], ours, cwd=repo)
            verified = True
        except tools.CommandError as err:
            verified = command_failure(err)
    with check.step("read full texts, as stored"):
        before = _fulltexts(check, check.base, core)
    with check.step("read full texts, zstd-dict"):
        after = _fulltexts(check, repo, ours)
    engine = check.info["engine"]
    sizes = {"core": measure.store_bytes(check.base),
             "ours": measure.store_bytes(repo)}
    for name in ("changelog", "manifest", "filelog", "total"):
        check.compare("store bytes, %s" % name, sizes["core"][name],
                      sizes["ours"][name], "bytes", "lower", engine)
    speeds = {"core": _read_speeds(before), "ours": _read_speeds(after)}
    for name in ("changelog", "manifest", "filelog"):
        if name in speeds["core"] and name in speeds["ours"]:
            check.compare("full-text reads, %s" % name,
                          speeds["core"][name], speeds["ours"][name],
                          "bytes/s", "higher", engine)
    revisions = sum(r["revisions"] for r in before.values())
    check.fact("revlogs", len(before))
    check.fact("revisions compared", revisions)
    check.fact("dictionaries bytes", sizes["ours"]["dictionaries"])
    broken = [name for name, r in before.items() if r["unreadable"]]
    if broken:
        rev, message = before[broken[0]]["unreadable"][0]
        raise Failed("the repository itself is damaged: %d revlogs have "
                     "unreadable revisions, the first %s rev %d (%s)"
                     % (len(broken), broken[0], rev, message))
    differ = [name for name in before if name not in after
              or (after[name]["digest"], after[name]["revisions"])
              != (before[name]["digest"], before[name]["revisions"])]
    differ += [name for name in after if name not in before]
    if differ:
        raise Failed("%d revlogs read differently after recompression, "
                     "the first %s" % (len(differ), differ[0]))
    if verified is not True:
        raise Failed("hg verify failed on the zstd-dict copy: %s"
                     % verified)
    check.fact("identical", "%d revisions in %d revlogs"
               % (revisions, len(before)))
