"""Commit IDs for Git: the ``commit-msg`` hook's installer, IDs for an
existing branch in one rewrite, and mapping a series of commits onto a
previous one (Git or Mercurial) by ID.

- ``install_hook`` and ``uninstall_hook``: ``gitbridge install-hook``
  and ``gitbridge uninstall-hook``
- ``add_ids``: ``gitbridge commitid-add``
- ``gitbridge commitid-map``: ``map_ids`` of ``vcsperf.core.commitid``,
  which reads series from Git and Mercurial alike
- ``gitbridge commit-msg FILE`` runs the hook itself (the pre-commit
  framework's entry point).
"""

import argparse
import json
import os
import shlex
import sys

from dulwich.repo import Repo

from gitbridge import commitmsg, gitconfig
from vcsperf.core import commitid
from vcsperf.core.commitid import map_ids
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.process import CommandError, git, git_abort

#: Marks a hook file as ours, so reinstalling may replace it.
HOOK_MARK = "# commit-msg hook installed by `gitbridge install-hook`"
#: Where the hook that was there before ours goes; ours runs it first.
CHAINED = "commit-msg.chained"
# A shell script: it runs the chained hook with no Python at all, and it
# can say what to do when the Python it names is gone.
HOOK_TEMPLATE = """\
#!/bin/sh
{mark} (vcsperf):
# runs {chained}, the hook that was here before (if any), then gives
# the message a MozReview-Commit-ID line.  Either one failing aborts the
# commit.  `gitbridge uninstall-hook` puts the chained hook back.
python={python}
chained="$(dirname "$0")/{chained}"
if test -x "$chained"; then
    "$chained" "$@" || exit $?
fi
if test -x "$python"; then
    # -I: the installed gitbridge, never a gitbridge/ directory of the
    # working tree, whatever the committer's environment.  Exit 3: this
    # Python has no gitbridge (any longer).
    "$python" -I -c '
import sys
try:
    from gitbridge import commitmsg
except ImportError:
    sys.exit(3)
sys.exit(commitmsg.main())' "$@"
    status=$?
    test $status = 3 || exit $status
    problem="$python cannot import gitbridge"
else
    problem="$python is gone"
fi
if command -v gitbridge >/dev/null 2>&1; then
    exec gitbridge commit-msg "$@"
fi
echo "commit-msg hook: $problem (was its virtualenv moved or rebuilt?)" >&2
echo '(run `gitbridge install-hook` again with the gitbridge you use now)' >&2
exit 1
"""


# install-hook -----------------------------------------------------------------

def hook_paths(repo_path="."):
    """``(hook, chained)``: where the ``commit-msg`` hook is (in
    ``core.hooksPath`` when set), and where ours keeps the one it chains."""
    hooks = os.path.join(repo_path, git(
        "rev-parse", "--git-path", "hooks", cwd=repo_path).strip())
    hook = os.path.abspath(os.path.join(hooks, "commit-msg"))
    return hook, os.path.join(os.path.dirname(hook), CHAINED)


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _is_ours(path):
    return HOOK_MARK.encode() in (_read(path) or b"")


def install_hook(repo_path="."):
    """Install the ``commit-msg`` hook.  A hook that is there and not ours
    (Gerrit's Change-Id hook, say) is chained: it moves to
    ``commit-msg.chained``, and ours runs it first.  Installing again
    replaces our hook only, so it is how to point the hook at another
    Python, and how to chain a foreign hook that was installed over ours.

    The hook names the Python running this (the virtualenv's), with no
    path into its site-packages; when that Python is gone or cannot import
    gitbridge any more, it runs ``gitbridge`` from PATH, or else fails
    saying to install it again.

    Args:
      repo_path: a directory inside the Git working tree (or a bare repo).
    Returns:
      ``(hook, chained)``: the path of our hook, and that of the chained
      hook or None.
    Raises:
      Abort: a foreign hook is there and a different one is chained
        already (nothing is changed).
    """
    hook, chained = hook_paths(repo_path)
    foreign = os.path.lexists(hook) and not _is_ours(hook)
    if foreign and os.path.lexists(chained) and \
            _read(hook) != _read(chained):
        raise Abort("%s is not gitbridge's hook, and %s is another one"
                    % (hook, chained),
                    hint="keep the hook to run as %s, remove the other, "
                    "then run gitbridge install-hook again" % CHAINED)
    os.makedirs(os.path.dirname(hook), exist_ok=True)
    text = HOOK_TEMPLATE.format(mark=HOOK_MARK, chained=CHAINED,
                                python=shlex.quote(os.path.abspath(
                                    sys.executable)))
    temporary = hook + ".gitbridge-new"
    with open(temporary, "w") as fh:
        fh.write(text)
    os.chmod(temporary, 0o755)
    if foreign:
        os.replace(hook, chained)
    os.replace(temporary, hook)
    return hook, chained if os.path.lexists(chained) else None


def uninstall_hook(repo_path="."):
    """Remove our ``commit-msg`` hook and put the chained hook, if any,
    back in its place.

    Returns:
      ``(hook, restored)``: the hook's path, and whether the chained hook
      is back there.
    Raises:
      Abort: the hook there is not ours, or there is none to remove.
    """
    hook, chained = hook_paths(repo_path)
    if os.path.lexists(hook) and not _is_ours(hook):
        raise Abort("%s is not gitbridge's hook" % hook,
                    hint="remove it by hand if you mean to")
    if os.path.lexists(chained):
        os.replace(chained, hook)
        return hook, True
    if not os.path.lexists(hook):
        raise Abort("no commit-msg hook in %s" % os.path.dirname(hook))
    os.unlink(hook)
    return hook, False


# commitid-add ---------------------------------------------------------------

def add_ids(repo_path=".", branch=None, base=None):
    """Give every commit of ``branch`` after ``base`` that lacks a commit
    ID one, in one rewrite, and move the branch to the result.

    Only messages change (trees, authors and dates stay); descendants of a
    changed commit are rewritten onto their new parents.  Signatures of
    rewritten commits are dropped, as they no longer match.  The old tip
    stays in the branch's reflog.

    Args:
      repo_path: the repository.
      branch: a branch name (default: the checked-out branch).
      base: commits reachable from this revision are left alone (default:
        the branch's upstream).
    Returns:
      ``(added, rewritten, old_tip, new_tip)``, tips as hex bytes.
    Raises:
      Abort: no branch or base could be found.
    """
    repo = Repo.discover(repo_path)
    ref = _branch_ref(repo, branch)
    if ref not in repo.refs:
        raise Abort("no branch %s" % ref.decode())
    tip = repo.refs[ref]
    base_sha = _resolve_base(repo, ref, base)
    deterministic = gitconfig.read(
        repo_path, r"^commitid\.deterministic$").boolean(
            "commitid.deterministic", False)
    walker = repo.get_walker(include=[tip],
                             exclude=[base_sha] if base_sha else None)
    commits = {entry.commit.id: entry.commit for entry in walker}
    rewritten = {}
    added = 0
    for sha in _parents_first(commits):
        commit = commits[sha]
        message = commit.message.decode("utf-8", "surrogateescape")
        new_message = commitid.ensure_id(
            message, lambda: _new_id(deterministic, sha),
            parents=len(commit.parents))
        parents = [rewritten.get(p, p) for p in commit.parents]
        if new_message == message and parents == commit.parents:
            continue
        added += new_message != message
        new = commit.copy()
        new.message = new_message.encode("utf-8", "surrogateescape")
        new.parents = parents
        new.gpgsig = None
        repo.object_store.add_object(new)
        rewritten[sha] = new.id
    new_tip = rewritten.get(tip, tip)
    if new_tip != tip and not repo.refs.set_if_equals(
            ref, tip, new_tip, message=b"gitbridge commitid-add"):
        raise Abort("%s moved during the rewrite" % ref.decode(),
                    hint="run gitbridge commitid-add again")
    return added, len(rewritten), tip, new_tip


def _new_id(deterministic, sha):
    if deterministic:
        return commitid.derived_id(sha)
    return commitid.new_id()


def _branch_ref(repo, branch):
    if branch:
        return b"refs/heads/" + branch.encode()
    ref = repo.refs.get_symrefs().get(b"HEAD")
    if not ref or not ref.startswith(b"refs/heads/"):
        raise Abort("HEAD is not on a branch",
                    hint="name the branch to rewrite")
    return ref


def _resolve_base(repo, ref, base):
    if base is not None:
        # git's own parser: the whole revision syntax (HEAD~2, @{u}, ...).
        try:
            return git("rev-parse", "-q", "--verify", base + "^{commit}",
                       cwd=repo.path).strip().encode()
        except CommandError:
            raise Abort("unknown revision %s" % base) from None
    section = "branch.%s." % ref[len(b"refs/heads/"):].decode(
        "utf-8", "surrogateescape")
    config = gitconfig.read(repo.path, r"^branch\.")
    remote = config.get(section + "remote")
    merge = config.get(section + "merge")
    if remote is None or merge is None:
        raise Abort("%s has no upstream" % ref.decode(),
                    hint="say which commits to leave alone with --base REV")
    upstream = os.fsencode("refs/remotes/%s/%s" % (
        remote, merge[len("refs/heads/"):]))
    if upstream not in repo.refs:
        raise Abort("upstream %s not found" % upstream.decode(),
                    hint="fetch it, or use --base REV")
    return repo.refs[upstream]


def _parents_first(commits):
    """The shas of ``commits`` ({sha: commit}) with parents before
    children."""
    order, done = [], set()
    for start in commits:
        stack = [(start, False)]
        while stack:
            sha, expanded = stack.pop()
            if sha in done or sha not in commits:
                continue
            if expanded:
                done.add(sha)
                order.append(sha)
                continue
            stack.append((sha, True))
            stack.extend((p, False) for p in commits[sha].parents)
    return order


# commitid-map ---------------------------------------------------------------

def format_mapping(mapping):
    """The mapping as lines of text for people."""
    lines = []
    for match in mapping.matches:
        lines.append("%s %s %s" % (
            match.new.node[:12], match.old.node[:12] if match.old else
            "new         ", match.how or "(no match)"))
    for old in mapping.unmatched_old:
        successors = mapping.successors(old)
        lines.append("unmatched old %s%s" % (old.node[:12], (
            " (folded into %s)" % successors[0].node[:12])
            if successors else ""))
    for conflict in mapping.conflicts:
        lines.append("conflict: %s would match %s by %s, which %s has" % (
            conflict.new.node[:12], conflict.old.node[:12], conflict.how,
            conflict.taken_by.node[:12]))
    for commit_id, nodes in sorted(mapping.duplicate_ids.items()):
        lines.append("duplicate ID %s: %s" % (
            commit_id, " ".join(n[:12] for n in nodes)))
    return lines


def mapping_json(mapping):
    return {
        "matches": [{"new": m.new.node, "old": m.old.node if m.old else None,
                     "how": m.how, "commit_id": m.new.commit_id}
                    for m in mapping.matches],
        "unmatched_old": [c.node for c in mapping.unmatched_old],
        "conflicts": [{"new": c.new.node, "old": c.old.node,
                       "taken_by": c.taken_by.node, "how": c.how}
                      for c in mapping.conflicts],
        "duplicate_ids": mapping.duplicate_ids,
    }


# The command line -----------------------------------------------------------

def add_commands(subparsers):
    install = _repo_command(
        subparsers, "install-hook", "install the commit-msg hook that adds "
        "commit IDs, chaining the hook that is there", _cmd_install_hook)
    # Needed before hooks were chained; scripts may still pass it.
    install.add_argument("--force", action="store_true",
                         help=argparse.SUPPRESS)

    _repo_command(subparsers, "uninstall-hook", "remove the commit-msg "
                  "hook, putting the chained hook back", _cmd_uninstall_hook)

    hook = subparsers.add_parser(
        "commit-msg", help="add a commit ID to a message file (the hook)")
    hook.add_argument("message_file")
    hook.set_defaults(func=_handler(_cmd_commit_msg))

    add = _repo_command(
        subparsers, "commitid-add", "give the commits of a branch that lack "
        "a commit ID one, in one rewrite", _cmd_add)
    add.add_argument("--base", help="leave commits reachable from this "
                     "revision alone (default: the branch's upstream)")
    add.add_argument("branch", nargs="?",
                     help="the branch (default: the checked-out one)")

    mapping = subparsers.add_parser(
        "commitid-map", help="match a series of commits to a previous "
        "one (Git or Mercurial) by node, obsolescence and commit ID")
    mapping.add_argument("--old", nargs=2, required=True,
                         metavar=("REPO", "REVS"),
                         help="the previous series: a repository and a Git "
                         "range or hg revset")
    mapping.add_argument("--new", nargs=2, required=True,
                         metavar=("REPO", "REVS"), help="the new series")
    mapping.add_argument("--positional", action="store_true",
                         help="match commits without an ID by position "
                         "as a last resort")
    mapping.add_argument("--json", action="store_true",
                         help="print JSON")
    mapping.set_defaults(func=_handler(_cmd_map))


def _repo_command(subparsers, name, help, command):
    """The subcommand ``name`` that runs ``command`` on the repository
    that ``-C`` names."""
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument("-C", dest="repo", default=".",
                        help="the repository (default: here)")
    parser.set_defaults(func=_handler(command))
    return parser


def _handler(command):
    def run(args):
        try:
            return command(args)
        except Abort as err:
            return print_abort(err)
        except CommandError as failure:
            return print_abort(git_abort(failure))
    return run


def _cmd_install_hook(args):
    hook, chained = install_hook(args.repo)
    if chained:
        print("chained hook: %s (runs first)" % chained)
    print("installed %s" % hook)
    return 0


def _cmd_uninstall_hook(args):
    hook, restored = uninstall_hook(args.repo)
    print("removed gitbridge's hook%s" % (
        "; the chained hook is back at %s" % hook if restored else
        " %s" % hook))
    return 0


def _cmd_commit_msg(args):
    try:
        commitmsg.add_id(args.message_file)
    except OSError as err:
        raise Abort("cannot rewrite %s: %s" % (args.message_file,
                                              err.strerror))
    return 0


def _cmd_add(args):
    added, rewritten, old, new = add_ids(args.repo, args.branch, args.base)
    if not rewritten:
        print("no commit needs a commit ID")
        return 1
    print("added commit IDs to %d commits (%d rewritten): %s..%s" % (
        added, rewritten, old.decode()[:12], new.decode()[:12]))
    return 0


def _cmd_map(args):
    mapping = map_ids(*args.old, *args.new, positional=args.positional)
    if args.json:
        json.dump(mapping_json(mapping), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join(line + "\n"
                                 for line in format_mapping(mapping)))
    return 0
