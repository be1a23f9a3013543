"""``gitbridge ready-trees``: keep ready trees, so a new checkout is a rename.

``gitbridge ready-trees URL -b BRANCH`` (or ``-r SHA``) keeps ``--count``
complete checkouts of URL at that commit in the pool, beside its store
(``<sharebase>/ready/<root>.git/``): each is a checkout in the
alternates layout, with its own index, made or refreshed by ``gitbridge
checkout`` itself (a refresh is a purged reuse: what changed is written,
the rest is checked).  A later ``gitbridge checkout URL DEST`` into a new
(absent or empty) DEST on the same filesystem takes one with a rename,
then purges it and checks out the wanted commit as it does a reused
checkout: it writes what differs, not the whole tree.  Run it off the
task's clock (after a task, or from cron); one refill of a pool runs at
a time.

- ``--count`` (default: git config ``sharepool.ready-trees``, else 1):
  how many trees to keep; each takes the disk of a checkout.  Trees
  beyond it are deleted; 0 deletes them all.
- A tree is handed out once (the rename is atomic); one changed behind
  the pool's back in its .git (HEAD, config, hooks, the index) is set
  aside by the checkout that finds it, before git runs in it, and
  deleted by the next refill; changes to its files are purged and
  checked out away; a refill killed midway is resumed by the next.
- Where the filesystem clones files copy-on-write (reflink on btrfs and
  XFS), new trees are cloned from the first one; elsewhere the refill
  says so in one line and writes each in full.
- ``gitbridge checkout`` writes the whole tree as before, said in one
  line, when DEST is on another filesystem, the request is sparse or in
  the worktree layout, or no ready tree is left.

The other options are ``gitbridge checkout``'s: ``-r``/``-b`` name the
commit the trees stand on.
"""

import argparse
import os

from gitbridge import checkout, gitconfig
from vcsperf.core import pooling, readytrees
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.process import CommandError, git_abort

#: How many ready trees a pool keeps when neither ``--count`` nor
#: ``sharepool.ready-trees`` says.
DEFAULT_COUNT = 1
#: The most a refill keeps: each tree is a whole checkout.
MAX_COUNT = 64


def add_commands(subparsers):
    parser = subparsers.add_parser(
        "ready-trees", help="keep complete checkouts ready in the pool, "
        "for new checkouts to take",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--count", type=int, help="how many trees to keep "
                        "(default: sharepool.ready-trees, %d)"
                        % DEFAULT_COUNT)
    checkout.add_pool_arguments(parser)
    parser.set_defaults(func=main)


def main(args):
    """The ``gitbridge ready-trees`` handler: 0, or 255 after
    ``abort:``."""
    refill = None
    try:
        config = gitconfig.read(".", checkout.SETTINGS)
        refill = Refill(args, config)
        refill.run()
        return 0
    except Abort as abort:
        return print_abort(abort)
    except CommandError as failure:
        return print_abort(git_abort(failure))
    finally:
        if refill is not None and refill.timings:
            print(refill.timer.json_line("ready-trees"), flush=True)


class Refill:
    """One refill: the store and commit resolved once, then each tree
    brought to it by the checkout engine, under the pool's refill
    lock."""

    def __init__(self, args, config):
        count = args.count
        if count is None:
            value = config.get("sharepool.ready-trees", str(DEFAULT_COUNT))
            try:
                count = int(value)
            except ValueError:
                raise Abort("sharepool.ready-trees is not a number: %r"
                            % value)
        if not 0 <= count <= MAX_COUNT:
            raise Abort("the count of ready trees must be 0 to %d, not %d"
                        % (MAX_COUNT, count),
                        hint="each tree takes the disk of a checkout")
        self.count = count
        self.args = args
        self.config = config
        self.timings = args.timings or config.boolean("sharepool.timings",
                                                      False)
        # the pool's own: the stores' share base holds the trees
        self.resolver = Resolve(self.request(None, args.revision,
                                             args.branch))
        self.timer = self.resolver.timer

    def request(self, dest, revision, branch):
        """A checkout request of the trees' commit into ``dest`` (None:
        the ready directory, for resolving)."""
        sharebase = self.args.sharebase
        namespace = argparse.Namespace(
            url=self.args.url, dest=dest or os.path.join(
                sharebase or ".", readytrees.READY_DIR),
            upstream=self.args.upstream, revision=revision, branch=branch,
            purge=True, sharebase=sharebase,
            networkattempts=self.args.networkattempts,
            networkdeadline=self.args.networkdeadline, sparseprofile=None,
            noupdate=False, layout="alternates", timings=False,
            metricsdir=None, bundle_uri=self.args.bundle_uri)
        return checkout.Request(namespace, self.config, pool_tree=True)

    def run(self):
        resolver = self.resolver
        with self.timer.step("resolve"):
            resolver.run()
        store, commit = resolver.store, resolver.commit
        trees = readytrees.ReadyTrees.of_store(
            resolver.request.sharebase, store, ".git",
            checkout.READY_STAMPED)
        os.makedirs(os.path.dirname(trees.directory), exist_ok=True)
        facts = self.timer.facts
        facts.update(revision=commit, count=self.count,
                     ready=trees.directory)
        with resolver.lock(trees.directory + ".lock",
                           "ready trees of %s" % os.path.basename(store)):
            os.makedirs(trees.directory, exist_ok=True)
            cloning = self.cloning(trees)

            def bring(path):
                with self.timer.step("tree"):
                    return self.bring(path, commit)
            done = readytrees.refill(trees, self.count, bring, cloning)
        for name in done.deleted:
            print("(deleted %s)" % name, flush=True)
        for name, how in done.kept:
            print("(ready tree %s %s, at %s)" % (name, how, commit[:12]),
                  flush=True)
        facts.update(trees=[name for name, _ in done.kept],
                     deleted=len(done.deleted))
        if self.count == 0:
            try:
                os.rmdir(trees.directory)
            except OSError:
                pass
        with self.timer.step("disk"):
            sizes = (pooling.disk_usage(trees.directory),
                     pooling.free_space(os.path.dirname(trees.directory)))
        facts.update(ready_bytes=sizes[0], free_bytes=sizes[1])
        print("(%d ready trees of %s at %s; disk: %s, %s free)"
              % (len(done.kept), os.path.basename(store), commit[:12],
                 *map(pooling.format_bytes, sizes)), flush=True)

    def cloning(self, trees):
        """Whether new trees are cloned copy-on-write; one line when some
        are to be made and the filesystem cannot."""
        have = len(trees.names()) + len([
            e for e in os.listdir(trees.directory)
            if e.startswith(readytrees.BUSY)])
        if self.count - have < 1 or (have == 0 and self.count == 1):
            return False
        problem = readytrees.reflink_problem(trees.directory)
        if problem:
            print("(%s has no copy-on-write clones (%s); each ready tree "
                  "is written in full)" % (trees.directory, problem),
                  flush=True)
        return problem is None

    def bring(self, path, commit):
        """Make ``path`` a clean checkout of ``commit``: ``gitbridge
        checkout --purge`` into it (a reuse when it is one already)."""
        if os.path.lexists(path) and not os.path.isdir(
                os.path.join(path, ".git")):
            # a clone killed before its .git was copied
            pooling.discard(path)
        tree = TreeCheckout(self.request(path, commit, None))
        tree.run()
        return tree.timer.facts["node"]


class Resolve(checkout.Run):
    """The store and the commit of a refill: a checkout's first steps."""

    commit = None

    @property
    def shown_dest(self):
        return "the pool's ready trees"

    def attempt(self):
        self.store = self.prepare_store()
        self.commit = self.obtain(self.store)


class TreeCheckout(checkout.Run):
    """The checkout of one ready tree: it never takes one, and reports no
    disk (the refill does)."""

    def ready_trees(self, store):
        return None

    def wants_disk_report(self):
        return False
