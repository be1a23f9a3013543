"""What the repository benchmarks in ``contrib/bench/`` share: their
command line, and the lines that set ratios against their targets."""

import argparse
import json
import shutil
import tempfile


def target_lines(targets, ratios, width=38):
    """One line per ``(label, key, op, target)``: the ratio, the target and
    whether it is met."""
    lines = []
    for label, key, op, target in targets:
        value = ratios[key]
        met = value <= target if op == "<=" else value >= target
        lines.append("%-*s %6.3f  target %s %.2f  %s"
                     % (width, label, value, op, target,
                        "met" if met else "MISSED"))
    return lines


def main(doc, run, format_report, options=()):
    """Run ``run(repo, workdir, **options)`` and print its report.

    ``options`` are ``(name, argparse keywords)`` pairs: each becomes a
    ``--name`` flag whose value is passed to ``run`` by keyword.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--workdir", help="where copies, bundles and clones "
                        "go (default: a temporary directory, removed "
                        "afterwards)")
    for name, keywords in options:
        parser.add_argument("--" + name, **keywords)
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="vcsperf-bench-")
    try:
        results, ratios = run(args.repo, work, **{
            name: getattr(args, name) for name, _ in options})
        print(format_report(args.repo, results, ratios))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"repo": args.repo, "results": results,
                           "ratios": ratios}, fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
