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
Mozilla's command of the same name: the same options, messages, exit codes
and ``PERFHERDER_DATA`` line.  Enable it under either name::

  [extensions]
  sharepool =
  # or, where an hgrc already says robustcheckout = /path/to/it:
  robustcheckout =

  [share]
  pool = /builds/hg-shared

  $ hg robustcheckout -r 5f8a1c9e0b2d https://hg.example.org/repo /builds/checkout
  $ hg robustcheckout -b default --purge https://hg.example.org/repo /builds/checkout

What it does, in order:

destination
  Exactly one of ``-r/--revision`` (12 to 40 hex digits of a node) or
  ``-b/--branch``.  A DEST that exists and is not a Mercurial checkout is
  left alone (abort; an empty directory is fine).  A DEST that is not a
  share, or shares a store that no longer exists or is outside a pool, is
  deleted.  As in robustcheckout, an existing non-sparse checkout is not
  made sparse, nor the reverse.
store
  The pool is ``--sharebase``, else ``share.pool``; the store of a
  repository is named by the hex of the remote's revision 0, so every URL
  serving the same repository shares one store.  A store that is missing
  its ``requires`` file or the requirements ``store``, ``fncache`` and
  ``dotencode`` is deleted with its destination.  A missing store is
  cloned, under the pool entry's lock (the lock core Mercurial's
  ``share.pool`` takes too), with stream clone (unless
  ``sharepool.stream`` is false) or clone bundles when the server offers
  them, into a hidden directory renamed into place when
  complete: a killed clone never leaves half a store.  ``--upstream URL``
  seeds it from another server (a mirror).  A new DEST becomes a share of
  the store and pulls the server's heads, as ``hg clone`` with
  ``share.pool`` does.
pull
  Only when the store lacks the revision, or for ``--branch`` (resolved on
  the server, once): just the wanted head, into DEST (whose lock comes
  before the store's).  A pull that finds an unrelated repository deletes
  DEST; an abandoned transaction is rolled back with ``hg recover`` (the
  store is deleted if that fails); then the run starts over.
purge
  With ``--purge``, and only when DEST already existed: untracked and
  ignored files are removed, outside a sparse profile too, and the
  directories they leave empty.
update
  ``hg update --clean`` to the full node.  A DEST whose dirstate Mercurial
  cannot parse is deleted first; dirstate entries that disagree with the
  parent's files (one lost, or renamed by a flipped byte) are rebuilt
  from its manifest, before purge.  With ``--sparseprofile PATH``
  (needs the ``sparse`` extension) the sparse config becomes that profile
  alone; a profile missing at the revision aborts.  ``-U`` skips purge,
  update and verify.  In an existing full checkout the working
  directory is walked once: the status purge takes (or, without
  ``--purge``, one of tracked files) is the one the update starts from.
  Writing a new checkout, each path is audited once, at its write, for a
  link in the directories above it (core audits it twice), and each
  directory once for a ``.hg``.
verify
  The working directory's parent must be the requested node and ``hg
  status`` must be clean (with ``--purge``, no unknown or ignored files
  either); otherwise DEST is deleted and checked out again.  After the
  single walk above, only the files the update was to write, restore or
  remove are looked at again (the walk found every other one clean,
  seconds before).  A new full checkout, which the update wrote whole,
  is checked against its dirstate, not walked: the parent's files, each
  tracked and clean as far as the update recorded; a sparse one is
  walked whole.  ``--verbose``
  says so, and prints how many files purge removed and the bytes the
  store and the checkout use on disk (``sharepool.disk-report`` prints
  that line always).

Damage to the store's data found by any step (a revlog error, or the
ValueError Mercurial's C index raises for a damaged index file) deletes
the store, under the pool entry's lock, and the run starts over.  An
update whose worker process died is run again without workers, to learn
why.

Every recovery prints what it does, in parentheses, so a CI log explains
itself.  After a failure in any step, or a ``kill -9`` at any moment, the
next run finishes the job.  The steps, their order, the restarts, the
retries, the lock waits and these messages are one engine,
``vcsperf.core.pooledcheckout``, which ``gitbridge checkout`` shares with
Git's steps.

Network operations (looking up, cloning, pulling) that fail in a way a
retry may cure -- "stream ended unexpectedly", an HTTP 5xx, a reset,
refused or timed-out connection, an SSL error -- restart the run after a
wait: the n-th retry waits ``(2^n - 1) * sharepool.retry-backoff`` seconds
plus a random jitter between ``sharepool.retry-jitter-min`` and ``-max``
(robustcheckout's ``robustcheckout.retryjittermin`` and
``robustcheckout.retryjittermax``, in milliseconds, win when set).  A
run makes at most ``--networkattempts`` (default
``sharepool.network-attempts``, 3) attempts.  ``http.timeout``
defaults to 600 seconds here, so a server that stops sending counts as
a failure instead of hanging the job.

A server that trickles (a byte every few seconds) never trips a timeout
per read, so each network step -- the lookup of revision 0 or of the
wanted revision, the clone of a store, a pull -- also has a deadline:
``--networkdeadline SECONDS`` (default ``sharepool.network-deadline``,
3600).  A step still running then is interrupted: the connections of
the run are shut down, so the step fails where it reads, on Mercurial's
own error path (a pull's transaction rolls back), and the failure counts
as a network failure, retried as above.  The default is an hour, as
``sharepool.lock-timeout``: a clone that takes longer makes every other
checkout waiting for that store give up anyway.  Lower it to the longest
clone your network should take, with room to spare.  (The deadline
reaches HTTP and HTTPS connections; an ``ssh://`` peer's pipes are not
interrupted.)  A deadline is at most a year.

A destination that is not a share of a pooled store is removed and
checked out again, as Mozilla's robustcheckout does; one that is, holds
or lies in a local source repository or the share base (a pooled store,
or the pool a purge would delete), is refused instead, before anything
is touched.

Locks.  Any number of processes may use one pool at once; exactly one of
them clones a given store.  A lock found on DEST (its working directory
lock), on the store or on the pool entry is judged by its owner, which
Mercurial writes as host and process id:

- an owner on this host whose process is gone left it: it is taken over
  at once (for DEST and the store, as robustcheckout does, by deleting
  them: the killed process may have left them half written);
- an owner on another host cannot be asked.  In CI that host is usually
  an earlier container of the same task, gone for good, so with
  ``sharepool.private-cache = true`` (the cache belongs to this machine
  alone) the lock is taken over at once; otherwise once it is
  ``sharepool.foreign-lock-grace`` seconds old (default: ``http.timeout``,
  600 seconds here).  Enabled under the name ``robustcheckout``, whose
  contract is a cache private to one machine, ``private-cache`` defaults
  to true; under ``sharepool``, to false;
- a live owner on this host is waited for, up to ``sharepool.lock-timeout``
  seconds.

Waiting always prints who holds the lock and for how long it will wait.

``--timings`` (or ``sharepool.timings``) prints one JSON line,
``{"robustcheckout": {...}}``, with the seconds of each step that ran
(``clone`` of a new checkout, ``pull``, ``purge``,
``sparse_update_config``, ``update`` or ``update_sparse``, ``verify``,
``disk``, ``remove_wdir``, ``remove_store``), the total, the node, the
store and what happened (``cloned``, ``pulled``, ``network_failures``,
``restarts``, ``result``).  When the environment has
``TASKCLUSTER_INSTANCE_TYPE``, the ``PERFHERDER_DATA:`` line that
Treeherder ingests is printed, as robustcheckout prints it.

``--metricsdir DIR`` (or ``sharepool.metrics-dir``) writes the same as a
metrics file in Prometheus' text format, for node_exporter's textfile
collector (see :hg:`help -e bundlegen`): one file per URL, each sample
with ``vcs="hg"`` and ``repository`` (the URL without user or password):
``vcsperf_checkout_step_duration_seconds{step}`` of the last run,
``vcsperf_checkout_last_run_cloned``, ``vcsperf_checkout_last_run_pulled``
(1 or 0), ``vcsperf_checkout_last_run_network_failures``,
``vcsperf_checkout_last_run_restarts``,
``vcsperf_checkout_last_run_duration_seconds``,
``vcsperf_checkout_last_run_success``,
``vcsperf_checkout_last_success_timestamp_seconds``,
``vcsperf_checkout_last_failure_timestamp_seconds`` and
``vcsperf_checkout_runs_total{outcome}``.  A directory that cannot be
written stops the command before it starts; a file that cannot be
written is a warning.

Example config::

  [sharepool]
  network-attempts = 5
  retry-backoff = 1.5
  retry-jitter-min = 1.0
  retry-jitter-max = 5.0
  lock-timeout = 3600
  network-deadline = 3600
  private-cache = true
  foreign-lock-grace = 600
  timings = true
  metrics-dir = /var/lib/prometheus/node-exporter
"""

import contextlib
import json
import os
import re
import ssl
import stat

from mercurial import (
    commands,
    configitems,
    context,
    error,
    exchange,
    extensions,
    merge as mergemod,
    pathutil,
    policy,
    pycompat,
    registrar,
    scmutil,
    util,
)
from mercurial.i18n import _
from mercurial.node import bin, hex, nullid
from mercurial.utils import stringutil, urlutil

from hgext3rd import _hgcompat, _hgnet
from hgext3rd._hgcompat import cloneimpl, repofactory
from vcsperf.core import errors, metrics, pooledcheckout, pooling

urlerr = util.urlerr
mpatch = policy.importmod('mpatch')

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'sharepool', b'network-attempts',
           default=pooling.DEFAULT_ATTEMPTS)
configitem(b'sharepool', b'retry-backoff', default=pooling.DEFAULT_BACKOFF)
configitem(b'sharepool', b'retry-jitter-min', default=pooling.DEFAULT_JITTER[0])
configitem(b'sharepool', b'retry-jitter-max', default=pooling.DEFAULT_JITTER[1])
configitem(b'sharepool', b'lock-timeout',
           default=pooling.DEFAULT_LOCK_TIMEOUT)
configitem(b'sharepool', b'network-deadline',
           default=pooling.DEFAULT_NETWORK_DEADLINE)
configitem(b'sharepool', b'private-cache',
           default=configitems.dynamicdefault)
configitem(b'sharepool', b'foreign-lock-grace',
           default=configitems.dynamicdefault)
configitem(b'sharepool', b'stream', default=True)
configitem(b'sharepool', b'timings', default=False)
configitem(b'sharepool', b'disk-report', default=False)
configitem(b'sharepool', b'metrics-dir', default=None)
# robustcheckout's names, in milliseconds, for hgrc files written for it
configitem(b'robustcheckout', b'retryjittermin',
           default=configitems.dynamicdefault)
configitem(b'robustcheckout', b'retryjittermax',
           default=configitems.dynamicdefault)

#: Requirements every pooled store must have.
REQUIRED = {b'store', b'fncache', b'dotencode'}
#: What Mercurial's parsers of indexes, patches and dirstates (C code)
#: raise for damaged bytes, beside the StorageError of its revlogs.
_PARSE_ERRORS = (ValueError, IndexError, OverflowError, mpatch.mpatchError)
STORE_DAMAGE = (error.StorageError,) + _PARSE_ERRORS
DIRSTATE_DAMAGE = (error.CorruptedDirstate,) + _PARSE_ERRORS
#: Raised while reading the store, but not damage a new clone repairs: a
#: revision censored on purpose, a bundle part the server should not send.
_NOT_DAMAGE = (error.CensoredNodeError, error.BundleValueError)
_POOLED_SHAREDPATH = re.compile(br'[0-9a-f]{40}/\.hg$')
#: The operations robustcheckout reports to Perfherder, by step name.
PERFHERDER_STEPS = ('remove_wdir', 'remove_store', 'clone', 'pull',
                    'purge', 'sparse_update_config', 'update',
                    'update_sparse')


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
                                       b'sharepool.network-attempts, %d)')
         % pooling.DEFAULT_ATTEMPTS, _(b'N')),
        (b'', b'networkdeadline', 0, _(b'seconds each network step (a '
                                       b'lookup, clone or pull) may take '
                                       b'before it counts as a network '
                                       b'failure (default: '
                                       b'sharepool.network-deadline, '
                                       b'%d)')
         % pooling.DEFAULT_NETWORK_DEADLINE, _(b'SECONDS')),
        (b'', b'sparseprofile', b'', _(b'sparse profile to check out (a '
                                       b'path in the repository)'),
         _(b'PATH')),
        (b'U', b'noupdate', False, _(b'do not update the working '
                                     b'directory')),
        (b'', b'timings', False, _(b'print a JSON line of per-step '
                                   b'timings')),
        (b'', b'metricsdir', b'', _(b'write a metrics file of the run there '
                                    b'(default: sharepool.metrics-dir)'),
         _(b'DIR')),
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
    ui.warn(_(b'(using Mercurial %s)\n') % util.version())
    _tune_for_ci(ui)
    run = _Run(ui, request)
    run.metrics_dir = request.metrics_dir
    try:
        run.run()
    finally:
        if opts['timings'] or ui.configbool(b'sharepool', b'timings'):
            ui.write(pycompat.bytestr(run.timings_line()) + b'\n')
        if 'TASKCLUSTER_INSTANCE_TYPE' in os.environ:
            ui.write(b'PERFHERDER_DATA: %s\n'
                     % pycompat.bytestr(_perfherder(run, url)))
    return 0


def extsetup(ui):
    _hgcompat.report_our_crashes()
    # DEST is a share: users of the checkout run `hg share` commands on it
    try:
        extensions.find(b'share')
    except KeyError:
        extensions.load(ui, b'share', None)


class _Request:
    """The command's arguments, checked (robustcheckout's messages)."""

    def __init__(self, ui, url, dest, opts):
        self.revision = opts['revision'].lower()
        self.branch = opts['branch']
        sharebase = opts['sharebase'] or ui.config(b'share', b'pool')
        self.sharebase = sharebase and os.path.realpath(
            util.expandpath(sharebase))
        self.url = url
        self.upstream = opts['upstream'] or None
        self.dest_arg = dest
        self.dest = os.path.abspath(util.expandpath(dest))
        self.attempts = (opts['networkattempts']
                         or ui.configint(b'sharepool', b'network-attempts'))
        self.network_deadline = (
            opts['networkdeadline']
            or ui.configwith(float, b'sharepool', b'network-deadline'))
        pooledcheckout.check_request(
            _abort, self.revision, self.branch, self.sharebase,
            self.attempts, self.network_deadline, self.dest, dest,
            [self.url, self.upstream], revision_hints=False)
        self.purge = opts['purge']
        self.noupdate = opts['noupdate']
        self.metrics_dir = None
        directory = opts['metricsdir'] or ui.config(b'sharepool',
                                                    b'metrics-dir')
        if directory:
            try:
                self.metrics_dir = metrics.check_directory(
                    pycompat.fsdecode(util.expandpath(directory)),
                    'sharepool.metrics-dir')
            except errors.Abort as err:
                raise error.Abort(os.fsencode(str(err)),
                                  hint=os.fsencode(err.hint or ''))
        self.sparseprofile = opts['sparseprofile'] or None
        if self.sparseprofile:
            try:
                extensions.find(b'sparse')
            except KeyError:
                raise error.Abort(_(b'sparse extension must be enabled to '
                                    b'use --sparseprofile'))

    @property
    def wanted(self):
        return self.revision or self.branch


def _text(template, *args):
    """A message of the engine's (``vcsperf.core.pooledcheckout``): its
    %-template translated, then formatted with ``args`` as bytes."""
    message = _(pycompat.bytestr(template))
    if not args:
        return message
    return message % tuple(os.fsencode(arg) if isinstance(arg, str)
                           else arg for arg in args)


def _abort(template, *args, hint=None):
    return error.Abort(_text(template, *args), hint=hint and _text(hint))


def _tune_for_ci(ui):
    """robustcheckout's settings for unattended runs, unless configured:
    progress every second even without a terminal, a socket timeout so a
    stalled server fails instead of hanging, and no background file
    closing (it only pays with anti-virus scanners)."""
    defaults = [
        (b'progress', b'delay', b'1.0'),
        (b'progress', b'refresh', b'1.0'),
        (b'progress', b'assume-tty', b'true'),
        (b'http', b'timeout', b'%d' % pooling.DEFAULT_HTTP_TIMEOUT),
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


def _jitter(ui):
    """The retry jitter range in seconds."""
    low = ui.configwith(float, b'sharepool', b'retry-jitter-min')
    high = ui.configwith(float, b'sharepool', b'retry-jitter-max')
    legacy = (ui.configint(b'robustcheckout', b'retryjittermin', None),
              ui.configint(b'robustcheckout', b'retryjittermax', None))
    if legacy[0] is not None:
        low = legacy[0] / 1000.0
    if legacy[1] is not None:
        high = legacy[1] / 1000.0
    return low, high


def _lock_policy(ui):
    private = ui.configbool(b'sharepool', b'private-cache',
                            _enabled_as_robustcheckout())
    grace = ui.configint(b'sharepool', b'foreign-lock-grace',
                         ui.configint(b'http', b'timeout'))
    return pooling.LockPolicy(
        private=private, grace=grace,
        timeout=ui.configint(b'sharepool', b'lock-timeout'))


def _enabled_as_robustcheckout():
    try:
        return extensions.find(b'robustcheckout') is not None
    except KeyError:
        return False


class _Run(pooledcheckout.PooledCheckout):
    """One robustcheckout: the engine (``vcsperf.core.pooledcheckout``)
    with Mercurial's steps, and robustcheckout's words."""

    TIMINGS_NAME = 'robustcheckout'
    VCS = 'hg'

    def __init__(self, ui, request):
        super().__init__(
            request,
            pooling.NetworkAttempts(
                request.attempts,
                backoff=ui.configwith(float, b'sharepool', b'retry-backoff'),
                jitter=_jitter(ui)),
            _lock_policy(ui))
        self.ui = ui
        self.remote = self.remote_url = None
        self.root = self.repo = None
        #: The status taken before the update (``_StatusBefore``), if any.
        self.before = None
        #: Whether the update wrote the whole tree into a new checkout.
        self.written_whole = False
        #: Every HTTP(S) connection Mercurial opened during the run (the
        #: peers', the clone's, a clone bundle's), for the deadline.
        self.connections = _hgnet.Connections()

    def run(self):
        with _hgnet.recording_connections(self.connections.record):
            super().run()

    def interrupt_network(self):
        """Shut down the sockets of the run's connections: Mercurial's
        HTTP client runs in this process, and a blocked read then ends
        as a cut stream, which Mercurial handles as it does any (a pull's
        transaction rolls back)."""
        self.connections.cut()

    # voice ---------------------------------------------------------------

    def text(self, template, *args):
        return _text(template, *args)

    def say(self, template, *args):
        self.ui.write(self.text(template, *args) + b'\n')

    def note(self, template, *args):
        self.ui.note(self.text(template, *args) + b'\n')

    def warn(self, template, *args):
        self.ui.warn(self.text(template, *args) + b'\n')

    def error(self, template, *args, hint=None):
        return _abort(template, *args, hint=hint)

    def network_gave_up(self, gaveup):
        # robustcheckout's message, trailing newline included
        return error.Abort(_(b'reached maximum number of network '
                             b'attempts; giving up\n'))

    def transient(self, exc):
        return _transient(exc)

    @property
    def shown_url(self):
        return urlutil.hidepassword(self.request.url)

    @property
    def shown_dest(self):
        return self.request.dest_arg

    def wants_disk_report(self):
        return (self.ui.verbose
                or self.ui.configbool(b'sharepool', b'disk-report'))

    # network -------------------------------------------------------------

    def lookup(self, url, keys):
        """The nodes ``keys`` name on ``url``, in one round trip; a
        malformed answer is a ``ResponseError`` (a network failure)."""
        remote = self.connect(url)
        nodes = []
        try:
            with remote.commandexecutor() as executor:
                futures = [executor.callcommand(b'lookup', {b'key': key})
                           for key in keys]
            for key, future in zip(keys, futures):
                try:
                    node = future.result()
                except error.RepoError as inst:
                    raise _lookup_abort(url, key, pycompat.bytestr(inst),
                                        is_server_answer=True)
                if node == nullid:
                    raise _lookup_abort(url, key, _(b'it names the null '
                                                     b'revision'))
                nodes.append(node)
        except ValueError as inst:
            # Mercurial decodes the answer with int() and bin(): a garbled
            # one (a lying proxy, a flipped bit) raises what they raise
            raise error.ResponseError(_(b'malformed answer to lookup:'),
                                      stringutil.forcebytestr(inst))
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

    @contextlib.contextmanager
    def reading_store(self, storepath):
        """Damage found in the store's data while reading it deletes the
        store and starts the run over, as robustcheckout does for a
        RevlogError; Mercurial's C parsers raise ValueError and its kin
        for a damaged index, which robustcheckout does not catch."""
        try:
            yield
        except _NOT_DAMAGE:
            raise
        except STORE_DAMAGE as inst:
            self.ui.warn(_(b'(repo corruption: %s; deleting shared store)\n')
                         % stringutil.forcebytestr(inst))
            self.remove_store(storepath)
            raise pooledcheckout.Restart(announce=False)

    # destination ---------------------------------------------------------

    def check_destination(self):
        """Leave DEST absent or a share of some pooled store; abort when it
        is something else a user may care about."""
        dest = self.request.dest
        hgdir = os.path.join(dest, b'.hg')
        if not os.path.exists(hgdir):
            if os.path.isdir(dest) and not os.listdir(dest):
                return
            if os.path.lexists(dest):
                raise error.Abort(_(b'destination exists but no .hg '
                                    b'directory'))
            return
        self.check_sparse_unchanged(
            os.path.exists(os.path.join(hgdir, b'sparse')))
        try:
            with open(os.path.join(hgdir, b'sharedpath'), 'rb') as fh:
                shared = fh.read().strip()
        except FileNotFoundError:
            self.ui.warn(_(b'(destination is not shared; deleting)\n'))
            return self.remove_dest()
        self.ui.write(_(b'(existing repository shared store: %s)\n')
                      % shared)
        if not os.path.exists(os.path.join(hgdir, shared)):
            self.ui.warn(_(b'(shared store does not exist; deleting '
                           b'destination)\n'))
            return self.remove_dest()
        if not _POOLED_SHAREDPATH.search(shared.replace(b'\\', b'/')):
            self.ui.warn(_(b'(shared store does not belong to pooled '
                           b'storage; deleting destination to improve '
                           b'efficiency)\n'))
            return self.remove_dest()
        if self.stale_lock(os.path.join(hgdir, b'wlock'),
                           _(b'working directory of %s')
                           % self.request.dest_arg):
            self.ui.warn(_(b'(dest has an active working directory lock; '
                           b'assuming it is left over from a previous '
                           b'process and that the destination is corrupt; '
                           b'deleting it just to be sure)\n'))
            self.remove_dest()

    # store ---------------------------------------------------------------

    def prepare_store(self):
        """The store named by the remote's revision 0, deleted (with DEST)
        when it is locked by a process that is gone or lacks
        requirements; a missing one is cloned in ``create_share``."""
        request = self.request
        (self.root,) = self.network('lookup', lambda: self.lookup(
            request.upstream or request.url, [b'0']))
        storepath = os.path.join(request.sharebase, hex(self.root))
        if not os.path.exists(storepath):
            return storepath
        lock = os.path.join(storepath, b'.hg', b'store', b'lock')
        what = _(b'store of pooled repository %s') % os.path.basename(
            storepath)
        if self.stale_lock(lock, what):
            problem = _(b'shared store has an active lock; assuming it is '
                        b'left over from a previous process and that the '
                        b'store is corrupt; deleting store and destination '
                        b'just to be sure')
        else:
            problem = _store_problem(storepath)
        if problem:
            self.ui.warn(b'(%s)\n' % problem)
            if os.path.lexists(request.dest):
                self.remove_dest()
            self.remove_store(storepath)
        return storepath

    def is_shared(self, storepath):
        # check_destination left DEST absent or a share of a pooled store
        return os.path.exists(os.path.join(self.request.dest, b'.hg'))

    def create_share(self, storepath, node):
        """DEST as a new share of the store, cloned first if missing, then
        pulled from the clone source as ``hg clone`` with a pool does."""
        request = self.request
        sharebase, name = os.path.split(storepath)
        os.makedirs(os.path.dirname(request.dest), exist_ok=True)
        os.makedirs(sharebase, exist_ok=True)
        source = request.upstream or request.url
        if request.upstream:
            self.ui.write(_(b'(cloning from upstream repo %s)\n')
                          % urlutil.hidepassword(request.upstream))
        with self.store_lock(storepath):
            self.remove_leftovers(storepath)
            if os.path.exists(storepath):
                self.ui.status(_(b'(sharing from existing pooled repository '
                                 b'%s)\n') % name)
            else:
                self.ui.status(_(b'(sharing from new pooled repository '
                                 b'%s)\n') % name)
                self.network('clone', lambda: self.clone(storepath,
                                                         source))
        store = repofactory.repository(self.ui, storepath)
        repo = cloneimpl.share(self.ui, store, dest=request.dest,
                               update=False, bookmarks=False,
                               defaultpath=request.url)
        self.pull(repo, storepath, source, None)

    def clone(self, storepath, source):
        """Clone the store into a hidden sibling and rename it into place:
        a clone killed midway leaves only the sibling, which the next
        holder of the pool lock removes."""
        sharebase, name = os.path.split(storepath)
        partial = os.path.join(sharebase, b'.%s.cloning-%d'
                               % (name, os.getpid()))
        pooling.discard(partial)
        try:
            cloneimpl.clone(self.ui, {}, source, dest=partial, update=False,
                            stream=self.ui.configbool(b'sharepool',
                                                      b'stream'))
        except BaseException:
            pooling.discard(partial)
            raise
        repo = repofactory.repository(self.ui, partial)
        if len(repo) == 0 or repo.changelog.node(0) != self.root:
            pooling.discard(partial)
            raise error.Abort(
                _(b'%s is not the same repository as %s (revision 0 '
                  b'differs)') % (source, self.request.url),
                hint=_(b'check --upstream'))
        os.rename(partial, storepath)
        self.store_cloned()

    # pull ----------------------------------------------------------------

    def obtain(self, storepath):
        """The full node to check out (hex), pulled into DEST's store if
        it lacks it; a branch is resolved on the server every time."""
        request = self.request
        self.repo = repo = repofactory.repository(self.ui, request.dest)
        if request.revision:
            with self.reading_store(storepath):
                node = _local_node(repo, request.revision)
            if node is not None:
                return hex(node)
        self.ui.write(_(b'(pulling to obtain %s)\n') % request.wanted)
        (node,) = self.network('lookup', lambda: self.lookup(
            request.url, [request.wanted]))
        if request.branch:
            self.ui.warn(_(b'(remote resolved %s to %s; result is not '
                           b'deterministic)\n') % (request.branch, hex(node)))
        elif not hex(node).startswith(request.revision):
            raise _ambiguous()
        with self.reading_store(storepath):
            present = repo.unfiltered().changelog.hasnode(node)
        if present:
            self.ui.warn(_(b'(revision already present locally; not '
                           b'pulling)\n'))
            return hex(node)
        with self.pulling():
            pulled = self.pull(repo, storepath, request.url, [node])
            if not pulled.rheads:
                raise error.Abort(_(b'unable to pull requested revision'))
        return hex(node)

    def pull(self, repo, storepath, url, heads):
        """Pull ``heads`` (None: all) from ``url`` into the share ``repo``;
        damage found on the way is repaired and restarts the run."""
        try:
            with self.reading_store(storepath):
                return self.network('pull', lambda: exchange.pull(
                    repo, self.connect(url), heads=heads))
        except error.Abort as inst:
            if inst.message != _(b'repository is unrelated'):
                raise
            self.ui.warn(_(b'(repository is unrelated; deleting)\n'))
            self.remove_dest()
            raise pooledcheckout.Restart(announce=False)
        except error.RepoError as inst:
            if pycompat.bytestr(inst) != _(b'abandoned transaction found'):
                raise
            self.ui.warn(_(b'(abandoned transaction found; trying to '
                           b'recover)\n'))
            if not _recover(self.ui, repo):
                self.ui.warn(_(b'(could not recover repo state; deleting '
                               b'shared store)\n'))
                self.remove_store(storepath)
            raise pooledcheckout.Restart()

    # working state, purge, update, verify ----------------------------------

    def check_working_state(self, created):
        repo = self.repo
        self.before, self.written_whole = None, False
        if not created:
            self.check_dirstate_readable(repo)
        parent = repo.dirstate.p1()
        if parent != nullid and not repo.unfiltered().changelog.hasnode(
                parent):
            self.start_over('(working directory parent %s is not in the '
                            'shared store; deleting destination)',
                            hex(parent))
        if not created:
            self.check_tracked_files(repo)

    def check_dirstate_readable(self, repo):
        """DEST's dirstate must be readable; one Mercurial cannot parse
        (disk damage, a garbage file) makes DEST a new share."""
        try:
            repo.dirstate.p1()
            b'' in repo.dirstate  # parses every entry
        except DIRSTATE_DAMAGE as inst:
            self.start_over('(working directory state is unreadable: %s; '
                            'deleting destination)',
                            stringutil.forcebytestr(inst))

    def check_tracked_files(self, repo):
        """The dirstate must track the parent's files (in the sparse
        profile), and claim no others are the parent's.  A damaged dirstate
        that still parses may not: a flipped byte in a file name untracks
        the file, which purge then deletes and the update, taking it for
        unchanged, does not restore.  The entries that disagree are rebuilt
        from the parent's manifest, as ``hg debugrebuilddirstate
        --minimal`` does (but an entry a merge brought from the second
        parent is left for the update), so the update compares those
        files' contents."""
        with repo.wlock():
            dirstate = repo.dirstate
            manifest = repo[dirstate.p1()].manifest()
            files = manifest.keys()
            sparse = dirstate._sparsematcher
            if sparse is not None and not sparse.always():
                files = manifest.walk(sparse)
            elif _tracks_exactly(dirstate, manifest):
                return
            files, entries = set(files), set(dirstate)
            untracked = files - entries
            stray = {name for name in entries - files
                     if dirstate.get_entry(name).p1_tracked}
            if not (untracked or stray):
                return
            self.ui.warn(_(b"(working directory state disagrees with its "
                           b"parent's files: %d untracked, %d tracked but "
                           b"not in it; rebuilding those entries)\n")
                         % (len(untracked), len(stray)))
            with dirstate.changing_parents(repo):
                dirstate.rebuild(dirstate.p1(), files, untracked | stray)

    def purge(self):
        repo = self.repo
        if self.request.sparseprofile or _sparse_checkout(repo):
            # the sparse refresh between purge and update changes what
            # the update must compare: it takes its own status
            with repo.wlock(), _outside_sparse_too(repo):
                return len(mergemod.purge(
                    repo, scmutil.matchall(repo), unknown=True,
                    ignored=True, removeemptydirs=True, abortonerror=True))
        with repo.wlock():
            self.before = before = _StatusBefore(repo, purging=True)
            for name in sorted(before.unknown + before.ignored):
                self.ui.note(_(b'removing file %s\n') % name)
                _remove(repo.wvfs.unlink, name)
            # the deepest first: a directory emptied by removing the one
            # in it goes too
            removed = len(before.unknown) + len(before.ignored)
            for name in sorted(before.emptied(repo), reverse=True):
                if not repo.wvfs.listdir(name):
                    self.ui.note(_(b'removing directory %s\n') % name)
                    _remove(repo.wvfs.rmdir, name)
                    removed += 1
        return removed

    def set_sparse_profile(self, node):
        from mercurial import sparse

        repo, profile = self.repo, self.request.sparseprofile
        if profile not in repo[node]:
            raise error.Abort(_(b'sparse profile %s does not exist at '
                                b'revision %s') % (profile, node))
        includes, excludes, profiles = sparse.parseconfig(
            repo.ui, repo.vfs.tryread(b'sparse'), b'sparse')
        if profiles == {profile} and not includes and not excludes:
            self.ui.write(_(b'(sparse profile %s already set; no need to '
                            b'update sparse config)\n') % profile)
            return
        if includes or excludes or profiles:
            self.ui.write(_(b'(replacing existing sparse config with profile '
                            b'%s)\n') % profile)
        else:
            self.ui.write(_(b'(setting sparse config to profile %s)\n')
                          % profile)
        # Refreshing the working directory changes the dirstate, which
        # Mercurial allows only inside a parents change, under the wlock.
        with self.timer.step('sparse_update_config'), repo.wlock(), \
                repo.dirstate.changing_parents(repo):
            added, dropped, conflicting = map(
                len, sparse._updateconfigandrefreshwdir(
                    repo, [], [], [profile], force=True))
        self.ui.status(_(b'%d files added, %d files dropped, %d files '
                         b'conflicting\n') % (added, dropped, conflicting))
        self.ui.write(_(b'(sparse refresh complete)\n'))

    def update(self, node, created):
        repo = self.repo
        self.behaviors.add('empty-wdir' if repo.dirstate.p1() == nullid
                           else 'populated-wdir')
        before = self.before
        sparse = _sparse_checkout(repo)
        self.written_whole = (created and repo.dirstate.p1() == nullid
                              and not sparse)
        if before is None and not created and not sparse:
            with repo.wlock():
                self.before = before = _StatusBefore(repo, purging=False)
        try:
            with _updating_from(repo, before, node), \
                    _writing_new_tree(repo, node, self.written_whole):
                updated = commands.update(self.ui, repo, rev=node,
                                          clean=True)
        except error.WorkerError:
            # Why a worker died (damage in the store, say) is learnt only
            # where the exception is raised: once more, in this process.
            self.ui.warn(_(b'(an update worker failed; updating again '
                           b'without workers)\n'))
            # verify the whole tree afterwards
            self.before, self.written_whole = None, False
            with repo.ui.configoverride({(b'worker', b'enabled'): False},
                                        b'sharepool'):
                updated = commands.update(self.ui, repo, rev=node,
                                          clean=True)
        if updated:
            raise error.Abort(_(b'error updating'))

    def working_state(self):
        """The parent and what differs from it, read afresh from disk.
        When the update started from the status taken before it (see
        ``_StatusBefore``), that status found every other file clean (and,
        with --purge, purge removed every unknown and ignored one): only
        the files the update was to write or remove are looked at again,
        not the whole tree.  A new checkout that the update wrote whole (a
        write that failed raised) is not walked either: its dirstate must
        hold the revision's files, each as clean as Mercurial can tell
        without looking."""
        repo = repofactory.repository(self.ui, self.request.dest)
        if self.written_whole:
            parent = repo.dirstate.p1()
            # the manifest the update just read, not read again (a
            # Firefox tree's is 33 MB of text); only the dirstate comes
            # afresh from disk
            known = self.repo.unfiltered()
            source = known if known.changelog.hasnode(parent) else repo
            return hex(parent), _written_whole_dirt(
                repo.dirstate, source.unfiltered()[parent].manifest())
        purged = self.request.purge
        before = self.before
        match = None
        if before is not None and before.changed is not None:
            match = scmutil.matchfiles(repo, sorted(before.changed))
        with repo.wlock():
            st = repo.status(match=match, unknown=purged, ignored=purged)
        counts = [b'%d %s' % (len(files), kind) for files, kind in (
            (st.modified, b'modified'), (st.added, b'added'),
            (st.removed, b'removed'), (st.deleted, b'missing'),
            (st.unknown, b'unknown'), (st.ignored, b'ignored')) if files]
        return hex(repo.dirstate.p1()), b', '.join(counts) or None


class _StatusBefore:
    """The working directory's status against its parent, taken once
    before the update and handed to it (``_updating_from``): Mercurial's
    update otherwise walks the whole tree again for a status of its own.
    ``purging``: with unknown and ignored files, and ``directories``, those
    the walk went through, for purge to remove the ones it empties (purge
    removes only unknown and ignored files, which the update's status does
    not hold).  ``changed``: what the update was to write or remove, once
    handed to it: the files that differ between the parent and the
    revision, and those the status found dirty."""

    def __init__(self, repo, purging):
        self.parents = repo.dirstate.parents()
        self.wctx = repo[None]
        match = scmutil.matchall(repo)
        self.directories = []
        if purging:
            match.traversedir = self.directories.append
        status = repo[b'.'].status(self.wctx, match=match,
                                   listunknown=purging, listignored=purging)
        # Mercurial's Rust status lists the directories purge may empty
        # instead of walking them through the matcher
        self.directories.extend(getattr(status, 'empty_dirs', None) or ())
        self.unknown, self.ignored = status.unknown, status.ignored
        self.dirty = (status.modified + status.added + status.removed
                      + status.deleted)
        self.deleted = status.deleted
        self.changed = None

    def emptied(self, repo):
        """The directories the walk went through that may be empty once
        the unknown and ignored files are gone: hg purge lists every one
        of them to learn (tens of thousands in a Firefox tree), but one
        that holds a tracked file still holds it, unless that file is
        missing (``deleted``)."""
        dirstate = repo.dirstate
        missing = set()
        for name in self.deleted:
            while b'/' in name:
                name = name.rsplit(b'/', 1)[0]
                missing.add(name)
        return [name for name in self.directories
                if name in missing or not dirstate.hasdir(name)]

    def hand_over(self, repo, ctx, node):
        """The working context to update ``ctx`` from, or None when the
        status no longer describes the working directory."""
        if (ctx.repo().unfiltered() is not repo.unfiltered()
                or ctx.node() != bin(node)
                or repo.dirstate.parents() != self.parents
                or self.parents[1] != nullid):
            return None
        changed = set(self.dirty)
        changed.update(repo[self.parents[0]].manifest().diff(
            ctx.manifest()))
        self.changed = changed
        return self.wctx


@contextlib.contextmanager
def _updating_from(repo, before, node):
    """Let the clean update to ``node`` start from ``before``'s working
    context (a ``_StatusBefore``, or None: it takes its own)."""
    if before is None:
        yield
        return

    def clean_update(orig, ctx, wc=None):
        if wc is None:
            wc = before.hand_over(repo, ctx, node)
        return orig(ctx, wc=wc)

    with extensions.wrappedfunction(mergemod, 'clean_update', clean_update):
        yield


@contextlib.contextmanager
def _writing_new_tree(repo, node, written_whole):
    """Let the update that writes a new checkout whole skip the checks it
    repeats for every file.  Core's update audits a file's path twice
    (``clearunknown``, then the write), each time with an lstat and a look
    for ``.hg`` in every directory above it, and looks for a directory in
    the file's place.  In a directory this run created empty, whose
    revision holds no path that is also a directory of another (a crafted
    manifest could hold a symbolic link ``a`` and a file ``a/b``), only
    another process could put anything in a file's place: the path is
    audited once, at the write, by ``_NewTreeAuditor``.  Case-folding file
    systems and revisions with such paths keep core's checks."""
    if not (written_whole and _paths_stand_apart(repo, node)):
        yield
        return

    def clearunknown(orig, self):
        pass

    wvfs = repo.wvfs
    core_audit = wvfs.audit
    wvfs.audit = _NewTreeAuditor(repo)
    try:
        with extensions.wrappedfunction(context.workingfilectx,
                                        'clearunknown', clearunknown):
            yield
    finally:
        wvfs.audit = core_audit


def _paths_stand_apart(repo, node):
    """Whether the working directory's file system tells case apart and
    no path of ``node``'s revision is also a directory of another."""
    if not util.fscasesensitive(repo.root):
        return False
    manifest = repo.unfiltered()[node].manifest()
    try:
        directories = manifest.dirs()
    except ValueError:
        # a path Mercurial's directory index refuses (``a//b``): core's
        # update says what is wrong with it
        return False
    return not any(name in directories for name in manifest)


class _NewTreeAuditor:
    """Core's audit of a path about to be written, less what it repeats
    for every file: the path's names are checked (``.hg``, ``..``), and
    each directory above it is looked at for a symbolic link, as core does
    before each write, so that a directory another process swaps for a
    link is not followed; whether a directory holds a repository of its
    own (a ``.hg`` in it) is looked at once, when the directory is first
    met, not for every file below it."""

    def __init__(self, repo):
        self._root = repo.root
        self._nested = repo._checknested
        self._names = pathutil.pathauditor(repo.root, callback=self._nested,
                                           realfs=False)
        self._plain = set()

    def __call__(self, path, mode=None):
        self._names(path, mode)
        path = util.localpath(path)
        for prefix in pathutil.finddirs_rev_noroot(path):
            if prefix in self._plain:
                try:
                    st = os.lstat(os.path.join(self._root, prefix))
                except FileNotFoundError:
                    break
                if not stat.S_ISLNK(st.st_mode):
                    continue
            # first met, or now a link: core's own check, which refuses one
            if not pathutil.pathauditor._checkfs_exists(
                    self._root, prefix, path, self._nested):
                break
            self._plain.add(prefix)


def _tracks_exactly(dirstate, manifest):
    """Whether the entries of ``dirstate`` that its parent tracks are
    exactly the files of the parent's ``manifest``: in one pass, without
    the two sets of 400,000 names a Firefox tree would take."""
    tracked = 0
    for name, entry in dirstate.items():
        if entry.p1_tracked:
            if name not in manifest:
                return False
            tracked += 1
    return tracked == len(manifest)


def _written_whole_dirt(dirstate, manifest):
    """What differs between the ``dirstate`` of a checkout the update
    wrote whole and its parent's files (``manifest``), or None."""
    entries = clean = 0
    for name, entry in dirstate.items():
        entries += 1
        clean += entry.maybe_clean and name in manifest
    if entries == clean == len(manifest):
        return None
    return b"%d dirstate entries not clean files of the parent, %d of its " \
        b"files not clean" % (entries - clean, len(manifest) - clean)


def _sparse_checkout(repo):
    return repo.vfs.exists(b'sparse')


def _remove(remove, name):
    try:
        remove(name)
    except OSError:
        raise error.Abort(_(b'%s cannot be removed') % name)


class _outside_sparse_too:
    """Let the dirstate see files outside the sparse profile: ``hg purge``
    walks only inside it, and would leave what lies outside."""

    def __init__(self, repo):
        self.dirstate = repo.dirstate

    def __enter__(self):
        self.saved = self.dirstate._sparsematchfn
        self.dirstate._sparsematchfn = None

    def __exit__(self, *exc):
        self.dirstate._sparsematchfn = self.saved


def _recover(ui, repo):
    """Roll back an abandoned transaction; False when that fails."""
    try:
        return repo.recover()
    except (error.StorageError, error.RepoError, OSError) as inst:
        ui.warn(_(b'(recover failed: %s)\n') % pycompat.bytestr(inst))
        return False


def _ambiguous():
    return error.Abort(_(b'--revision argument is ambiguous'),
                       hint=_(b'must be the first 12+ characters of a SHA-1 '
                              b'fragment'))


def _local_node(repo, revision):
    """The node of DEST's store that ``revision`` names, or None.  A name
    (branch, bookmark, tag) wins over a node prefix, as in ``hg update``;
    when it names another node, or the prefix matches several nodes, the
    revision is ambiguous."""
    try:
        ctx = scmutil.revsingle(repo, revision)
    except error.AmbiguousPrefixLookupError:
        raise _ambiguous()
    except (error.RepoLookupError, error.FilteredRepoLookupError):
        return None
    if not ctx.hex().startswith(revision):
        raise _ambiguous()
    return ctx.node()


def _lookup_abort(url, key, message, is_server_answer=False):
    """The abort for a failed remote lookup of ``key``: ``message`` is the
    server's error (``is_server_answer``) or ours."""
    where = urlutil.hidepassword(url)
    if key == b'0':
        return error.Abort(
            _(b'unable to resolve root revision from clone source'),
            hint=_(b'is %s an empty repository? (%s)') % (where, message))
    if b'ambiguous' in message:
        return _ambiguous()
    if is_server_answer:
        # robustcheckout's abort is the server's answer as it is
        # (``unknown revision 'X'``, no hint): CI scripts match that line
        # to tell "not pushed yet" from a network failure
        return error.Abort(message)
    return error.Abort(
        _(b'%s not found on %s: %s') % (key, where, message),
        hint=_(b'check the revision, and that it was pushed there'))


def _store_problem(storepath):
    """Why the store at ``storepath`` must be cloned again, or None."""
    hgdir = os.path.join(storepath, b'.hg')
    try:
        with open(os.path.join(hgdir, b'requires'), 'rb') as fh:
            present = set(fh.read().splitlines())
    except OSError:
        return _(b'shared store missing requires file; this is a really odd '
                 b'failure; deleting store and destination')
    # Only a share-safe store keeps its store's requirements apart; without
    # share-safe, store/requires is not read by Mercurial, nor here.
    if b'share-safe' in present:
        try:
            with open(os.path.join(hgdir, b'store', b'requires'),
                      'rb') as fh:
                present.update(fh.read().splitlines())
        except FileNotFoundError:
            pass
    missing = REQUIRED - present
    if missing:
        return _(b'shared store missing requirements: %s; deleting store '
                 b'and destination to ensure optimal behavior') % (
                     b', '.join(sorted(missing)))
    return None


def _perfherder(run, url):
    """robustcheckout's PERFHERDER_DATA: the seconds of each operation,
    then of the whole run under the names Treeherder charts."""
    overall = run.timer.as_dict()['total']
    behaviors = run.behaviors
    suffix = ''.join(tag for flag, tag in (('remove-store', '_rmstore'),
                                           ('remove-wdir', '_rmwdir'))
                     if flag in behaviors)
    checkout = ('sparsecheckout' if run.request.sparseprofile
                else 'fullcheckout')
    wdir = ('emptywdir' if 'empty-wdir' in behaviors
            else 'populatedwdir')
    if 'clone' in behaviors and 'create-store' in behaviors:
        kinds = ['clone', 'clone_' + checkout]
    elif 'pull' in behaviors or 'clone' in behaviors:
        kinds = ['pull', 'pull_' + checkout, 'pull_' + wdir]
    else:
        kinds = ['nopull', 'nopull_' + checkout, 'nopull_' + wdir]
    times = [(name, secs) for name, secs in run.timer.steps.items()
             if name in PERFHERDER_STEPS]
    times.append(('overall', overall))
    times += [('overall_%s%s' % (kind, suffix), overall) for kind in kinds]
    server = urlutil.url(url)
    netloc = pycompat.sysstr(server.host or b'') + (
        ':%s' % pycompat.sysstr(server.port) if server.port else '')
    version = pycompat.sysstr(util.version())
    instance = os.environ['TASKCLUSTER_INSTANCE_TYPE']
    return json.dumps({
        'framework': {'name': 'vcs'},
        'suites': [{'name': name, 'value': secs, 'lowerIsBetter': True,
                    'shouldAlert': False, 'serverUrl': netloc,
                    'hgVersion': version, 'extraOptions': [instance],
                    'subtests': []} for name, secs in times],
    }, sort_keys=True)


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
            return 'http error: %s' % (exc.reason,)
        return None
    if isinstance(exc, urlerr.urlerror):
        return 'socket error: %s' % (exc.reason,)
    if isinstance(exc, ssl.SSLError):
        return 'ssl error: %s' % exc
    if isinstance(exc, OSError) and exc.errno is None and exc.args[1:]:
        # httppeer wraps http.client's exceptions as OSError(None, inst)
        return 'http error: %r' % (exc.args[1],)
    return pooling.transient_socket_error(exc)
