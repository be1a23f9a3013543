# sharepool.py - robust checkouts from a pool of shared stores, for CI
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""check out any revision fast and safely from a pool of shared stores (robustcheckout)

CI workers check out the same repositories over and over.  ``hg
robustcheckout URL DEST`` keeps one store per repository in a pool
directory and makes DEST a share of it (a working copy whose history lives
in the pool), so only the first checkout on a machine clones; later ones
pull what is missing, or nothing, and update.  It is a drop-in for
Mozilla's command of the same name::

  [extensions]
  sharepool =

  [share]
  pool = /builds/hg-shared

  $ hg robustcheckout -r 5f8a1c9e0b2d https://hg.example.org/repo /builds/checkout
  $ hg robustcheckout -b default --purge https://hg.example.org/repo /builds/checkout

What it does, in order (each step is timed, see ``--timings``):

resolve
  Exactly one of ``-r/--revision`` (12 to 40 hex digits of a node) or
  ``-b/--branch``.  The pool is ``--sharebase``, else ``share.pool``.
  The pool entry is named by the hex of the remote's revision 0, so every
  URL serving the same repository shares one store.  A branch is resolved
  on the remote, once.
ensure store
  Under the pool entry's lock (the lock core Mercurial's ``share.pool``
  takes too), a missing store is cloned with stream clone, or from clone
  bundles when the server offers them (``ui.clonebundles``), into a
  hidden directory that is renamed into place when complete: a killed
  clone never leaves half a store.  ``--upstream URL`` seeds the store
  from another server (a mirror) first.  A store that is missing its
  ``requires`` file or the requirements ``store``, ``fncache`` and
  ``dotencode``, or is not a readable repository, is deleted and cloned
  again; an abandoned transaction is rolled back with ``hg recover``, and
  the store is cloned again if that fails.
pull
  Only when the store lacks the revision: under the store's lock, from
  URL, just the wanted head.  A revision that is not on the server, or a
  prefix matching several nodes, aborts with a hint.
share
  DEST becomes a share of the store.  An existing DEST that is not a
  share, shares a store that no longer exists, shares a store outside the
  pool, shares an unrelated repository's store, or has a working
  directory parent the store does not know, is deleted and shared again.
  A DEST that exists and is not a Mercurial checkout is left alone
  (abort).
purge
  With ``--purge``, and only when DEST already existed: untracked and
  ignored files are removed.
update
  ``hg update --clean`` to the full node.  With ``--sparseprofile PATH``
  (needs the ``sparse`` extension) the sparse config becomes that profile
  alone; a profile missing at the revision aborts.  As in robustcheckout,
  an existing non-sparse checkout is not made sparse, nor the reverse.
  ``-U`` skips purge, update and verify.
verify
  The working directory's parent must be the requested node and ``hg
  status`` must be clean (with ``--purge``, no unknown or ignored files
  either); otherwise DEST is deleted and checked out again.
disk
  Prints the bytes the store and the checkout use on disk (hardlinked
  files counted once) and the free space left (``sharepool.disk-report``).

Every recovery prints what it does, in parentheses, so a CI log explains
itself.  After a failure in any step, or a ``kill -9`` at any moment, the
next run finishes the job.

Network operations (looking up, cloning, pulling) that fail in a way a
retry may cure -- "stream ended unexpectedly", an HTTP 5xx, a reset,
refused or timed-out connection, an SSL error -- are retried: the n-th
retry waits ``(2^n - 1) * sharepool.retry-backoff`` seconds plus a random
jitter between ``sharepool.retry-jitter-min`` and ``-max``.  All network
operations of one run share ``--networkattempts`` (default
``sharepool.network-attempts``) attempts.  ``http.timeout`` defaults to
600 seconds here, so a stalled server counts as a failure instead of
hanging the job.

Any number of processes may use one pool at once.  Exactly one of them
clones or pulls a given store; the others print that they wait for its
lock, then reuse what it fetched.  A lock is taken over only when its
owner is gone (its host is this host and its pid is dead, as Mercurial's
own locks decide); a live owner is waited for, up to
``sharepool.lock-timeout`` seconds.

``--timings`` (or ``sharepool.timings``) prints one JSON line,
``{"robustcheckout": {...}}``, with the seconds of each step, the total,
the node, the store and what happened (``cloned``, ``pulled``,
``network_failures``, ``restarts``, ``result``).

Example config::

  [sharepool]
  network-attempts = 5
  retry-backoff = 1.5
  retry-jitter-min = 1.0
  retry-jitter-max = 5.0
  lock-timeout = 3600
  timings = true
"""

import errno
import os
import re
import ssl
import time

from mercurial.i18n import _
from mercurial.node import hex, nullid, nullrev
from mercurial import (
    commands,
    error,
    exchange,
    extensions,
    hg,
    lock as lockmod,
    merge as mergemod,
    pycompat,
    registrar,
    scmutil,
    util,
    vfs as vfsmod,
)
from mercurial.utils import urlutil

from vcsperf import pooling

try:
    from mercurial.repo import factory as repofactory  # Mercurial 7.2
    from mercurial.cmd_impls import clone as cloneimpl
except ImportError:
    repofactory = cloneimpl = hg

urlerr = util.urlerr

testedwith = b'6.9 7.0 7.2'
minimumhgversion = b'6.9'

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'sharepool', b'network-attempts',
           default=pooling.DEFAULT_ATTEMPTS)
configitem(b'sharepool', b'retry-backoff', default=pooling.DEFAULT_BACKOFF)
configitem(b'sharepool', b'retry-jitter-min', default=pooling.DEFAULT_JITTER[0])
configitem(b'sharepool', b'retry-jitter-max', default=pooling.DEFAULT_JITTER[1])
configitem(b'sharepool', b'lock-timeout', default=3600)
configitem(b'sharepool', b'stream', default=True)
configitem(b'sharepool', b'timings', default=False)
configitem(b'sharepool', b'disk-report', default=True)

#: Requirements every pooled store must have (robustcheckout's list).
REQUIRED = {b'store', b'fncache', b'dotencode'}
#: How often damage found and repaired mid-run may restart the run.
MAX_RESTARTS = 2
HTTP_TIMEOUT = b'600'
_POOLED_SHAREDPATH = re.compile(br'[0-9a-f]{40}/\.hg$')


@command(
    b'robustcheckout',
    [
        (b'', b'upstream', b'', _(b'URL of a repository to clone the store '
                                  b'from first (e.g. a mirror)'), _(b'URL')),
        (b'r', b'revision', b'', _(b'revision to check out: 12 to 40 hex '
                                   b'digits of its node'), _(b'REV')),
        (b'b', b'branch', b'', _(b'branch to check out (resolved on the '
                                 b'remote)'), _(b'BRANCH')),
        (b'', b'purge', False, _(b'remove untracked and ignored files')),
        (b'', b'sharebase', b'', _(b'directory of the pooled stores '
                                   b'(default: share.pool)'), _(b'DIR')),
        (b'', b'networkattempts', 0, _(b'network attempts before giving up '
                                       b'(default: '
                                       b'sharepool.network-attempts, 3)'),
         _(b'N')),
        (b'', b'sparseprofile', b'', _(b'sparse profile to check out (a '
                                       b'path in the repository)'),
         _(b'PATH')),
        (b'U', b'noupdate', False, _(b'do not update the working '
                                     b'directory')),
        (b'', b'timings', False, _(b'print a JSON line of per-step '
                                   b'timings')),
    ],
    _(b'[OPTION]... URL DEST'),
    norepo=True,
    helpcategory=command.CATEGORY_REMOTE_REPO_MANAGEMENT,
)
def robustcheckout(ui, url, dest, **opts):
    """check out a revision into DEST, sharing a pooled store

    DEST ends up a share of ``<pool>/<hex of revision 0>`` with its
    working directory at the requested node and nothing else in it; see
    :hg:`help sharepool` for every step, recovery and setting.

    Returns 0 on success.
    """
    request = _Request(ui, url, dest, opts)
    _tune_for_ci(ui)
    run = _Run(ui, request)
    try:
        run.checkout()
        run.timer.facts['result'] = 'ok'
    except BaseException:
        run.timer.facts['result'] = 'error'
        raise
    finally:
        run.close()
        if opts['timings'] or ui.configbool(b'sharepool', b'timings'):
            line = run.timer.json_line('robustcheckout')
            ui.write(pycompat.bytestr(line) + b'\n')
    return 0


class _Request:
    """The command's arguments, checked."""

    def __init__(self, ui, url, dest, opts):
        self.revision = opts['revision'].lower()
        self.branch = opts['branch']
        if bool(self.revision) == bool(self.branch):
            raise error.InputError(
                _(b'specify exactly one of --revision or --branch'),
                hint=_(b'-r NODE checks out exactly that changeset; -b '
                       b'NAME whatever the server names so now'))
        if self.revision and not re.match(br'^[0-9a-f]{12,40}$',
                                          self.revision):
            raise error.InputError(
                _(b'--revision must be a SHA-1 fragment 12-40 characters '
                  b'long'),
                hint=_(b'use -b for branch names, bookmarks and tags'))
        sharebase = opts['sharebase'] or ui.config(b'share', b'pool')
        if not sharebase:
            raise error.InputError(
                _(b'share base directory not defined; refusing to operate'),
                hint=_(b'define share.pool config option or pass '
                       b'--sharebase'))
        self.sharebase = os.path.realpath(util.expandpath(sharebase))
        self.url = url
        self.upstream = opts['upstream'] or None
        self.dest = os.path.abspath(util.expandpath(dest))
        self.purge = opts['purge']
        self.noupdate = opts['noupdate']
        self.sparseprofile = opts['sparseprofile'] or None
        if self.sparseprofile:
            try:
                extensions.find(b'sparse')
            except KeyError:
                raise error.InputError(
                    _(b'sparse extension must be enabled to use '
                      b'--sparseprofile'),
                    hint=_(b'add "sparse =" to the [extensions] section'))
        self.attempts = (opts['networkattempts']
                         or ui.configint(b'sharepool', b'network-attempts'))
        if self.attempts < 1:
            raise error.InputError(_(b'--networkattempts must be at least 1'))

    @property
    def wanted(self):
        return self.revision or self.branch


def _tune_for_ci(ui):
    """robustcheckout's settings for unattended runs, unless configured:
    progress every second even without a terminal, a socket timeout so a
    stalled server fails instead of hanging, and no background file
    closing (it only pays with anti-virus scanners)."""
    defaults = [
        (b'progress', b'delay', b'1.0'),
        (b'progress', b'refresh', b'1.0'),
        (b'progress', b'assume-tty', b'true'),
        (b'http', b'timeout', HTTP_TIMEOUT),
        (b'worker', b'backgroundclose', b'false'),
    ]
    for section, name, value in defaults:
        if not ui.hasconfig(section, name):
            ui.setconfig(section, name, value, b'sharepool')
    # Mercurial's repository locks wait ui.timeout seconds and say so at
    # once (timeout.warn = 0); a clone by another process may take longer.
    timeout = ui.configint(b'sharepool', b'lock-timeout')
    ui.setconfig(b'ui', b'timeout', b'%d' % timeout, b'sharepool')
    ui.setconfig(b'ui', b'timeout.warn', b'0', b'sharepool')


class _Restart(Exception):
    """A step found damage; the run starts over from ``resolve`` after
    saying ``problem`` and deleting ``discard`` (outside every lock the
    step held)."""

    def __init__(self, problem, discard):
        super().__init__(problem)
        self.problem = problem
        self.discard = discard


class _Run:
    """One robustcheckout: the steps, in order, sharing the network
    attempts, the timer and what was learnt (store, node)."""

    def __init__(self, ui, request):
        self.ui = ui
        self.request = request
        self.timer = pooling.StepTimer()
        self.attempts = pooling.NetworkAttempts(
            request.attempts,
            backoff=ui.configwith(float, b'sharepool', b'retry-backoff'),
            jitter=(ui.configwith(float, b'sharepool', b'retry-jitter-min'),
                    ui.configwith(float, b'sharepool', b'retry-jitter-max')))
        self.remote = self.remote_url = None
        self.revision = request.revision
        self.timer.facts.update(cloned=False, pulled=False, restarts=0,
                                network_failures=0)

    def close(self):
        self.timer.facts['network_failures'] = self.attempts.failures
        self.disconnect()

    def checkout(self):
        request = self.request
        self.ui.status(_(b'ensuring %s@%s is available at %s\n')
                       % (urlutil.hidepassword(request.url), request.wanted,
                          request.dest))
        for restart in range(MAX_RESTARTS + 1):
            try:
                return self._checkout_once()
            except _Restart as damage:
                self.ui.warn(b'(%s)\n' % damage.problem)
                pooling.discard(damage.discard)
                if restart == MAX_RESTARTS:
                    raise error.Abort(
                        _(b'giving up after %d attempts to repair the store '
                          b'and checkout') % (MAX_RESTARTS + 1),
                        hint=_(b'see the messages above'))
                self.timer.facts['restarts'] += 1
                self.ui.warn(_(b'(attempting checkout from beginning)\n'))

    def _checkout_once(self):
        step = self.timer.step
        with step('resolve'):
            root = self.resolve()
        storepath = os.path.join(self.request.sharebase, hex(root))
        self.timer.facts['store'] = os.fsdecode(storepath)
        with step('store'):
            self.ensure_store(storepath, root)
        with step('pull'):
            node = self.pull(storepath)
        self.timer.facts['node'] = pycompat.sysstr(hex(node))
        with step('share'):
            repo, existed = self.ensure_share(storepath)
        if self.request.noupdate:
            self.ui.status(_(b'(skipping update since -U specified)\n'))
        else:
            if self.request.purge and existed:
                with step('purge'):
                    self.purge(repo)
            with step('update'):
                self.update(repo, node, storepath)
            with step('verify'):
                self.verify(node)
        if self.ui.configbool(b'sharepool', b'disk-report'):
            with step('disk'):
                self.report_disk(storepath)

    # resolve -------------------------------------------------------------

    def resolve(self):
        """The remote's root node; a branch becomes the node it points to
        now, for the rest of the run."""
        url = self.request.url
        if self.request.branch:
            root, node = self.network(
                lambda: self.lookup(url, [b'0', self.request.branch]))
            self.revision = hex(node)
            self.ui.warn(_(b'(remote resolved %s to %s; result is not '
                           b'deterministic)\n')
                         % (self.request.branch, self.revision))
        else:
            (root,) = self.network(lambda: self.lookup(url, [b'0']))
        return root

    def lookup(self, url, keys):
        """The nodes ``keys`` name on ``url``, in one round trip."""
        remote = self.connect(url)
        with remote.commandexecutor() as executor:
            futures = [executor.callcommand(b'lookup', {b'key': key})
                       for key in keys]
        nodes = []
        for key, future in zip(keys, futures):
            try:
                node = future.result()
            except error.RepoError as inst:
                raise _lookup_abort(url, key, pycompat.bytestr(inst))
            if node == nullid:
                raise _lookup_abort(url, key, _(b'it names the null '
                                                 b'revision'))
            nodes.append(node)
        return nodes

    def connect(self, url):
        if self.remote_url != url:
            self.disconnect()
        if self.remote is None:
            self.remote = repofactory.peer(self.ui, {}, url)
            self.remote_url = url
        return self.remote

    def disconnect(self):
        if self.remote is not None:
            self.remote.close()
        self.remote = self.remote_url = None

    def network(self, operation):
        """Run a network operation within the run's attempts."""
        def report(reason, failed, limit, delay):
            self.ui.warn(b'%s\n' % pycompat.bytestr(reason))
            self.ui.warn(_(b'(retrying after network failure on attempt '
                           b'%d of %d)\n') % (failed, limit))
            self.ui.warn(_(b'(waiting %.2fs before retry)\n') % delay)

        def attempt():
            try:
                return operation()
            except BaseException:
                # a connection that failed is not reused by the next attempt
                self.disconnect()
                raise

        try:
            return self.attempts.call(attempt, _transient, report)
        except pooling.GaveUp as gaveup:
            raise error.Abort(
                _(b'reached maximum number of network attempts; giving up '
                  b'(%d attempts; last failure: %s)')
                % (gaveup.attempts, pycompat.bytestr(gaveup.reason)),
                hint=_(b'raise --networkattempts, or check the server'))

    # ensure store --------------------------------------------------------

    def ensure_store(self, storepath, root):
        """Make ``storepath`` a healthy store, cloning it if needed, under
        the pool entry's lock."""
        sharebase, name = os.path.split(storepath)
        os.makedirs(sharebase, exist_ok=True)
        with self.pool_lock(sharebase, name):
            for leftover in pooling.discarded_leftovers(sharebase, name):
                self.ui.warn(_(b'(removing %s, left by an interrupted '
                               b'clone or removal)\n')
                             % os.fsencode(leftover))
                pooling.discard(leftover)
            problem = (_store_problem(self.ui, storepath)
                       or self.recover_if_abandoned(storepath))
            if problem:
                self.ui.warn(_(b'(%s; deleting shared store)\n') % problem)
                pooling.discard(storepath)
            if os.path.exists(storepath):
                self.ui.status(_(b'(sharing from existing pooled repository '
                                 b'%s)\n') % name)
            else:
                self.clone(storepath, root)

    def pool_lock(self, sharebase, name):
        """The lock core Mercurial's share.pool takes for the entry
        ``name``: Mercurial's lock, which takes over a dead owner's lock.
        A live owner is waited for, polling ten times a second (Mercurial
        polls once a second, which made the last of eight waiters idle
        for seconds after the clone was done)."""
        vfs = vfsmod.vfs(sharebase)
        desc = _(b'pooled store %s') % name
        timeout = self.ui.configint(b'sharepool', b'lock-timeout')
        start = time.monotonic()
        told = False
        while True:
            try:
                return lockmod.lock(vfs, name + b'.lock', timeout=0,
                                    desc=desc)
            except error.LockHeld as held:
                waited = time.monotonic() - start
                if waited >= timeout:
                    raise error.LockHeld(errno.ETIMEDOUT, held.filename,
                                         desc, held.locker)
                if not told:
                    host, _sep, pid = held.locker.rpartition(b':')
                    self.ui.warn(_(b'waiting for lock on %s held by process '
                                   b'%r on host %r\n')
                                 % (desc, pycompat.bytestr(pid),
                                    pycompat.bytestr(host)))
                    told = True
                time.sleep(0.1)

    def recover_if_abandoned(self, storepath):
        """Roll back a transaction its process abandoned; a problem when
        that fails."""
        if not os.path.exists(os.path.join(storepath, b'.hg', b'store',
                                            b'journal')):
            return None
        repo = repofactory.repository(self.ui, storepath)
        # A live pull has a journal too: only its lock tells them apart,
        # and Mercurial takes a lock over only from a dead owner.
        with repo.lock():
            if not repo.svfs.exists(b'journal'):
                return None
            self.ui.warn(_(b'(abandoned transaction found; trying to '
                           b'recover)\n'))
            try:
                if repo.recover():
                    return None
            except (error.StorageError, error.RepoError, OSError) as inst:
                self.ui.warn(_(b'(recover failed: %s)\n')
                             % pycompat.bytestr(inst))
        return _(b'could not recover repo state')

    def clone(self, storepath, root):
        """Clone the store into a hidden sibling and rename it into place:
        a clone killed midway leaves only the sibling, which the next
        holder of the pool lock removes."""
        sharebase, name = os.path.split(storepath)
        source = self.request.upstream or self.request.url
        partial = os.path.join(sharebase, b'.%s.cloning-%d'
                               % (name, os.getpid()))
        self.ui.status(_(b'(cloning %s into new pooled repository %s)\n')
                       % (urlutil.hidepassword(source), name))

        def attempt():
            pooling.discard(partial)
            cloneimpl.clone(self.ui, {}, source, dest=partial, update=False,
                            stream=self.ui.configbool(b'sharepool',
                                                      b'stream'))

        self.network(attempt)
        repo = repofactory.repository(self.ui, partial)
        if len(repo) == 0 or repo.changelog.node(0) != root:
            pooling.discard(partial)
            raise error.Abort(
                _(b'%s is not the same repository as %s (revision 0 '
                  b'differs)') % (source, self.request.url),
                hint=_(b'check --upstream'))
        os.rename(partial, storepath)
        self.timer.facts['cloned'] = True

    # pull ----------------------------------------------------------------

    def pull(self, storepath):
        """The full node of the wanted revision, pulled into the store if
        it lacks it; one process at a time pulls into a store, the others
        wait for its lock and then find the revision there."""
        repo = repofactory.repository(self.ui, storepath)
        node = _local_node(repo, self.revision)
        if node is not None:
            return node
        with repo.lock():
            repo.invalidate()
            node = _local_node(repo, self.revision)
            if node is not None:
                self.ui.status(_(b'(%s was pulled by another process while '
                                 b'we waited; not pulling)\n')
                               % self.revision)
                return node
            self.ui.status(_(b'(pulling to obtain %s)\n')
                           % self.request.wanted)
            return self.network(lambda: self._pull(repo, storepath))

    def _pull(self, repo, storepath):
        url = self.request.url
        (node,) = self.lookup(url, [self.revision])
        if not hex(node).startswith(self.revision):
            raise error.Abort(
                _(b'--revision argument is ambiguous: %s resolves to %s on '
                  b'%s') % (self.revision, hex(node),
                            urlutil.hidepassword(url)),
                hint=_(b'must be the first 12+ characters of a SHA-1 '
                       b'fragment'))
        if repo.changelog.hasnode(node):
            self.ui.status(_(b'(revision already present locally; not '
                             b'pulling)\n'))
            return node
        try:
            pulled = exchange.pull(repo, self.connect(url), heads=[node])
        except error.Abort as inst:
            if inst.message.startswith(b'repository is unrelated'):
                raise _Restart(_(b'repository is unrelated; deleting shared '
                                 b'store'), storepath)
            raise
        except error.StorageError as inst:
            raise _corruption(inst, storepath)
        if not pulled.rheads:
            raise error.Abort(_(b'unable to pull requested revision %s')
                              % hex(node))
        self.timer.facts['pulled'] = True
        return node

    # share ---------------------------------------------------------------

    def ensure_share(self, storepath):
        """DEST as a share of ``storepath``, and whether it already was
        one."""
        dest = self.request.dest
        problem = _share_problem(self.ui, dest, storepath)
        if problem:
            self.ui.warn(_(b'(%s; deleting destination)\n') % problem)
            pooling.discard(dest)
        if os.path.exists(os.path.join(dest, b'.hg')):
            self.ui.status(_(b'(existing repository shared store: %s)\n')
                           % storepath)
            repo = repofactory.repository(self.ui, dest)
            self.check_sparse_unchanged(repo)
            return repo, True
        if os.path.isdir(dest) and os.listdir(dest):
            raise error.Abort(
                _(b'destination %s exists but no .hg directory') % dest,
                hint=_(b'remove it, or choose another destination'))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        store = repofactory.repository(self.ui, storepath)
        repo = cloneimpl.share(self.ui, store, dest=dest, update=False,
                               bookmarks=False, defaultpath=self.request.url)
        return repo, False

    def check_sparse_unchanged(self, repo):
        """robustcheckout's rule: a checkout other tools may use is never
        switched between sparse and full."""
        sparse = repo.vfs.exists(b'sparse')
        if self.request.sparseprofile and not sparse:
            raise error.Abort(
                _(b'cannot enable sparse profile on existing non-sparse '
                  b'checkout'),
                hint=_(b'use a separate working directory to use sparse'))
        if sparse and not self.request.sparseprofile:
            raise error.Abort(
                _(b'cannot use non-sparse checkout on existing sparse '
                  b'checkout'),
                hint=_(b'use a separate working directory to use sparse'))

    # purge, update, verify, disk -----------------------------------------

    def purge(self, repo):
        self.ui.status(_(b'(purging working directory)\n'))
        with repo.wlock():
            removed = mergemod.purge(
                repo, scmutil.matchall(repo), unknown=True, ignored=True,
                removeemptydirs=True, abortonerror=True)
        self.ui.status(_(b'(purged %d files)\n') % len(removed))

    def update(self, repo, node, storepath):
        profile = self.request.sparseprofile
        try:
            if profile:
                self.set_sparse_profile(repo, node, profile)
            if commands.update(self.ui, repo, rev=hex(node), clean=True):
                raise error.Abort(_(b'error updating'))
        except error.StorageError as inst:
            raise _corruption(inst, storepath)
        self.ui.status(_(b'updated to %s\n') % hex(node))

    def set_sparse_profile(self, repo, node, profile):
        from mercurial import sparse

        if profile not in repo[node]:
            raise error.Abort(
                _(b'sparse profile %s does not exist at revision %s')
                % (profile, hex(node)),
                hint=_(b'check the path; it is relative to the repository '
                       b'root'))
        includes, excludes, profiles = sparse.parseconfig(
            repo.ui, repo.vfs.tryread(b'sparse'), b'sparse')
        if profiles == {profile} and not includes and not excludes:
            self.ui.status(_(b'(sparse profile %s already set)\n') % profile)
            return
        self.ui.status(_(b'(setting sparse config to profile %s)\n')
                       % profile)
        with repo.wlock():
            sparse._updateconfigandrefreshwdir(repo, [], [], [profile],
                                               force=True)

    def verify(self, node):
        """The working directory's parent is ``node`` and nothing differs
        from it; else DEST is deleted and the run starts over."""
        repo = repofactory.repository(self.ui, self.request.dest)
        parent = repo.dirstate.p1()
        if parent != node:
            problem = (_(b'working directory parent is %s, not %s')
                       % (hex(parent), hex(node)))
        else:
            purged = self.request.purge
            with repo.wlock():
                st = repo.status(unknown=purged, ignored=purged)
            counts = [b'%d %s' % (len(files), kind) for files, kind in (
                (st.modified, b'modified'), (st.added, b'added'),
                (st.removed, b'removed'), (st.deleted, b'missing'),
                (st.unknown, b'unknown'), (st.ignored, b'ignored')) if files]
            problem = counts and (_(b'working directory not clean after '
                                    b'update: %s') % b', '.join(counts))
        if problem:
            raise _Restart(problem + _(b'; deleting destination'),
                           self.request.dest)
        self.ui.status(_(b'(verified: working directory is %s and clean)\n')
                       % hex(node)[:12])

    def report_disk(self, storepath):
        store = pooling.disk_usage(storepath)
        checkout = pooling.disk_usage(self.request.dest)
        free = pooling.free_space(self.request.dest)
        self.timer.facts.update(store_bytes=store, checkout_bytes=checkout,
                                free_bytes=free)
        self.ui.status(_(b'(disk: pooled store %s, checkout %s, %s free)\n')
                       % tuple(pycompat.bytestr(pooling.format_bytes(n))
                               for n in (store, checkout, free)))


def _corruption(inst, storepath):
    return _Restart(_(b'repo corruption: %s; deleting shared store')
                    % pycompat.bytestr(inst), storepath)


def _local_node(repo, prefix):
    """The node of the store that ``prefix`` names, or None.  A prefix of
    several nodes, or that is also the name of a bookmark, tag or branch
    pointing elsewhere, aborts: which one was meant cannot be known."""
    repo = repo.unfiltered()
    try:
        node = scmutil.resolvehexnodeidprefix(repo, prefix)
    except error.AmbiguousPrefixLookupError:
        raise error.Abort(
            _(b'--revision argument is ambiguous: %s matches several '
              b'revisions') % prefix,
            hint=_(b'give more of the node (up to 40 hex digits)'))
    if node is None or repo.changelog.rev(node) == nullrev:
        return None
    if len(prefix) < len(hex(node)):
        try:
            named = repo.names.singlenode(repo, prefix)
        except KeyError:
            named = node
        if named != node:
            raise error.Abort(
                _(b'--revision argument is ambiguous: %s is a prefix of %s '
                  b'and names %s') % (prefix, hex(node), hex(named)),
                hint=_(b'give more of the node (up to 40 hex digits)'))
    return node


def _lookup_abort(url, key, message):
    """The abort for a failed remote lookup of ``key``."""
    where = urlutil.hidepassword(url)
    if key == b'0':
        return error.Abort(
            _(b'unable to resolve root revision from clone source %s: %s')
            % (where, message), hint=_(b'is the repository empty?'))
    if b'ambiguous' in message:
        return error.Abort(
            _(b'--revision argument is ambiguous: %s matches several '
              b'revisions on %s') % (key, where),
            hint=_(b'give more of the node (up to 40 hex digits)'))
    return error.Abort(
        _(b'%s not found on %s: %s') % (key, where, message),
        hint=_(b'check the revision, and that it was pushed there'))


def _store_problem(ui, storepath):
    """Why the store at ``storepath`` must be cloned again, or None."""
    if not os.path.exists(storepath):
        return None
    hgdir = os.path.join(storepath, b'.hg')
    try:
        with open(os.path.join(hgdir, b'requires'), 'rb') as fh:
            present = set(fh.read().splitlines())
    except OSError:
        return _(b'shared store missing requires file')
    # share-safe stores keep the store's requirements in the store
    try:
        with open(os.path.join(hgdir, b'store', b'requires'), 'rb') as fh:
            present.update(fh.read().splitlines())
    except FileNotFoundError:
        pass
    missing = REQUIRED - present
    if missing:
        return _(b'shared store missing requirements: %s') % b', '.join(
            sorted(missing))
    try:
        repo = repofactory.repository(ui, storepath)
        len(repo.unfiltered().changelog)
    except error.RequirementError:
        raise
    except (error.RepoError, error.StorageError) as inst:
        return _(b'shared store is not a usable repository: %s') % (
            pycompat.bytestr(inst))
    return None


def _share_problem(ui, dest, storepath):
    """Why DEST must be deleted before sharing ``storepath``, or None."""
    hgdir = os.path.join(dest, b'.hg')
    if not os.path.exists(hgdir):
        return None
    try:
        with open(os.path.join(hgdir, b'sharedpath'), 'rb') as fh:
            shared = fh.read().strip()
    except OSError:
        return _(b'destination is not shared')
    expected = os.path.join(storepath, b'.hg')
    if not os.path.isabs(shared):
        shared = os.path.normpath(os.path.join(hgdir, shared))
    if not os.path.exists(shared):
        return _(b'shared store %s does not exist') % shared
    if not _POOLED_SHAREDPATH.search(shared.replace(b'\\', b'/')):
        return _(b'shared store %s does not belong to pooled storage') % (
            shared)
    if os.path.realpath(shared) != os.path.realpath(expected):
        return _(b'destination shares %s, an unrelated repository') % shared
    try:
        repo = repofactory.repository(ui, dest)
        parent = repo.dirstate.p1()
        if not repo.unfiltered().changelog.hasnode(parent):
            return _(b'working directory parent %s is not in the store') % (
                hex(parent))
    except (error.RepoError, error.StorageError) as inst:
        return _(b'destination is not a usable share: %s') % (
            pycompat.bytestr(inst))
    return None


def _transient(exc):
    """Why ``exc`` is a network failure worth retrying, or None."""
    if isinstance(exc, error.PeerTransportError):
        # a response cut short, or garbled HTTP framing
        return pycompat.sysstr(exc.message)
    if isinstance(exc, error.Abort):
        message = exc.message
        if message.startswith((b'stream ended unexpectedly',
                               b'connection ended unexpectedly')):
            return pycompat.sysstr(message)
        return None
    if isinstance(exc, error.ResponseError):
        return 'bad response from server: %s' % pycompat.sysstr(
            b' '.join(pycompat.bytestr(arg) for arg in exc.args))
    if isinstance(exc, urlerr.httperror):
        code = getattr(exc, 'code', None) or 0
        if code >= 500:
            return 'HTTP error %d: %s' % (code, exc.msg)
        return None
    if isinstance(exc, urlerr.urlerror):
        return 'socket error: %s' % (exc.reason,)
    if isinstance(exc, ssl.SSLError):
        return 'ssl error: %s' % exc
    if isinstance(exc, OSError) and exc.errno is None and exc.args[1:]:
        # httppeer wraps http.client's exceptions as OSError(None, inst)
        return 'http error: %r' % (exc.args[1],)
    return pooling.transient_socket_error(exc)
