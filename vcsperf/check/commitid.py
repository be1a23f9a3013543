"""The ``commit IDs`` feature of ``vcsperf check``: a linear slice of the
history gets IDs, is rebased and folded, and the mapping by ID is checked
against core's obsolescence markers."""

import os
import time

from vcsperf.check import checkcmds
from vcsperf.check.outcome import Failed
from vcsperf.core.commitid import map_series, read_series, with_predecessors
from vcsperf.harness import tools


def rewritten(quick):
    """Changesets the feature rewrites, at most."""
    return 12 if quick else 100


def _linear_slice(check, env, length):
    """Nodes ``(first, last)`` of the newest linear run of history (no
    merges, each changeset the only child of the one before, each touching
    files, none of them nor the parent of the first with
    subrepositories, which a rebase reaches for), at most ``length``
    long."""
    newest = "last(all(), 5000)"
    out = check.hg(["log", "-R", check.base, "-r", newest,
                    "-T", "{rev} {p1rev} {p2rev} {files|count} {node}\n"],
                   env)
    rows = [line.split() for line in out.splitlines()]
    rows = [tuple(map(int, row[:4])) + (row[4],) for row in rows]
    with_subrepos = set()
    # Only a history that ever had a .hgsub has its manifests read.
    if check.hg(["log", "-R", check.base, "-r", "file('path:.hgsub')",
                 "-l", "1", "-T", "x"], env):
        with_subrepos = set(map(int, check.hg([
            "log", "-R", check.base, "-r", "(%s + parents(%s)) and "
            "contains('path:.hgsub')" % (newest, newest), "-T",
            "{rev}\n"], env).split()))
    children = {}
    for rev, p1, p2, _, _ in rows:
        for parent in (p1, p2):
            children[parent] = children.get(parent, 0) + 1
    best = None
    run = []
    for rev, p1, p2, files, node in rows:
        linear = (p2 == -1 and files > 0 and p1 != -1
                  and not {rev, p1} & with_subrepos)
        if linear and run and p1 == run[-1][0] and children[p1] == 1:
            run.append((rev, node))
        else:
            run = [(rev, node)] if linear else []
        if run and (best is None or len(run) >= min(len(best), length)):
            best = run[-length:]
    if not best or len(best) < 3:
        return None
    return best[0][1], best[-1][1], len(best)


def commitid(check, work):
    core = check.hg_env()
    ours = check.hg_env(
        ["commitid", "rebase", "histedit"],
        "[experimental]\nevolution = all\n"
        "[rebase]\nexperimental.inmemory = yes\n"
        "[ui]\neditor = true\n")
    length = rewritten(check.quick)
    found = _linear_slice(check, core, length)
    if found is None:
        return ("the history has no linear run of 3 changesets without "
                "subrepositories to rewrite")
    # Nodes, not revision numbers: the clone has no hidden changesets.
    first, last, count = found
    repo = os.path.join(work, "repo")
    with check.step("clone, give %d changesets commit IDs" % count,
                    timed=False):
        check.hg(["clone", "-q", "-U", check.base, repo], core)
        check.hg(["phase", "--draft", "--force", "-r", "%s::" % first],
                 ours, cwd=repo)
        try:
            check.hg(["commitid-add", "-r", "%s::%s" % (first, last)], ours,
                     cwd=repo)
        except tools.CommandError as err:
            # Exit 1: every changeset has its ID already.
            if err.returncode != 1 or "no changeset needs a commit ID" \
                    not in err.stdout:
                raise
    with_ids = "successors(%s::%s) - obsolete()" % (first, last)
    old = read_series(repo, with_ids, hidden=True, env=ours)
    if any(c.commit_id is None for c in old):
        raise Failed("commitid-add left %d changesets without an ID"
                     % sum(c.commit_id is None for c in old))
    with check.step("rebase onto a new base", timed=False):
        base = check.hg(["--config", "extensions.checkcmds=%s"
                         % checkcmds.__file__, "check-newbase",
                         "p1(%s)" % old[0].node], ours, cwd=repo).strip()
        check.hg(["rebase", "-q", "-r", "%s::%s" % (old[0].node,
                                                   old[-1].node),
                  "-d", base], ours, cwd=repo)
    above = "descendants(%s) and not %s" % (base, base)
    rebased = check.hg(["log", "-R", repo, "-r", above, "-T", "{node}\n"],
                       ours).split()
    plan = os.path.join(work, "plan")
    folds = 0
    with open(plan, "w") as fh:
        for index, node in enumerate(rebased):
            action = "fold" if index % 3 == 2 else "pick"
            folds += action == "fold"
            fh.write("%s %s\n" % (action, node))
    with check.step("update, histedit: fold every third",
                    timed=False):
        # histedit works in the working directory, from its parent down.
        check.hg(["update", "-q", "-r", rebased[-1]], ours, cwd=repo)
        check.hg(["histedit", "-q", "--commands", plan, rebased[0]], ours,
                 cwd=repo)
    with check.step("map by commit ID"):
        start = time.perf_counter()
        new = read_series(repo, above, env=ours)
        mapping = map_series(old, new)
        id_seconds = time.perf_counter() - start
        start = time.perf_counter()
        truth = with_predecessors(repo, old, new, env=ours)
        marker_seconds = time.perf_counter() - start
    by_id = [m for m in mapping.matches if m.how == "commit-id"]
    agree = [m for m, t in zip(mapping.matches, truth)
             if m.old is not None and m.old.node in t.predecessors]
    folded = [o for o in mapping.unmatched_old
              if any(o.node in t.predecessors for t in truth)]
    check.compare("changesets mapped", len(new), len(by_id), "changesets",
                  "higher", "core obsolescence markers")
    check.compare("mapping seconds", marker_seconds, id_seconds, "seconds",
                  "lower", "core obsolescence markers")
    check.fact("slice", "%d changesets, %s to %s"
               % (len(old), first[:12], last[:12]))
    check.fact("folded", folds)
    problems = []
    if len(new) != len(old) - folds:
        problems.append("%d changesets after folding %d of %d"
                        % (len(new), folds, len(old)))
    if len(agree) != len(new):
        problems.append("%d of %d mapped as the obsolescence markers say"
                        % (len(agree), len(new)))
    if len(folded) != folds or len(mapping.unmatched_old) != folds:
        problems.append("%d folded changesets accounted for, of %d"
                        % (len(folded), folds))
    if mapping.conflicts or mapping.duplicate_ids:
        problems.append("%d conflicts, %d duplicate IDs" % (
            len(mapping.conflicts), len(mapping.duplicate_ids)))
    if problems:
        raise Failed("; ".join(problems))
