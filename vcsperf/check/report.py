"""The report of ``vcsperf check``: built from the run (``build``), for
people (``format_feature`` as each feature ends, ``format_report`` at the
end), and the ``--json`` file's place checked before the run starts
(``check_output``)."""

import os

from vcsperf.check import (
    checkcmds,
    checkouts,
    estimates,
    features,
    resources,
)
from vcsperf.core import __version__, pooling
from vcsperf.core.errors import Abort


def amount(value, unit):
    """``value`` of ``unit`` for people: bytes as KiB to TiB, speeds in
    MB/s, seconds to the hundredth."""
    if unit == "bytes":
        return pooling.format_bytes(value)
    if unit == "bytes/s":
        return "%.1f MB/s" % (value / 1e6)
    if unit == "seconds":
        return "%.2f s" % value
    return "%d %s" % (value, unit)


def format_feature(feature):
    lines = ["%-14s %s  (%.1f s)%s" % (
        feature["name"], feature["status"].upper(), feature["seconds"],
        ": " + feature["error"] if feature["error"] else "")]
    for c in feature["comparisons"]:
        lines.append("    %-36s %-26s %12s  ours %12s  %7s" % (
            c["what"], c["core_label"], amount(c["core"], c["unit"]),
            amount(c["ours"], c["unit"]),
            "%.3fx" % c["ratio"] if c["ratio"] is not None else "-"))
    for name, value in feature["facts"].items():
        if not isinstance(value, (dict, list)):
            lines.append("    %s: %s" % (name, value))
    return "\n".join(lines)


def format_report(report):
    """The whole report for people: the summary, then steps and totals."""
    lines = ["", "%-14s %-8s %8s  %s" % ("feature", "result", "seconds",
                                          "headline (ours vs core)")]
    for feature in report["features"]:
        head = feature["comparisons"][:1]
        lines.append("%-14s %-8s %8.1f  %s" % (
            feature["name"], feature["status"], feature["seconds"],
            "%s: %.3fx %s" % (head[0]["what"], head[0]["ratio"],
                              head[0]["core_label"])
            if head and head[0]["ratio"] is not None else
            feature["error"] or ""))
    if "sample" in report:
        lines += ["", "sample: the newest %d changesets (tip %s); replay "
                  "with --quick --slice %d" % (
                      report["sample"]["slice_changesets"],
                      report["tip"][:12],
                      report["sample"]["slice_changesets"])]
        held = report.get("slice")
        if held and held.get("narrowed"):
            lines.append(
                "  narrowed: %d files of the %d at the tip (the %d its "
                "changesets touch, up to %d, and a sample of the rest)" % (
                    held["files"], report["files_at_tip"],
                    held["files_touched"], checkcmds.TOUCHED_FILES))
    lines += ["", "steps (wall seconds):"]
    for step in report["steps"]:
        lines.append("  %-14s %-44s %8.1f" % (step["feature"], step["step"],
                                              step["seconds"]))
    memory = report["peak_memory"]
    scratch = report["scratch"]
    lines += [
        "",
        "peak memory: %s in the largest process (during %s), %s in the "
        "runner" % (pooling.format_bytes(memory["largest_process_bytes"]),
                    memory["reached_in"],
                    pooling.format_bytes(memory["runner_bytes"])),
        "disk: the scratch directory took at most %s (during %s) against "
        "%s estimated (%.2fx; %s asked free, with a margin)" % (
            pooling.format_bytes(scratch["peak_used_bytes"]),
            scratch["peak_reached_in"],
            pooling.format_bytes(scratch["estimated_bytes"]),
            scratch["actual_vs_estimate"],
            pooling.format_bytes(scratch.get("needed_bytes")
                                 or scratch["estimated_bytes"])),
        "time: %.1f s against %.1f s estimated (%.2fx)" % (
            report["seconds"], report["estimate"]["seconds"],
            report["estimate"]["actual_vs_estimate"] or 0),
        "original repository unchanged: %s%s" % (
            "yes" if report["original_unchanged"] else
            "NO: " + ", ".join(report["original_changed_files"]),
            " (hg rewrote its caches meanwhile: %s)"
            % ", ".join(report["original_caches_rewritten"])
            if report["original_caches_rewritten"] else ""),
        "total: %.1f s for %d changesets and %d files at the tip (%.2f min "
        "per 10k changesets, %.2f per 100k files): %s"
        % (report["seconds"], report["changesets"], report["files_at_tip"],
           report["minutes_per_10k_changesets"],
           report.get("minutes_per_100k_files") or 0,
           "PASSED" if report["passed"] else "FAILED"),
    ]
    return "\n".join(lines)


def check_output(path, option="--json"):
    """Refuse, before any work, a path (``option``'s) the report could not
    be written to at the end: its directory must exist and be writable,
    and it must not be a directory."""
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise Abort("cannot write the report to %s: no directory %s"
                    % (path, directory), hint="give %s a file in a "
                    "directory that exists" % option)
    if os.path.isdir(path):
        raise Abort("cannot write the report to %s: it is a directory"
                    % path, hint="give %s a file name" % option)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Abort("cannot write the report to %s: %s is not writable"
                    % (path, directory), hint="give %s a file in a "
                    "directory you can write to" % option)


def _seconds_by_part(steps):
    parts = {}
    for step in steps:
        parts[step["feature"]] = round(
            parts.get(step["feature"], 0) + step["seconds"], 1)
    return parts


def _scratch(check, estimate):
    """The report's ``scratch``: the disk the run took and its
    estimate."""
    disk, need = check.disk, estimate["disk_needed"]
    beside = {}
    for feature in features.FEATURES:
        if feature.beside:
            beside[feature.name] = feature.beside
            beside[feature.beside] = feature.name
    # the peak estimated, without the margin the free disk is asked for
    peak = need - estimates.DISK_MARGIN
    return {"path": check.scratch, "kept": check.keep,
            "estimated_bytes": peak, "needed_bytes": need,
            "free_bytes": check.state["free"],
            "peak_used_bytes": disk.peak,
            "peak_reached_in": "%s: %s" % disk.peak_where
            if disk.peak_where else None,
            "peak_used_bytes_by_feature": disk.peaks,
            # each with the copy, which stays all along, and with the
            # feature beside it, whose disk its peak counts too
            "estimated_bytes_by_feature": {
                name: estimate["disk"]["copy"] + (
                    value + estimate["disk"].get(beside.get(name), 0)
                    if name != "copy" else 0)
                for name, value in estimate["disk"].items()},
            "actual_vs_estimate": round(disk.peak / peak, 3)}


def build(check, changed, caches, seconds):
    """The report (a dict) of ``check``, which ran for ``seconds``;
    ``changed`` and ``caches``, the files of the original that changed
    meanwhile (``copying.original_changes``)."""
    info, estimate = check.info, check.state["estimate"]
    total = sum(estimate["seconds"].values())
    report = dict(info)
    report.update({
        # what orders the reports of one repository on the page (a
        # resumed run's state from an older release has no start)
        "started": check.state.get("started"),
        "vcsperf_version": __version__,
        "scratch": _scratch(check, estimate),
        "estimate": {
            "seconds": round(total, 1),
            "seconds_by_part": estimate["seconds"],
            "actual_seconds_by_part": _seconds_by_part(check.steps),
            "actual_vs_estimate": round(seconds / total, 3)
            if total else None,
            # what the estimate was scaled by for other processes' work
            # (None: a run begun before it was)
            "busy": estimate.get("busy")},
        "features": check.features,
        "steps": check.steps,
        "peak_memory": {
            "runner_bytes": resources.peak_runner_rss(),
            "largest_process_bytes": max(
                resources.peak_child_rss(),
                check.peak_step[1] if check.peak_step else 0),
            "reached_in": check.peak_step[0] if check.peak_step
            else None},
        "original_unchanged": not changed,
        "original_changed_files": changed[:20],
        "original_caches_rewritten": caches[:20],
        "seconds": round(seconds, 1),
        "minutes_per_10k_changesets": round(
            seconds / 60 / info["changesets"] * 10000, 2),
        "minutes_per_100k_files": round(
            seconds / 60 / info["files_at_tip"] * 100000, 2)
        if info["files_at_tip"] else None,
    })
    if check.quick:
        report["sample"] = {
            "tip": info["tip"],
            "slice_changesets": check.base_changesets,
            "checkout_revisions": check.fact_of(checkouts.REVISIONS)}
    report["passed"] = not changed and all(
        f["status"] != "failed" for f in check.features)
    return report
