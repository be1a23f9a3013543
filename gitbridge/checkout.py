"""``gitbridge checkout``: robustcheckout for Git.

``gitbridge checkout URL DEST -r SHA`` (or ``-b BRANCH``) keeps one bare
repository per project in a pool directory, named by the project's root
commit (``<pool>/<root sha>.git``), and makes DEST a working tree whose
objects come from it, so a machine clones a project once and each later
checkout fetches what is missing, or nothing.  It has the options and the
guarantees of ``hg robustcheckout`` (see ``hg help sharepool``), because
both are one engine, ``vcsperf.core.pooledcheckout``, with their own
steps: the same order, the same timings (``clone``, ``pull``, ``purge``,
``update`` or ``update_sparse``, ``verify``, ``disk``, ``remove_wdir``,
``remove_store``), the same recoveries printed in parentheses, a network
failure restarting the run after a wait with backoff and jitter, one
process fetching a store while the others wait for it, and locks taken
over only from dead owners (``vcsperf.core.pooling``).  This module
supplies Git's steps only.

Where Git differs:

- A Git server cannot be asked for its root commit.  The first checkout of
  a URL learns it (from a store that already has one of the URL's branch
  tips, or else by cloning) and records it in ``<pool>/urls/``.
- Two layouts (``--layout``): ``alternates`` (default) makes DEST a repository
  of its own whose ``objects/info/alternates`` names the store's objects;
  ``worktree`` makes DEST a ``git worktree`` of the store.  The store keeps
  a ref per alternates checkout (``refs/checkouts/``) so ``git gc`` in the
  store never drops a commit a checkout stands on.
- A sparse profile is a file in the repository holding Git's sparse
  patterns (non-cone mode).  ``--sparse-dirs DIR,DIR`` is Git's cone
  mode, and ``--filter blob:none`` (``sharepool.filter``) makes a new
  store blobless (``gitbridge.partialtree``).
- Git has no lock over a working tree: each attempt holds a lock of the
  pool's, ``<pool>/checkouts/<hash of DEST>.lock``, on DEST.
- The wanted commit is fetched into the store before DEST becomes a share
  of it (a worktree is added at that commit); Mercurial shares first and
  pulls through the share.
- ``--purge`` removes what ``git clean -ffdx`` would, reading only the
  directories changed since the tree was last known clean
  (``gitbridge.cleantree``; the timings line says ``purge_from_record``),
  or runs ``git clean -ffdx`` where that record cannot be exact.  Those
  directories are read while the pull runs; nothing is removed before
  it has succeeded.
- The tracked files of a full checkout are compared with the index
  while the pull runs too, and ``git checkout --force`` is told which
  differ, so that it lstats only those (``cleantree.changed_files``).
  The verification reads HEAD: every tracked file has been compared with
  the index already, and those that differed written; after ``git
  clean`` it also asks ``git status`` for untracked and ignored files.
- A pull into a full store moves its refs without git's walk of what
  it brought; the walk runs beside the checkout, and a store it finds
  incomplete is deleted and cloned again (``gitbridge.connectivity``).
- Settings come from git config: ``share.pool``, ``sharepool.network-attempts``,
  ``sharepool.retry-backoff``, ``sharepool.retry-jitter-min``/``-max``,
  ``sharepool.lock-timeout``, ``sharepool.http-timeout``,
  ``sharepool.network-deadline``, ``sharepool.timings``,
  ``sharepool.layout``, ``sharepool.filter``, ``sharepool.metrics-dir``
  (``--metricsdir``: the metrics file of ``hg help sharepool``, with
  ``vcs="git"``),
  ``sharepool.disk-report`` (as in Mercurial, the disk a store and a
  checkout take is walked and said only when asked).
- ``sharepool.http-timeout`` (600) is git's ``http.lowSpeedTime`` (below
  a byte a second for that long, a transfer fails); each network step
  (``ls-remote``, the clone's fetch, a fetch) also has a deadline,
  ``--networkdeadline`` or ``sharepool.network-deadline`` (3600 seconds),
  past which git's whole process group (``git-remote-https`` and
  ``index-pack`` too) gets SIGTERM, and SIGKILL a second later; the step
  then counts as a network failure.

With ``--bundle-uri URL`` (or ``sharepool.bundle-uri``), a new store is
seeded first from the bundle list at URL (the one ``gitbridge
bundlegen`` publishes, in Git's bundle-uri format, or one bundle) and
then fetches from the origin only what is newer; a list or bundle that
cannot be used, a host that stalls or trickles, end the seeding with one
line and the origin sends the rest (``gitbridge.bundleseed``: its
limits are ``sharepool.bundle-timeout``, ``sharepool.bundle-low-speed``
and ``sharepool.bundle-deadline``).

A new DEST (absent or empty) is a rename of one of the pool's ready
trees when it keeps some (``gitbridge ready-trees``): a complete
checkout, purged and brought to the wanted commit like a reused one, so
only what differs is written (``vcsperf.core.readytrees``).

Network and working-tree work runs the ``git`` binary: fetching and
indexing packs, and writing thousands of files, are C in Git and Python
in dulwich (measured by ``vcsperf bench sharepool``).  Reading refs and
objects in the pool (which store has a commit, the root of a history, a
sparse profile) is small work done in-process with dulwich.
"""

import argparse
import concurrent.futures
import hashlib
import os
import re
import sys
import threading
import time
import urllib.parse

from dulwich.errors import NotGitRepository
from dulwich.object_store import DiskObjectStore
from dulwich.repo import Repo, UnsupportedExtension

from gitbridge import (
    bundleseed,
    cleantree,
    connectivity,
    gitconfig,
    partialtree,
)
from vcsperf.core import metrics, pooledcheckout, pooling, readytrees
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.process import CommandError, git, git_abort

LAYOUTS = ("alternates", "worktree")
STORE_SUFFIX = ".git"
_STORE_NAME = re.compile(r"^[0-9a-f]{40}\.git$")
#: A commit's full hash (SHA-1 or SHA-256).
_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: git's answers to network trouble a retry may cure.
_TRANSIENT = re.compile(
    r"remote end hung up unexpectedly|early EOF|RPC failed|"
    r"returned error: 5\d\d|HTTP 5\d\d|error: 5\d\d|"
    r"Connection reset|Connection refused|Failed to connect|timed out|"
    r"Operation too slow|transfer closed|unexpected disconnect|"
    r"index-pack failed|invalid index-pack output|SSL|GnuTLS|"
    r"Could not resolve host|Empty reply from server", re.I)


#: The big file of a ready tree's .git, which its seal holds by stat
#: identity and checksum (``vcsperf.core.readytrees``).
READY_STAMPED = (".git/index",)

#: The checkout's monitor answer (``cleantree.trusting_all_but``), in
#: DEST's git directory.
_ANSWER = "gitbridge-changed-files"
#: Seconds from the start of the comparison beside the pull within which
#: the checkout may use it: a tracked file another process changes in
#: that window (while the run holds DEST's lock) is missed by the run,
#: so a slow pull (a trickling server) cannot stretch it.  The
#: comparison takes about a second at Firefox's size, the pull as long.
COMPARISON_TRUSTED_FOR = 5.0

#: The settings ``gitbridge checkout`` reads from git config.
SETTINGS = r"^(share\.pool|sharepool\.)"
#: The settings of a pooled store the checkout consults, read by one
#: ``git config``: whether it is blobless, and whether bundles seeded it.
STORE_SETTINGS = r"^(extensions\.partialclone|gitbridge\.seeded)$"


# The command ---------------------------------------------------------------

def add_commands(subparsers):
    parser = subparsers.add_parser(
        "checkout", help="check out a revision into DEST from a pool of "
        "shared stores (robustcheckout for Git)",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("dest")
    add_pool_arguments(parser)
    parser.add_argument("--purge", action="store_true",
                        help="remove untracked and ignored files")
    parser.add_argument("--sparseprofile", help="file in the repository "
                        "with sparse-checkout patterns")
    parser.add_argument("--sparse-dirs", action="append", metavar="DIR,DIR",
                        help="check out only these directories (git's "
                        "cone mode; repeatable)")
    parser.add_argument("--filter", choices=partialtree.FILTERS, help="make a "
                        "new pooled store blobless; what checkouts need is "
                        "fetched into it (default: sharepool.filter)")
    parser.add_argument("-U", "--noupdate", action="store_true",
                        help="do not update the working tree")
    parser.add_argument("--layout", choices=LAYOUTS, help="how DEST shares "
                        "the store (default: sharepool.layout, alternates)")
    parser.add_argument("--metricsdir", metavar="DIR", help="write a "
                        "metrics file of the run there (default: git config "
                        "sharepool.metrics-dir)")
    parser.set_defaults(func=main)


def add_pool_arguments(parser):
    """The options of a checkout that ``gitbridge ready-trees`` takes
    too."""
    parser.add_argument("--upstream", help="URL to clone the store from "
                        "first (e.g. a mirror)")
    parser.add_argument("-r", "--revision", help="commit to check out: 12 to "
                        "40 hex digits")
    parser.add_argument("-b", "--branch", help="branch or tag to check out "
                        "(resolved on the remote)")
    parser.add_argument("--sharebase", help="directory of the pooled stores "
                        "(default: git config share.pool)")
    parser.add_argument("--networkattempts", type=int, help="network "
                        "attempts before giving up (default: "
                        "sharepool.network-attempts, %d)"
                        % pooling.DEFAULT_ATTEMPTS)
    parser.add_argument("--networkdeadline", type=float, metavar="SECONDS",
                        help="seconds each network step (ls-remote, "
                        "clone or fetch) may take before it counts as a "
                        "network failure (default: "
                        "sharepool.network-deadline, %d)"
                        % pooling.DEFAULT_NETWORK_DEADLINE)
    parser.add_argument("--timings", action="store_true",
                        help="print a JSON line of per-step timings")
    parser.add_argument("--bundle-uri", metavar="URL", help="a bundle list "
                        "(or bundle) a new store is seeded from before the "
                        "origin is fetched (default: git config "
                        "sharepool.bundle-uri)")


def main(args):
    """The ``gitbridge checkout`` handler: 0, or 255 after ``abort:``."""
    try:
        request = Request(args, gitconfig.read(".", SETTINGS))
        run = Run(request)
        run.metrics_dir = request.metrics_dir
    except Abort as abort:
        return print_abort(abort)
    try:
        run.run()
        return 0
    except Abort as abort:
        return print_abort(abort)
    except CommandError as failure:
        return print_abort(git_abort(failure))
    finally:
        if request.timings:
            print(run.timings_line(), flush=True)


class Request:
    """The command's arguments and settings (a ``gitconfig.GitConfig``),
    checked."""

    def __init__(self, args, config, pool_tree=False):
        self.revision = (args.revision or "").lower() or None
        self.branch = args.branch
        number = _config_number(config)
        sharebase = args.sharebase or config.get("share.pool")
        self.sharebase = sharebase and os.path.realpath(
            os.path.expanduser(sharebase))
        for url in (args.url, args.upstream or ""):
            if url.startswith("-"):
                raise Abort("source %r begins with '-'" % url[:200],
                            hint="git would read it as an option; name a "
                            "path that begins with ./")
        self.url = _local_absolute(args.url)
        self.upstream = args.upstream and _local_absolute(args.upstream)
        self.dest = os.path.abspath(args.dest)
        self.attempts = args.networkattempts or int(number(
            "network-attempts", pooling.DEFAULT_ATTEMPTS))
        self.network_deadline = args.networkdeadline or number(
            "network-deadline", pooling.DEFAULT_NETWORK_DEADLINE)
        pooledcheckout.check_request(
            _error, self.revision, self.branch, self.sharebase,
            self.attempts, self.network_deadline, self.dest, args.dest,
            [self.url, self.upstream], pool_tree=pool_tree)
        self.purge = args.purge
        self.noupdate = args.noupdate
        self.sparseprofile = args.sparseprofile
        # ``gitbridge ready-trees`` has neither: its trees are full
        dirs = getattr(args, "sparse_dirs", None)
        self.sparse_dirs = partialtree.parse_dirs(dirs) if dirs else None
        if self.sparse_dirs and self.sparseprofile:
            raise Abort("cannot use both --sparseprofile and --sparse-dirs",
                        hint="a checkout has one sparse configuration")
        self.filter = partialtree.check_filter(
            getattr(args, "filter", None) or config.get("sharepool.filter"))
        self.layout = args.layout or config.get("sharepool.layout",
                                                 "alternates")
        if self.layout not in LAYOUTS:
            raise Abort("unknown layout %r" % self.layout,
                        hint="sharepool.layout is one of %s"
                        % ", ".join(LAYOUTS))
        self.backoff = number("retry-backoff", pooling.DEFAULT_BACKOFF)
        self.jitter = (number("retry-jitter-min", pooling.DEFAULT_JITTER[0]),
                       number("retry-jitter-max", pooling.DEFAULT_JITTER[1]))
        self.http_timeout = int(number("http-timeout",
                                       pooling.DEFAULT_HTTP_TIMEOUT))
        self.lock_policy = pooling.LockPolicy(
            private=config.boolean("sharepool.private-cache", False),
            grace=number("foreign-lock-grace", self.http_timeout),
            timeout=number("lock-timeout", pooling.DEFAULT_LOCK_TIMEOUT))
        self.timings = args.timings or config.boolean("sharepool.timings",
                                                      False)
        directory = args.metricsdir or config.get("sharepool.metrics-dir")
        self.metrics_dir = metrics.check_directory(
            directory, "sharepool.metrics-dir") if directory else None
        self.disk_report = config.boolean("sharepool.disk-report", False)
        self.bundle_uri, self.bundle_limits = _bundle_settings(
            args.bundle_uri or config.get("sharepool.bundle-uri"), number)

    @property
    def wanted(self):
        return self.revision or self.branch


def _config_number(config):
    def number(name, default):
        value = config.get("sharepool." + name)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise Abort("sharepool.%s is not a number: %r" % (name, value))
    return number


def _bundle_settings(uri, number):
    """The bundle list's URL (http or https) and the seeding's
    ``bundleseed.Limits``."""
    limits = bundleseed.Limits(
        timeout=number("bundle-timeout", bundleseed.DEFAULT_TIMEOUT),
        low_speed=number("bundle-low-speed", bundleseed.DEFAULT_LOW_SPEED),
        deadline=number("bundle-deadline", bundleseed.DEFAULT_DEADLINE))
    if not (pooling.valid_deadline(limits.timeout)
            and pooling.valid_deadline(limits.deadline)
            and 0 <= limits.low_speed < float("inf")):
        raise Abort("sharepool.bundle-timeout, -deadline or -low-speed is "
                    "out of range",
                    hint="timeouts are positive seconds, the low speed "
                    "bytes a second, 0 or more")
    if uri and (urllib.parse.urlsplit(uri).scheme.lower()
                not in ("http", "https") or not uri.isprintable()):
        raise Abort("bundle URI %r is not an http or https URL" % uri[:200],
                    hint="give the URL of a bundle list, such as the one "
                    "gitbridge bundlegen publishes")
    return uri or None, limits


def _text(template, *args):
    return template % args if args else template


def _error(template, *args, hint=None):
    return Abort(_text(template, *args), hint=hint)


# The steps -------------------------------------------------------------------

class Run(partialtree.Steps, pooledcheckout.PooledCheckout):
    """One checkout: the engine (``vcsperf.core.pooledcheckout``) with
    Git's steps (sparse directories and blobless stores:
    ``partialtree.Steps``); it learns the refs, the root and the
    commit."""

    # a worktree is added at the commit, so the commit comes first
    SHARE_BEFORE_PULL = False
    VCS = "git"
    #: ``(store, its STORE_SETTINGS)`` read in this attempt, or None.
    store_settings_read = None
    #: The remote's refs, where this attempt asked for them
    #: (``remote_refs``), or None.
    refs_read = None
    #: When the comparison beside the pull began (``time.monotonic``).
    compared_at = 0.0

    def __init__(self, request):
        super().__init__(
            request,
            pooling.NetworkAttempts(request.attempts, backoff=request.backoff,
                                    jitter=request.jitter),
            request.lock_policy)
        self.timer.facts["layout"] = request.layout
        _own_repositories_only(request.dest)
        self.revision = request.revision
        self.url_key = _key(request.url)
        #: Whether DEST is known to hold nothing the index does not: it
        #: was made by this attempt, or purged from the record of a clean
        #: tree (``cleantree``).
        self.only_tracked = False
        #: What a purge from the record found (``cleantree.Found``): what
        #: ``working_state`` looks at again after the checkout, and the
        #: stat data the next record keeps.
        self.purged = None
        #: The search for what to purge, begun before the pull
        #: (``examine_beside_pull``): a future of a ``cleantree.Found``.
        self.finding = None
        #: The comparison of the tracked files with the index, begun
        #: before the pull (``examine_beside_pull``): a future of
        #: ``cleantree.changed_files``; and of ``_inspected`` its index.
        self.comparing = self.inspecting = None
        #: The last pull into a full store, its objects not yet walked
        #: (``connectivity.Pull``; ``walk_pulled``).
        self.unwalked_pull = None
        self.remote_env = dict(os.environ, GIT_HTTP_LOW_SPEED_LIMIT="1",
                               GIT_HTTP_LOW_SPEED_TIME=str(
                                   request.http_timeout))

    def write_atomically(self, path, text):
        _write_atomically(path, text)

    # voice -------------------------------------------------------------

    def text(self, template, *args):
        return _text(template, *args)

    def say(self, template, *args):
        print(self.text(template, *args), flush=True)

    def warn(self, template, *args):
        sys.stdout.flush()
        print(self.text(template, *args), file=sys.stderr, flush=True)

    def error(self, template, *args, hint=None):
        return _error(template, *args, hint=hint)

    def transient(self, exc):
        return _transient(exc)

    def wants_disk_report(self):
        return self.request.disk_report

    def holding_destination(self):
        """DEST's own lock in the pool: Git has no lock over a whole
        working tree."""
        checkouts = os.path.join(self.request.sharebase, "checkouts")
        os.makedirs(checkouts, exist_ok=True)
        # by its real path: DEST named through a link is the same DEST
        key = _key(os.path.realpath(self.request.dest))
        return self.lock(os.path.join(checkouts, key + ".lock"),
                         "checkout %s" % self.request.dest)

    def ready_trees(self, store):
        return readytrees.ReadyTrees.of_store(
            self.request.sharebase, store, ".git", READY_STAMPED)

    def ready_tree_obstacle(self):
        if self.request.layout != "alternates":
            return "ready trees use the alternates layout, not %s" % (
                self.request.layout)
        return None

    # resolve and ensure the store -----------------------------------------

    def prepare_store(self):
        # an attempt restarted before its pull was walked: walked first
        self.check_pulled(self.walk_pulled())
        self.store_settings_read = self.refs_read = None
        self.examine_beside_pull()
        self.resolve()
        return self.ensure_store()

    def store_settings(self, store):
        """``STORE_SETTINGS`` of ``store``, read once an attempt: both
        are written in a new store before it is renamed into the pool,
        never after."""
        if self.store_settings_read is None \
                or self.store_settings_read[0] != store:
            self.store_settings_read = (store, gitconfig.read(
                store, STORE_SETTINGS))
        return self.store_settings_read[1]

    def store_is_blobless(self, store):
        return partialtree.names_promisor(self.store_settings(store))

    def resolve(self):
        """A branch becomes the commit it names now; a revision that a
        branch or tag of the remote is named like is ambiguous.  A full
        hash wanted from a URL the pool knows asks the remote nothing
        here (robustcheckout asks nothing for a revision it has): the
        names are looked for among the refs last fetched
        (``check_fetched_names``)."""
        if self.request.branch:
            refs = self.remote_refs()
            name = self.request.branch
            for ref in ("refs/heads/" + name, "refs/tags/%s^{}" % name,
                        "refs/tags/" + name, name):
                if ref in refs:
                    self.revision = refs[ref]
                    break
            else:
                raise Abort("%s not found on %s: no such branch or tag"
                            % (name, self.request.url),
                            hint="check the name, and that it was pushed "
                            "there")
            self.warn("(remote resolved %s to %s; result is not "
                      "deterministic)", name, self.revision)
        elif not (_FULL_HASH.fullmatch(self.revision) and self.mapped_root()):
            refs = self.remote_refs()
            for ref in ("refs/heads/", "refs/tags/"):
                self.check_name(refs.get(ref + self.revision))

    def check_name(self, named):
        """Abort where the remote's ref named like the revision names
        ``named``, another object."""
        if named and not named.startswith(self.revision):
            raise _ambiguous(self.revision, "names %s on %s"
                             % (named, self.request.url))

    def check_fetched_names(self, store):
        """``check_name`` of the branch and tag the store last fetched
        from the URL named like the revision, where ``resolve`` did not
        ask the remote."""
        if self.refs_read is not None:
            return
        prefix = "refs/pool/%s/" % self.url_key
        for named in git("for-each-ref", "--format=%(objectname)",
                         prefix + "heads/" + self.revision,
                         prefix + "tags/" + self.revision,
                         cwd=store).split():
            self.check_name(named)

    def remote_refs(self):
        """The remote's refs (``ls-remote``), asked once an attempt."""
        if self.refs_read is None:
            self.refs_read = self.network(
                "ls-remote", lambda: self.ls_remote(self.request.url))
        return self.refs_read

    def ls_remote(self, url):
        out = git("ls-remote", url, env=self.remote_env,
                  deadline=self.deadline)
        refs = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            refs[name] = sha
        if not refs:
            raise Abort("unable to resolve root revision from clone source "
                        "%s: it has no refs" % url,
                        hint="is the repository empty?")
        return refs

    def ensure_store(self):
        """The path of a healthy store for the URL, cloned if needed."""
        sharebase = self.request.sharebase
        os.makedirs(os.path.join(sharebase, "urls"), exist_ok=True)
        root = self.known_root()
        cloned = False
        if root is None:
            with self.lock(os.path.join(sharebase,
                                        ".url-%s.lock" % self.url_key),
                           "pool entry for %s" % self.request.url):
                root = self.known_root()
                if root is None:
                    root = self.clone_unknown()
                    cloned = True
        store = os.path.join(sharebase, root + STORE_SUFFIX)
        with self.store_lock(store):
            self.repair_store(store)
            if not os.path.exists(store):
                self.clone(store)
            elif not cloned:
                self.say("(sharing from existing pooled repository %s)",
                         os.path.basename(store))
        return store

    def mapped_root(self):
        """The root recorded for the URL, where its store exists; else
        None."""
        mapping = os.path.join(self.request.sharebase, "urls", self.url_key)
        try:
            with open(mapping) as fh:
                root = fh.read().strip()
        except FileNotFoundError:
            return None
        if os.path.isdir(os.path.join(self.request.sharebase,
                                      root + STORE_SUFFIX)):
            return root
        return None

    def known_root(self):
        """The root recorded for the URL, or that of a store holding one of
        its branch tips; None when the pool has not seen the project."""
        root = self.mapped_root()
        if root is not None:
            return root
        tips = {sha.encode() for name, sha in self.remote_refs().items()
                if name.startswith("refs/heads/")}
        for name in sorted(os.listdir(self.request.sharebase)):
            if not _STORE_NAME.match(name):
                continue
            try:
                objects = _objects(os.path.join(self.request.sharebase,
                                                name))
            except NotGitRepository:
                continue
            if any(tip in objects for tip in tips):
                self.remember_root(name[:-len(STORE_SUFFIX)])
                return name[:-len(STORE_SUFFIX)]
        return None

    def remember_root(self, root):
        path = os.path.join(self.request.sharebase, "urls", self.url_key)
        _write_atomically(path, root + "\n")

    def clone_unknown(self):
        """Clone a URL the pool does not know yet: its root names the
        store.  Under the URL's lock: what a killed clone of it left goes
        first."""
        sharebase = self.request.sharebase
        for leftover in pooling.abandoned_clones(sharebase,
                                                 "url-" + self.url_key):
            self.warn("(removing %s, left by an interrupted clone)",
                      leftover)
            pooling.discard(leftover)
        partial = os.path.join(sharebase, ".url-%s.cloning-%d"
                               % (self.url_key, os.getpid()))
        self.fetch_new(partial)
        # the remote's HEAD, unless an --upstream seed lacks it
        objects, refs = _objects(partial), self.remote_refs()
        candidates = [refs.get("HEAD"), self.revision] + sorted(
            sha for name, sha in refs.items() if name.startswith("refs/"))
        head = next((sha for sha in candidates
                     if sha and len(sha) == 40 and sha.encode() in objects),
                    None)
        if head is None:
            pooling.discard(partial)
            raise Abort("%s shares no commit with %s"
                        % (self.request.upstream, self.request.url),
                        hint="check --upstream")
        root = git("rev-list", "--first-parent", "--max-parents=0", head,
                   cwd=partial).split()[-1]
        store = os.path.join(sharebase, root + STORE_SUFFIX)
        with self.store_lock(store):
            self.repair_store(store)
            if os.path.exists(store):
                pooling.discard(partial)
            else:
                os.rename(partial, store)
        self.remember_root(root)
        return root

    def clone(self, store):
        sharebase, name = os.path.split(store)
        partial = os.path.join(sharebase, ".%s.cloning-%d" % (name,
                                                              os.getpid()))
        self.fetch_new(partial)
        os.rename(partial, store)

    def fetch_new(self, partial):
        """A new bare store at ``partial`` with all of the URL's (or the
        upstream's) branches and tags."""
        source = self.request.upstream or self.request.url
        self.say("(cloning %s into new pooled repository)", source)
        pooling.discard(partial)
        try:
            with self.timer.step("clone"):
                git("init", "-q", "--bare", partial)
                git("config", "gc.auto", "0", cwd=partial)
                if self.request.filter:
                    partialtree.make_blobless(partial, source, _key(source))
            seeded = self.seed(partial)
            with self.timer.step("clone"):
                self.network("clone", lambda: self.fetch(partial, source))
            if seeded:
                bundleseed.drop_refs(partial)
        except BaseException:
            pooling.discard(partial)
            raise
        self.store_cloned()

    def seed(self, partial):
        """Apply the bundle list's bundles to the new store ``partial``
        (``bundleseed``); whether any was, said in one line."""
        uri = self.request.bundle_uri
        if not uri or self.request.upstream:
            return False
        with self.timer.step("bundles"):
            seeded = bundleseed.seed(partial, uri, self.request.bundle_limits,
                                     env=self.remote_env)
        self.timer.facts["bundles"] = seeded.bundles
        self.timer.facts["bundle_bytes"] = seeded.bytes
        for fallback in seeded.fallbacks:
            self.warn("(bundle packs not used: %s)", fallback)
        if seeded.failure:
            self.warn("(seeding from bundles stopped: %s; fetching %s "
                      "from the origin)", seeded.failure,
                      "the rest" if seeded.bundles else "everything")
        else:
            self.say("(seeded from %d bundle%s of %s, %s; fetching what is "
                     "newer from the origin)", seeded.bundles,
                     "" if seeded.bundles == 1 else "s", uri,
                     pooling.format_bytes(seeded.bytes))
        return seeded.bundles > 0

    def fetch(self, store, url, pulling=False):
        key = _key(url)
        options, source = self.fetch_source(store, url, pulling)
        git(*options, "fetch", "--quiet", "--no-write-fetch-head", *source,
            "+refs/heads/*:refs/pool/%s/heads/*" % key,
            "+refs/tags/*:refs/pool/%s/tags/*" % key,
            cwd=store, env=self.remote_env, deadline=self.deadline)

    def fetch_source(self, store, url, pulling=False):
        """git's options and what to fetch from: ``url`` (as a promisor
        remote when ``pulling`` into a full store: ``connectivity``), or
        the promisor remote of a blobless store, without blobs."""
        if not partialtree.is_blobless(store):
            return connectivity.fetch_source(url, _key(url)) if pulling \
                else ([], [url])
        name, options = partialtree.promise(store, url, _key(url))
        return options, ["--filter=blob:none", name]

    def repair_store(self, store):
        """Under the store's lock: remove what killed runs left (half
        clones, git's own lock files, temporary packs); delete a store that
        is not a repository."""
        self.remove_leftovers(store)
        if not os.path.exists(store):
            return
        try:
            _objects(store)
        except NotGitRepository:
            self.warn("(%s is not a git repository; deleting shared store)",
                      store)
            self.remove(store, "remove-store")
            return
        stale = _stale_git_files(store)
        if stale:
            self.warn("(removing %d lock and temporary files left by an "
                      "interrupted git process)", len(stale))
            for path in stale:
                os.unlink(path)

    # pull --------------------------------------------------------------------

    def obtain(self, store):
        """The full sha of the wanted commit, fetched into the store if it
        lacks it; one process fetches a store at a time.  What a fetch into
        a full store brought, or an earlier run left unwalked, is walked
        before the run can succeed (``walk_pulled``)."""
        commit = self.fetched_commit(store)
        if self.unwalked_pull is None:
            # no pull, or a plain one: marks an earlier run left
            self.unwalked_pull = self.left_unwalked(store)
        if self.request.noupdate:
            self.check_pulled(self.walk_pulled())
        return commit

    def fetched_commit(self, store):
        commit = self.local_commit(store)
        if commit:
            self.check_fetched_names(store)
            return commit
        with self.store_lock(store):
            commit = self.local_commit(store)
            if commit:
                self.say("(%s was fetched by another process while we "
                         "waited; not pulling)", self.revision)
                self.check_fetched_names(store)
                return commit
            self.say("(pulling to obtain %s)", self.request.wanted)
            failure = self.pull(store)
        if failure:
            self.warn("(fetch failed: %s; deleting shared store)", failure)
            self.remove_store(store)
            raise pooledcheckout.Restart()
        commit = self.local_commit(store)
        if commit is None:
            raise Abort("revision %s not found on %s"
                        % (self.revision, self.request.url),
                        hint="check the revision, and that it was pushed "
                        "to a branch or tag there")
        self.check_fetched_names(store)
        return commit

    def left_unwalked(self, store):
        """What pulls into the full ``store`` that were not walked (a run
        killed or stopped between its fetch and its walk) left, to walk
        from every ref (``connectivity.unwalked``); None in a blobless
        store, whose packs are all a promisor's."""
        return None if self.store_is_blobless(store) \
            else connectivity.unwalked(store)

    def pull(self, store):
        """Fetch the URL's branches and tags into the store; what git said
        when that failed other than on the network, else None.  What a
        fetch into a full store brought is walked later
        (``walk_pulled``)."""
        url = self.request.url
        try:
            pull = None if self.store_is_blobless(store) \
                else connectivity.Pull(store)
            with self.pulling():
                try:
                    self.network("fetch", lambda: self.fetch(
                        store, url, pulling=pull is not None))
                except CommandError:
                    if pull is None:
                        raise
                    # a server refusing the filter (uploadpackfilter.*):
                    # a plain fetch, which git walks itself
                    pull = None
                    self.network("fetch", lambda: self.fetch(store, url))
            if pull:
                pull.fetched()
        except CommandError as failure:
            return failure.stderr.strip()
        self.unwalked_pull = pull
        return None

    def walk_pulled(self):
        """Begin the walk of what the last pull into a full store brought
        (``connectivity.Pull.check``), in a thread: a future of its
        answer, or None when there is nothing to walk."""
        pull, self.unwalked_pull = self.unwalked_pull, None
        return pull and _in_thread(pull.check)

    def check_pulled(self, walking):
        """Wait for the walk ``walking`` (``walk_pulled``): a store it
        found lacking an object the refs reach is deleted, and the run
        starts over."""
        failure = walking and walking.result()
        if failure:
            self.warn("(the fetched history is incomplete: %s; deleting "
                      "shared store)", failure)
            self.remove_store(self.store)
            raise pooledcheckout.Restart()

    def local_commit(self, store):
        # a blobless store asked for a commit it lacks tries to fetch it
        # (seconds at Firefox's size, even refused): dulwich looks first
        if len(self.revision) == 40 and self.store_is_blobless(store) \
                and self.revision.encode() not in _objects(store):
            return None
        try:
            commit = git("rev-parse", "--verify", "--quiet",
                         self.revision + "^{commit}", cwd=store,
                         env=partialtree.offline_env()).strip()
        except CommandError as failure:
            if "ambiguous" in failure.stderr:
                raise _ambiguous(self.revision, "matches several objects")
            return None
        # a commit asked for by its hash may be one only a bundle holds,
        # which the origin never named; a branch's is the one it names now
        if self.request.revision and bundleseed.was_seeded(
                self.store_settings(store)) and git(
                "rev-list", "-n", "1", commit, "--not",
                "--glob=refs/pool/*", cwd=store).strip():
            return None
        return commit

    # share ---------------------------------------------------------------------

    def check_destination(self):
        """Abort, before any network or store work, when DEST holds files
        and is not a Git checkout: they may be someone's."""
        dest = self.request.dest
        if os.path.lexists(os.path.join(dest, ".git")):
            return
        if os.path.lexists(dest) and (not os.path.isdir(dest)
                                      or os.listdir(dest)):
            raise Abort("destination exists but no .git directory",
                        hint="remove it, or choose another destination")

    def is_shared(self, store):
        """Whether DEST shares ``store`` in the request's layout; a DEST
        that shares something else is deleted."""
        problem = self.share_problem(store)
        if problem:
            self.warn("(%s; deleting destination)", problem)
            self.remove_dest()
        if not os.path.lexists(os.path.join(self.request.dest, ".git")):
            return False
        self.say("(existing repository shared store: %s)", store)
        self.check_sparse_unchanged(_is_sparse(self.request.dest))
        return True

    def create_share(self, store, commit):
        dest = self.request.dest
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if self.request.layout == "worktree":
            with self.store_lock(store):
                git("worktree", "prune", cwd=store)
                git("worktree", "add", "--quiet", "--detach", "--no-checkout",
                    dest, commit, cwd=store)
        else:
            # no template: hook samples would cost every checkout 100 KB
            git("init", "--quiet", "--template=", dest)
            _write_atomically(os.path.join(dest, ".git", "objects", "info",
                                           "alternates"),
                              os.path.join(store, "objects") + "\n")
            if self.store_is_blobless(store):
                partialtree.borrow_promises(dest)

    def share_problem(self, store):
        """Why DEST must be deleted before it shares ``store``, or None;
        on the way, DEST's index is repaired (``repair_index``)."""
        dotgit = os.path.join(self.request.dest, ".git")
        if not os.path.lexists(dotgit):
            return None
        shared = _shared_store(dotgit)
        if shared is None:
            return "destination is not shared"
        if not os.path.isdir(shared):
            return "shared store %s does not exist" % shared
        if not _STORE_NAME.match(os.path.basename(shared)):
            return "shared store %s does not belong to pooled storage" % (
                shared)
        if os.path.realpath(shared) != os.path.realpath(store):
            return "destination shares %s, an unrelated repository" % shared
        layout = "worktree" if os.path.isfile(dotgit) else "alternates"
        if layout != self.request.layout:
            return "destination uses the %s layout, not %s" % (
                layout, self.request.layout)
        try:
            if _head_missing(self.request.dest):
                return "working tree's commit is not in the store"
            # a repository of its own: git would work (write, clean) in
            # the tree its config names (a worktree's config is the
            # store's, which is bare)
            if layout == "alternates" and _names_another_tree(
                    self.request.dest):
                return "destination's config names another working tree"
            self.repair_index()
        except Abort as abort:
            return "destination's config cannot be read: %s" % abort
        except OSError as failure:
            return "destination's index cannot be repaired: %s" % failure
        except CommandError as failure:
            return "destination is not a usable checkout: %s" % (
                failure.stderr.strip().splitlines() or ["?"])[-1]
        return None

    def repair_index(self):
        """Remove the lock a killed checkout left on DEST's index (DEST's
        lock is ours), and rebuild a damaged index from HEAD: git checks
        the index's checksum only in ``git fsck``, so other commands read
        damage as entries, and die on it or carry it on."""
        dest = self.request.dest
        stale, index = git("rev-parse", "--git-path", "index.lock",
                           "--git-path", "index", cwd=dest).splitlines()
        stale = os.path.join(dest, stale)
        if os.path.exists(stale):
            self.warn("(removing %s, left by an interrupted checkout)",
                      stale)
            os.unlink(stale)
        index = os.path.join(dest, index)
        damage = self.index_damage(index)
        if not damage:
            return
        self.warn("(index %s is damaged: %s; rebuilding it from the "
                  "checked-out commit)", index, damage)
        os.unlink(index)
        if _head_resolves(dest):
            git("read-tree", "HEAD", cwd=dest)

    def index_damage(self, index):
        """``_index_damage`` of DEST's index ``index``: as found beside
        the pull, while the index is the one read then."""
        found = self.inspecting and _result(self.inspecting)
        if found and found[0] == cleantree.index_checksum(index):
            return found[1]
        return _index_damage(index)

    # purge, update, verify ----------------------------------------------------

    def purge(self):
        removed = self.purge_from_record()
        if removed is not None:
            return removed
        outside = self.purge_outside_cone()
        try:
            out = git("clean", "-ffdx", cwd=self.request.dest)
        except CommandError as failure:
            # damage in DEST that repair_index cannot see (an index
            # written without a checksum)
            self.start_over("(purge failed: %s; deleting destination)",
                            failure.stderr.strip())
        return outside + len(out.splitlines())

    def examine_beside_pull(self):
        """On an existing full checkout, begin in threads, before the
        remote is asked for anything, what reads DEST only: comparing its
        tracked files with the index (``cleantree.changed_files``: the
        checkout then looks only at those that differ), checking the index
        for damage (``repair_index``), and with --purge finding what to
        purge (``cleantree.find``, in DEST, whose objects are the
        store's).  Each is used after the pull and the share checks only
        if the index is still the one it read; nothing is removed before
        the pull has succeeded."""
        self.comparing = self.inspecting = self.finding = None
        paths = self.full_checkout_paths()
        if not paths:
            return
        # the purge's search holds the interpreter's lock in long runs of
        # short steps: the pull's own short steps must not wait 5 ms each
        sys.setswitchinterval(0.0005)
        dest, (index, record) = self.request.dest, paths
        self.compared_at = time.monotonic()
        self.comparing = _in_thread(cleantree.changed_files, dest, index)
        self.inspecting = _in_thread(_inspected, index)
        if self.request.purge:
            self.finding = _in_thread(
                lambda: cleantree.find(dest, dest, cleantree.read(record),
                                       cleantree.index_checksum(index)))

    def full_checkout_paths(self):
        """``(index, record)`` paths of DEST, an existing checkout of the
        whole tree asked for whole; None otherwise (not a checkout: the
        share checks say what it is)."""
        dest = self.request.dest
        if self.sparse_request() \
                or not os.path.isdir(os.path.join(dest, ".git")):
            return None
        try:
            if partialtree.state(dest) != "full":
                return None
            return self.git_paths("index", cleantree.NAME)
        except (Abort, CommandError):
            return None

    def purge_from_record(self):
        """What ``git clean -ffdx`` would remove, removed after reading
        only the directories changed since DEST was last known clean
        (``cleantree``); how many, or None where that cannot be exact."""
        self.timer.facts["purge_from_record"] = False
        finding, self.finding, self.purged = self.finding, None, None
        if self.sparse_request():
            return None
        index, path = self.git_paths("index", cleantree.NAME)
        checksum = cleantree.index_checksum(index)
        try:
            found = finding and finding.result()
            if not found or found.index != checksum:
                found = cleantree.find(self.request.dest, self.store,
                                       cleantree.read(path), checksum)
            removed = found.remove()
        except cleantree.Fallback:
            return None
        self.only_tracked = True
        self.purged = found
        self.timer.facts["purge_from_record"] = True
        return removed

    def git_paths(self, *names):
        """The absolute paths of ``names`` in DEST's git directory."""
        dest = self.request.dest
        args = [arg for name in names for arg in ("--git-path", name)]
        return [os.path.join(dest, path) for path in
                git("rev-parse", *args, cwd=dest).splitlines()]

    def set_sparse_profile(self, commit):
        dest, profile = self.request.dest, self.request.sparseprofile
        patterns = _blob_at(self.store, commit, profile)
        if patterns is None:
            raise Abort("sparse profile %s does not exist at revision %s"
                        % (profile, commit),
                        hint="check the path; it is relative to the "
                        "repository root")
        current = git("rev-parse", "--git-path", "info/sparse-checkout",
                      cwd=dest).strip()
        path = os.path.join(dest, current)
        try:
            with open(path) as fh:
                if fh.read() == patterns:
                    self.say("(sparse profile %s already set)", profile)
                    return
        except FileNotFoundError:
            pass
        self.say("(setting sparse config to profile %s)", profile)
        if partialtree.state(dest) == "cone":
            partialtree.leave_cone(dest)
        partialtree.enable_worktree_config(dest)
        git("config", "--worktree", "core.sparseCheckout", "true", cwd=dest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_atomically(path, patterns)

    def update(self, commit, created):
        dest, store = self.request.dest, self.store
        changed = self.changed_tracked_files(created)
        # beside a reuse's checkout, which leaves one of the two cores
        # idle; before a whole tree is written (tens of seconds at
        # Firefox's size), so that the marks, which make another run walk
        # from every ref, last no longer than the walk
        walking = self.walk_pulled()
        if created:
            self.check_pulled(walking)
            walking = None
        try:
            with cleantree.trusting_all_but(changed) as trusted:
                git(*_checkout_settings(dest, created), *trusted, "checkout",
                    "--quiet", "--force", "--detach", commit, cwd=dest,
                    env=partialtree.offline_env())
                if created and trusted:
                    # git leaves what it wrote for the monitor to vouch
                    # for: one comparison now, while the files are fresh
                    # in memory, spares the first reuse one
                    git(*trusted, "update-index", "-q", "--refresh",
                        cwd=dest, env=partialtree.offline_env())
        except CommandError as failure:
            self.check_pulled(walking)
            # a fresh checkout failing means the store is damaged
            self.warn("(checkout failed: %s; deleting %s)",
                      failure.stderr.strip(), store if created else dest)
            if created:
                self.remove_store(store)
            else:
                self.remove_dest()
            raise pooledcheckout.Restart()
        self.check_pulled(walking)
        self.after_update()
        if created:
            self.only_tracked = True
        if self.request.layout == "alternates":
            with self.store_lock(store):
                git("update-ref", "refs/checkouts/%s" % _key(dest), commit,
                    cwd=store)

    def changed_tracked_files(self, created):
        """``(answer, names)``: where the checkout's monitor answer goes,
        and the tracked files of DEST that differ from the index: none in
        a new DEST, else those the comparison beside the pull found
        (``cleantree.changed_files``) while the index is still the one it
        read.  None (the checkout compares every file itself) in a sparse
        checkout, or where there was no such comparison: a DEST taken
        from the ready trees or in the worktree layout, an index repaired
        since (comparing now would cost what git's own comparison
        does)."""
        comparing, self.comparing = self.comparing, None
        dest = self.request.dest
        if not created and comparing and time.monotonic() \
                - self.compared_at > COMPARISON_TRUSTED_FOR:
            self.note("(the pull took long: the checkout compares every "
                      "file itself)")
            comparing = None
        if not (created or comparing) or self.sparse_request() \
                or partialtree.state(dest) != "full":
            return None
        try:
            index, answer = self.git_paths("index", _ANSWER)
        except CommandError:
            return None
        if created:
            return answer, b""
        found = _result(comparing)
        if not found or found[0] != cleantree.index_checksum(index):
            return None
        return answer, found[1]

    def working_state(self):
        """HEAD, and what differs from it.  Every tracked file has just
        been compared with the index (by ``git checkout --force``, or
        beside the pull, ``cleantree.changed_files``) and those that
        differed written by the checkout, which exits non-zero when it
        cannot, so a second walk of the tree (``git status``) would find
        nothing new:
        verification reads HEAD, and with --purge, where DEST is not known
        to hold only tracked files (the purge ran ``git clean``), what
        ``git status`` lists untracked or ignored.  After a purge from the
        record, what the checkout may have left untracked is looked at
        again (``cleantree.leftovers``); anything there and DEST is purged
        and verified as without a record."""
        dest = self.request.dest
        head = git("rev-parse", "HEAD", cwd=dest).strip()
        if self.purged is not None:
            found = self.purged
            try:
                left = cleantree.leftovers(dest, self.store, found.record[0],
                                           head, found.kept)
            except cleantree.Fallback as failure:
                left = [str(failure)]
            if left:
                self.say("(%d entries left untracked by the checkout; "
                         "purging with git clean)", len(left))
                self.only_tracked = False
                self.purged = None
                git("clean", "-ffdx", cwd=dest)
        sparse = self.sparse_problem()
        if self.request.purge and not self.only_tracked:
            dirty = git("status", "--porcelain", "--untracked-files=all",
                        "--ignored", cwd=dest).splitlines()
            return head, dirty and "%d entries" % len(dirty) or sparse
        return head, sparse

    def verify(self, commit):
        super().verify(commit)
        if self.request.purge or self.only_tracked:
            self.record_clean_tree(commit)

    def record_clean_tree(self, commit):
        """Record, for the next purge, that DEST holds only the index
        (``cleantree``): verified so, or made by this attempt.  Best
        effort: without a record the next purge runs ``git clean``."""
        if self.sparse_request():
            return
        dest = self.request.dest
        index, path = self.git_paths("index", cleantree.NAME)
        checksum = cleantree.index_checksum(index)
        purged, self.purged = self.purged, None
        if checksum is None:
            return
        # after a purge from the record, what it found unchanged and the
        # checkout did not touch keeps its stat data: one lstat less for
        # each of 40,000 directories at Firefox's size
        previous = purged.record if purged else cleantree.read(path)
        recorded = None
        try:
            try:
                if previous is None:
                    raise cleantree.Fallback("no record")
                dirs, touched = cleantree.changed_directories(
                    self.store, previous[0], commit, previous[2])
                if purged:
                    recorded = purged.still_recorded(touched)
            except cleantree.Fallback:
                dirs = cleantree.directories(self.store, commit)
            cleantree.write(path, dest, commit, checksum, dirs, recorded)
        except (cleantree.Fallback, OSError):
            pass


# Helpers ---------------------------------------------------------------------

def _own_repositories_only(dest):
    """git run by the checkout reads the pool's and DEST's repositories
    and no other: not one the caller's environment names (``GIT_DIR``
    and the rest of ``git rev-parse --local-env-vars``, set when a hook
    runs the command), nor, from DEST, a repository above it (DEST's own
    ``.git`` damaged, git would take its parent's), and it reads objects
    as they are (a replace ref planted in DEST would check out another
    tree under the commit's name)."""
    for name in git("rev-parse", "--local-env-vars").split():
        os.environ.pop(name, None)
    os.environ["GIT_NO_REPLACE_OBJECTS"] = "1"
    os.environ["GIT_CEILING_DIRECTORIES"] = os.path.dirname(
        os.path.realpath(dest))


def _names_another_tree(dest):
    """Whether DEST's config makes it bare or names another working
    tree (``core.worktree``)."""
    config = gitconfig.read(dest, r"^core\.(worktree|bare)$")
    return config.get("core.worktree") is not None \
        or config.boolean("core.bare", False)


def _in_thread(function, *args):
    """A future of ``function(*args)``, called in a thread of its own."""
    future = concurrent.futures.Future()

    def call():
        try:
            future.set_result(function(*args))
        except BaseException as exc:  # re-raised by future.result()
            future.set_exception(exc)
    threading.Thread(target=call, daemon=True).start()
    return future


def _inspected(index):
    """``(checksum, damage)``: ``_index_damage`` of the index file
    ``index``, and the checksum of the index it read."""
    before = cleantree.index_checksum(index)
    damage = _index_damage(index)
    if before is None or cleantree.index_checksum(index) != before:
        raise cleantree.Fallback("the index changed while it was read")
    return before, damage


def _result(future):
    """What ``future`` (``_in_thread``) returned; None if it raised
    ``cleantree.Fallback``."""
    try:
        return future.result()
    except cleantree.Fallback:
        return None


def _local_absolute(url):
    """``url``, or the absolute path of a relative one naming a directory
    here: git runs in the store, where a relative path names nothing (as
    ``hg robustcheckout`` does, a relative source is the caller's)."""
    if "://" in url or os.path.isabs(url) or not os.path.isdir(url):
        return url
    return os.path.abspath(url)


def _transient(exc):
    if isinstance(exc, CommandError):
        match = _TRANSIENT.search(exc.stderr)
        if match:
            lines = [line for line in exc.stderr.strip().splitlines()
                     if match.group(0) in line]
            return lines[0].strip() if lines else match.group(0)
        return None
    return pooling.transient_socket_error(exc)


def _ambiguous(revision, detail):
    return Abort("--revision argument is ambiguous: %s %s"
                 % (revision, detail),
                 hint="give more of the commit (up to 40 hex digits)")


def _shared_store(dotgit):
    """The store a checkout's ``.git`` shares, or None when it shares
    none."""
    if os.path.isfile(dotgit):
        with open(dotgit) as fh:
            text = fh.read()
        if not text.startswith("gitdir: "):
            return None
        worktree_dir = os.path.normpath(os.path.join(
            os.path.dirname(dotgit), text[len("gitdir: "):].strip()))
        return os.path.dirname(os.path.dirname(worktree_dir))
    try:
        with open(os.path.join(dotgit, "objects", "info", "alternates")) as fh:
            objects = fh.read().strip()
    except FileNotFoundError:
        return None
    return os.path.dirname(objects) if objects else None


def _stale_git_files(store):
    """Git's ``*.lock`` files and temporary packs under the store: under
    the store's lock no live git process writes there, so they are
    leftovers of killed ones."""
    stale = []
    for top in ("refs", "objects/pack"):
        for dirpath, _dirs, files in os.walk(os.path.join(store, top)):
            stale.extend(os.path.join(dirpath, name) for name in files
                         if name.endswith(".lock")
                         or name.startswith(("tmp_", ".tmp-")))
    stale.extend(os.path.join(store, name)
                 for name in ("packed-refs.lock", "config.lock", "HEAD.lock",
                              "shallow.lock")
                 if os.path.exists(os.path.join(store, name)))
    return stale


def _blob_at(store, commit, path):
    """The text of ``path`` at ``commit`` in the store (dulwich), or None."""
    objects = _objects(store)
    tree = objects[objects[commit.encode()].tree]
    try:
        _mode, sha = tree.lookup_path(objects.__getitem__, path.encode())
    except KeyError:
        return None
    blob = objects[sha]
    return blob.data.decode() if blob.type_name == b"blob" else None


def _objects(path):
    """The object store of the repository ``path`` (dulwich);
    ``NotGitRepository`` when it is none.  dulwich refuses a blobless
    store's ``extensions.partialClone``: its objects are read as any."""
    try:
        return Repo(path).object_store
    except UnsupportedExtension as exc:
        if str(exc).lower() != "partialclone":
            raise NotGitRepository("%s: extension %s" % (path, exc))
        return DiskObjectStore(os.path.join(path, "objects"))


def _head_missing(dest):
    """True when DEST is detached at a commit its objects lack (an unborn
    branch, in a checkout never updated, is not missing)."""
    try:
        git("symbolic-ref", "--quiet", "HEAD", cwd=dest)
        return False
    except CommandError:
        pass
    return not _head_resolves(dest)


def _head_resolves(dest):
    """True when DEST's HEAD names a commit its objects hold."""
    try:
        git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=dest)
        return True
    except CommandError:
        return False


def _index_damage(path):
    """What is wrong with the git index file ``path`` (its header or its
    trailing checksum over the rest), or None; a missing index is not
    damage, nor one written without a checksum (``index.skipHash``)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as failure:
        return "unreadable (%s)" % failure.strerror
    if len(data) < 12 + 20:
        return "truncated to %d bytes" % len(data)
    if data[:4] != b"DIRC":
        return "no index signature"
    version = int.from_bytes(data[4:8], "big")
    if version not in (2, 3, 4):
        return "unknown index version %d" % version
    if data[-20:] == bytes(20):
        return None
    # SHA-1, or SHA-256 in a repository of that object format
    for hash_ in (hashlib.sha1, hashlib.sha256):
        size = hash_().digest_size
        if hash_(data[:-size]).digest() == data[-size:]:
            return None
    return "checksum mismatch"


def _checkout_settings(dest, created):
    """git's ``-c`` options for the update: a new index in version 4
    (paths prefix-compressed: at Firefox's size 33 MB, not 57, to read
    and hash on every command); parallel checkout, one worker per core,
    as run-task sets it, unless ``checkout.workers`` is configured."""
    settings = ["-c", "index.version=4"] if created else []
    if gitconfig.read(dest, r"^checkout\.workers$").get(
            "checkout.workers") is None:
        settings += ["-c", "checkout.workers=0"]
    return settings


def _is_sparse(dest):
    return gitconfig.read(dest, r"^core\.sparsecheckout$").boolean(
        "core.sparsecheckout", False)


def _key(text):
    """A short name for a URL or a path, safe in file and ref names."""
    # surrogateescape: a path that is not UTF-8 is still a name git takes
    return hashlib.sha256(os.fsencode(text)).hexdigest()[:20]


def _write_atomically(path, text):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
