"""Commit IDs for Git: the ``commit-msg`` hook's installer, IDs for an
existing branch in one rewrite, and mapping a series of commits onto a
previous one (Git or Mercurial) by ID.

- ``install_hook``: ``gitbridge install-hook``
- ``add_ids``: ``gitbridge commitid-add``
- ``read_series`` and ``map_ids``: ``gitbridge commitid-map``
- ``gitbridge commit-msg FILE`` runs the hook itself (the pre-commit
  framework's entry point).
"""

import json
import os
import subprocess
import sys

from dulwich.repo import Repo

from gitbridge import commitmsg
from vcsperf import commitids, tools

#: Marks a hook file as ours, so reinstalling may replace it.
HOOK_MARK = "# commit-msg hook installed by `gitbridge install-hook`"
HOOK_TEMPLATE = """\
#!{python} -IS
{mark} (vcsperf):
# gives each commit message a MozReview-Commit-ID line.  Delete this file
# to stop.  -IS: no site-packages scan, no user environment: fast, and
# the same Python whatever the committer's environment.
import sys
sys.path.insert(0, {site!r})
from gitbridge import commitmsg
sys.exit(commitmsg.main())
"""


class Abort(Exception):
    """A user error: ``str`` is the one-line message, ``hint`` what to do."""

    def __init__(self, message, hint=None):
        super().__init__(message)
        self.hint = hint


def _git(repo_path, *args):
    try:
        return subprocess.run(["git", *args], cwd=repo_path, check=True,
                              capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as err:
        raise Abort("git %s failed: %s" % (args[0], err.stderr.strip()))


# install-hook -----------------------------------------------------------------

def install_hook(repo_path=".", force=False):
    """Install the ``commit-msg`` hook in the repository's hooks directory
    (``core.hooksPath`` when set).

    Args:
      repo_path: a directory inside the Git working tree (or a bare repo).
      force: replace a ``commit-msg`` hook that is not ours; it is kept as
        ``commit-msg.orig``.
    Returns:
      The path of the installed hook.
    Raises:
      Abort: a foreign hook is there and ``force`` is false, or the
        ``.orig`` name is taken too.
    """
    hooks = os.path.join(repo_path, _git(repo_path, "rev-parse",
                                         "--git-path", "hooks").strip())
    path = os.path.abspath(os.path.join(hooks, "commit-msg"))
    if os.path.lexists(path):
        with open(path, errors="replace") as fh:
            ours = HOOK_MARK in fh.read()
        if not ours:
            if not force:
                raise Abort("%s exists and is not gitbridge's hook" % path,
                            hint="use --force to replace it (it is kept "
                            "as commit-msg.orig)")
            backup = path + ".orig"
            if os.path.lexists(backup):
                raise Abort("%s exists too" % backup,
                            hint="move one of the two hooks away first")
            os.rename(path, backup)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    site = os.path.dirname(os.path.dirname(os.path.abspath(
        commitids.__file__)))
    text = HOOK_TEMPLATE.format(python=sys.executable, mark=HOOK_MARK,
                                site=site)
    temporary = path + ".gitbridge-new"
    with open(temporary, "w") as fh:
        fh.write(text)
    os.chmod(temporary, 0o755)
    os.replace(temporary, path)
    return path


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
    config = repo.get_config_stack()
    deterministic = config.get_boolean(b"commitid", b"deterministic", False)
    walker = repo.get_walker(include=[tip],
                             exclude=[base_sha] if base_sha else None)
    commits = {entry.commit.id: entry.commit for entry in walker}
    rewritten = {}
    added = 0
    for sha in _parents_first(commits):
        commit = commits[sha]
        message = commit.message.decode("utf-8", "surrogateescape")
        new_message = commitids.ensure_id(
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
        return commitids.derived_id(sha)
    return commitids.new_id()


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
        proc = subprocess.run(
            ["git", "rev-parse", "-q", "--verify", base + "^{commit}"],
            cwd=repo.path, capture_output=True, text=True)
        if proc.returncode:
            raise Abort("unknown revision %s" % base)
        return proc.stdout.strip().encode()
    config = repo.get_config_stack()
    section = (b"branch", ref[len(b"refs/heads/"):])
    try:
        remote = config.get(section, b"remote")
        merge = config.get(section, b"merge")
    except KeyError:
        raise Abort("%s has no upstream" % ref.decode(),
                    hint="say which commits to leave alone with --base REV")
    upstream = b"refs/remotes/%s/%s" % (
        remote, merge[len(b"refs/heads/"):])
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

def read_series(repo_path, revisions, hidden=False, env=None):
    """The commits that ``revisions`` names in a Git repository (a range
    such as ``main..topic``) or a Mercurial one (a revset, which sees
    obsolete changesets with ``hidden``), oldest first, as
    ``vcsperf.commitids.Commit`` without predecessors.  ``env`` is the
    environment hg runs in (default: this process's)."""
    if os.path.isdir(os.path.join(repo_path, ".hg")):
        out = _hg(repo_path, *(["--hidden"] if hidden else []), "log", "-r",
                  revisions, "-T", "{node}\\n{desc}\\0", env=env)
    else:
        out = _git(repo_path, "log", "--reverse", "--topo-order", "-z",
                   "--format=%H%n%B", revisions, "--")
    series = []
    for entry in out.split("\0"):
        node, _, message = entry.partition("\n")
        if node:
            series.append(commitids.Commit(node, commitids.find_id(message)))
    return series


def _hg(repo_path, *args, env=None):
    env = dict(env or os.environ, HGPLAIN="1")
    try:
        return tools.run([tools.executable("hg"), "-R", repo_path, *args],
                         env)
    except tools.CommandError as err:
        raise Abort("hg failed: %s" % err.stderr.strip())


def with_predecessors(repo_path, old, new, env=None):
    """``new`` with the predecessors that the Mercurial repository's
    obsolescence markers give among ``old`` (the same repository)."""
    if not old:
        return new
    out = _hg(repo_path, "log", "--hidden", "-r",
              " or ".join(c.node for c in old), "-T",
              "{node}{revset('successors(%d)', rev) % ' {node}'}\\n",
              env=env)
    predecessors = {}
    for line in out.splitlines():
        node, *successors = line.split()
        for successor in successors:
            if successor != node:
                predecessors.setdefault(successor, []).append(node)
    return [c._replace(predecessors=frozenset(predecessors.get(c.node, ())))
            for c in new]


def map_ids(old_repo, old_revs, new_repo, new_revs, positional=False):
    """Map the ``new`` series onto the ``old`` one (see
    ``vcsperf.commitids.map_series``), using obsolescence markers when
    both are the same Mercurial repository.  Obsolete changesets count in
    the old series only."""
    # The old series is history, obsolete by now in Mercurial.
    old = read_series(old_repo, old_revs, hidden=True)
    new = read_series(new_repo, new_revs)
    if os.path.isdir(os.path.join(old_repo, ".hg")) and \
            os.path.realpath(old_repo) == os.path.realpath(new_repo):
        new = with_predecessors(old_repo, old, new)
    return commitids.map_series(old, new, positional=positional)


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
    install = subparsers.add_parser(
        "install-hook", help="install the commit-msg hook that adds "
        "commit IDs")
    install.add_argument("-C", dest="repo", default=".",
                         help="the repository (default: here)")
    install.add_argument("--force", action="store_true",
                         help="replace a commit-msg hook that is not ours "
                         "(kept as commit-msg.orig)")
    install.set_defaults(func=_handler(_cmd_install_hook))

    hook = subparsers.add_parser(
        "commit-msg", help="add a commit ID to a message file (the hook)")
    hook.add_argument("message_file")
    hook.set_defaults(func=_handler(_cmd_commit_msg))

    add = subparsers.add_parser(
        "commitid-add", help="give the commits of a branch that lack a "
        "commit ID one, in one rewrite")
    add.add_argument("-C", dest="repo", default=".",
                     help="the repository (default: here)")
    add.add_argument("--base", help="leave commits reachable from this "
                     "revision alone (default: the branch's upstream)")
    add.add_argument("branch", nargs="?",
                     help="the branch (default: the checked-out one)")
    add.set_defaults(func=_handler(_cmd_add))

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


def _handler(command):
    def run(args):
        try:
            return command(args)
        except Abort as err:
            sys.stderr.write("abort: %s\n" % err)
            if err.hint:
                sys.stderr.write("(%s)\n" % err.hint)
            return 255
    return run


def _cmd_install_hook(args):
    print("installed %s" % install_hook(args.repo, args.force))
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
