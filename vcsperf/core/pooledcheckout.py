"""The pooled-checkout engine: one checkout from a pool of shared stores,
written once for every version control system.

``hg robustcheckout`` (hgext/sharepool.py) and ``gitbridge checkout``
(gitbridge/checkout.py) are this engine with their system's steps.  The
engine holds what a checkout is:

- the steps, in order (``attempt``): DEST checked; the store found,
  repaired or cloned; DEST made a share of it and the wanted revision
  obtained (in the order the adapter needs, ``SHARE_BEFORE_PULL``);
  DEST's working state checked; purge; update; verify; disk report;
- repairs: a step that finds damage says so, removes it (``remove_dest``,
  ``remove_store``) and raises ``Restart``; the run starts over, at most
  ``MAX_RESTARTS`` times;
- network failures that a retry may cure (``network``) restart the run
  after a wait with backoff and jitter, as robustcheckout does, until the
  request's attempts are spent; so does a network step that outlives the
  request's ``network_deadline`` (``pooling.StepDeadline``), which the
  adapter interrupts (``interrupt_network``);
- locks: waited for while a live process holds them, taken over from dead
  owners (``vcsperf.core.pooling.LockPolicy``), and said so;
- the timings and facts of the JSON timings line, and the texts of all it
  says;
- the rules a request must follow (``check_request``), and with
  ``vcsperf.core.pooling`` the defaults of every setting.

An adapter subclasses ``PooledCheckout`` and supplies its system: how to
say things and raise its user error (messages are %-templates that the
adapter formats, and may translate first), which failures are
transient, and the steps listed under "The adapter's steps".  The engine
imports no version control system.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import (
    Any,
    Callable,
    ContextManager,
    Iterable,
    Iterator,
    NoReturn,
    Protocol,
    TypeVar,
    Union,
)

from vcsperf.core import metrics, pooling, readytrees

#: How often damage found and repaired mid-run may restart the run.
MAX_RESTARTS = 2
#: What ``--revision`` may be: 12 to 40 hex digits of a node or commit.
_REVISION = re.compile("[0-9a-f]{12,40}")
T = TypeVar("T")
#: A path, URL, revision or node as the adapter's system spells it:
#: bytes in Mercurial, text in Git.
Text = Union[str, bytes]
#: The adapter's user error, made from a %-template, its arguments and a
#: hint: ``PooledCheckout.error``.
Error = Callable[..., Exception]


class Request(Protocol):
    """What the engine reads of the adapter's checked request."""

    @property
    def url(self) -> Text:
        ...

    @property
    def wanted(self) -> Text:
        ...

    @property
    def dest(self) -> Text:
        ...

    @property
    def purge(self) -> bool:
        ...

    @property
    def noupdate(self) -> bool:
        ...

    @property
    def sparseprofile(self) -> Text | None:
        ...

    @property
    def network_deadline(self) -> float:
        ...


def check_request(error: Error, revision: Text | None, branch: Text | None,
                  sharebase: Text | None, attempts: int,
                  network_deadline: float, dest: Text, shown_dest: Text,
                  sources: Iterable[Text | None],
                  revision_hints: bool = True,
                  pool_tree: bool = False) -> None:
    """Raise ``error(template, *args, hint=...)`` (the adapter's user
    error, as ``PooledCheckout.error``) for the first rule the request
    breaks: exactly one of a ``revision`` (lower case) and a ``branch``;
    a ``sharebase`` (None when neither given nor configured); at least
    one network attempt; a network deadline ``pooling.valid_deadline``
    takes; a ``dest`` that removing would not destroy what no checkout
    made (``pooling.dest_overlap`` with the URLs in ``sources``), unless
    DEST is a ``pool_tree``: a ready tree, which the pool keeps in its
    share base (``vcsperf.core.readytrees``).  ``revision_hints=False``
    words the revision rules as robustcheckout does, with no hint line:
    its users' scripts and its own test suite (test-revision-branch.t)
    compare stderr whole."""
    which: str | None = None
    if revision_hints:
        which = "-r SHA checks out exactly that commit; -b NAME " \
                "whatever the server names so now"
    if not revision and not branch:
        raise error("must specify one of --revision or --branch",
                    hint=which)
    if revision and branch:
        raise error("cannot specify both --revision and --branch",
                    hint=which)
    if revision and not _REVISION.fullmatch(os.fsdecode(revision)):
        raise error("--revision must be a SHA-1 fragment 12-40 characters "
                    "long", hint=revision_hints and
                    "use -b for branch and tag names" or None)
    if not sharebase:
        raise error("share base directory not defined; refusing to "
                    "operate", hint="define share.pool config option or "
                    "pass --sharebase")
    if os.path.lexists(sharebase) and not os.path.isdir(sharebase):
        raise error("share base %s is not a directory", sharebase,
                    hint="give --sharebase or share.pool a directory of "
                    "its own")
    if attempts < 1:
        raise error("--networkattempts must be at least 1")
    if not pooling.valid_deadline(network_deadline):
        raise error("the network deadline must be a positive number of "
                    "seconds, at most a year", hint="check "
                    "--networkdeadline and sharepool.network-deadline")
    overlap = None if pool_tree else pooling.dest_overlap(
        dest, sharebase, sources)
    if overlap:
        raise error("destination %s is or holds %s; refusing to replace it",
                    shown_dest, overlap,
                    hint="check out into a directory of its own")


class Restart(Exception):
    """A step found damage, said so and removed it: the run starts over.
    ``announce``: say "(attempting checkout from beginning)" first."""

    def __init__(self, announce: bool = True) -> None:
        super().__init__()
        self.announce = announce


class NetworkFailure(Exception):
    """A network operation failed in a way a retry may cure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PooledCheckout:
    """One checkout of ``request`` (url, wanted, dest, sharebase, purge,
    noupdate, sparseprofile, network_deadline), sharing its network
    ``attempts`` (``pooling.NetworkAttempts``), ``lock_policy``, timer
    and what was learnt."""

    #: Whether DEST becomes a share before the wanted revision is obtained
    #: (Mercurial pulls through the share, whose lock comes before the
    #: store's) or after (a Git worktree is added at that commit).
    SHARE_BEFORE_PULL = True
    #: The key of the JSON timings line.
    TIMINGS_NAME = "checkout"
    #: The ``vcs`` label of the metrics file.
    VCS = ""
    #: Where the run writes its metrics file (``write_metrics``): a
    #: directory the adapter checked (``metrics.check_directory``), or
    #: None for no file.
    metrics_dir: str | None = None

    def __init__(self, request: Request, attempts: pooling.NetworkAttempts,
                 lock_policy: pooling.LockPolicy) -> None:
        self.request = request
        self.attempts = attempts
        self.lock_policy = lock_policy
        self.timer = pooling.StepTimer()
        self.timer.facts.update(cloned=False, pulled=False, restarts=0,
                                network_failures=0)
        #: What happened, for robustcheckout's Perfherder names.
        self.behaviors: set[str] = set()
        #: The pooled store of the current attempt.
        self.store: Text | None = None
        #: The ``pooling.StepDeadline`` of the network step running now.
        self.deadline: pooling.StepDeadline | None = None
        #: The ready tree this attempt took as DEST, if any, and the
        #: adapter's ready trees it came from.
        self.ready_tree: str | None = None
        self.taken_from: readytrees.ReadyTrees | None = None

    # The adapter's voice -------------------------------------------------

    def text(self, template: str, *args: Any) -> Any:
        """``template % args`` in the adapter's own kind of string."""
        raise NotImplementedError

    def say(self, template: str, *args: Any) -> None:
        """A line on stdout."""
        raise NotImplementedError

    def note(self, template: str, *args: Any) -> None:
        """A line on stdout that may be kept for verbose runs."""
        self.say(template, *args)

    def warn(self, template: str, *args: Any) -> None:
        """A line on stderr."""
        raise NotImplementedError

    def error(self, template: str, *args: Any,
              hint: str | None = None) -> Exception:
        """The adapter's user error (one ``abort:`` line), to raise."""
        raise NotImplementedError

    def transient(self, exc: Exception) -> str | None:
        """A one-line reason when ``exc`` is a network failure that a
        retry may cure, else None."""
        return pooling.transient_socket_error(exc)

    def disconnect(self) -> None:
        """Drop connections to servers (before a retry, and at the end)."""

    def interrupt_network(self) -> None:
        """Make the network I/O of the step running now fail at once: it
        has outlived its deadline.  Called from another thread, maybe
        more than once (see ``pooling.StepDeadline``).  An adapter whose
        steps run processes may instead hand them ``self.deadline``."""

    @property
    def shown_url(self) -> Text:
        return self.request.url

    @property
    def shown_dest(self) -> Text:
        return self.request.dest

    # The adapter's steps, in the order ``attempt`` runs them ---------------

    def holding_destination(self) -> ContextManager[object]:
        """A context that keeps other checkouts out of DEST during an
        attempt (none: the steps take the system's own lock on DEST)."""
        return contextlib.nullcontext()

    def check_destination(self) -> None:
        """Abort when DEST holds something that is not a checkout; remove
        DEST (``remove_dest``) when it cannot be reused."""
        raise NotImplementedError

    def prepare_store(self) -> Text:
        """The path of a healthy pooled store for the URL (one found
        damaged or locked by a dead process is removed); cloned here, or
        in ``create_share``."""
        raise NotImplementedError

    def is_shared(self, store: Text) -> bool:
        """Whether DEST is already a share of ``store``."""
        raise NotImplementedError

    def create_share(self, store: Text, node: Text | None) -> None:
        """Make DEST a new share of ``store`` (``node``: the wanted
        revision when ``SHARE_BEFORE_PULL`` is false, else None)."""
        raise NotImplementedError

    def obtain(self, store: Text) -> Text:
        """The full node of the wanted revision, pulled (``pulling``) when
        the store lacks it."""
        raise NotImplementedError

    def reading_store(self, store: Text) -> ContextManager[object]:
        """A context in which damage found reading the store's data
        removes the store and restarts the run."""
        return contextlib.nullcontext()

    def check_working_state(self, created: bool) -> None:
        """Before purge and update: repair or remove a DEST whose working
        state is damaged (``created``: DEST was made by this attempt)."""

    def purge(self) -> int:
        """Remove untracked and ignored files from DEST; how many."""
        raise NotImplementedError

    def set_sparse_profile(self, node: Text) -> None:
        """Make the request's sparse profile, as it is at ``node``, DEST's
        only sparse configuration."""
        raise NotImplementedError

    def sparse_request(self) -> bool:
        """Whether the request asks for a sparse checkout (a sparse
        profile, or what else the adapter's system offers)."""
        return bool(self.request.sparseprofile)

    def prepare_update(self, node: Text) -> None:
        """Before the update of DEST to ``node``: its sparse
        configuration, and what else the update needs."""
        if self.request.sparseprofile:
            self.set_sparse_profile(node)

    def update(self, node: Text, created: bool) -> None:
        """Check out ``node`` in DEST."""
        raise NotImplementedError

    def working_state(self) -> tuple[Text, Text | None]:
        """``(parent, dirt)``: the node DEST's working copy stands on, and
        what differs from it (None when clean; with --purge, unknown and
        ignored files count)."""
        raise NotImplementedError

    def wants_disk_report(self) -> bool:
        return True

    def ready_trees(self, store: Text) -> readytrees.ReadyTrees | None:
        """The ready trees of ``store`` a new DEST may be taken from
        (``vcsperf.core.readytrees``), or None: every new DEST is
        written."""
        return None

    def ready_tree_obstacle(self) -> str | None:
        """Why this request cannot use a ready tree, beside a sparse
        profile and ``-U`` (which the engine knows), or None."""
        return None

    # The run -------------------------------------------------------------

    def run(self) -> None:
        """Check out the request; the timer's ``result`` fact says how it
        ended.  Two loops: a network failure ends the attempt and, after a
        wait, starts the run again (``attempts.call``, robustcheckout's
        way); damage repaired mid-run starts it again at once
        (``_attempt_with_repairs``)."""
        try:
            self.attempts.call(self._attempt_with_repairs,
                               self._network_failure, self._retrying)
            self.timer.facts["result"] = "ok"
        except pooling.GaveUp as gaveup:
            self.timer.facts["result"] = "error"
            raise self.network_gave_up(gaveup) from None
        except BaseException:
            self.timer.facts["result"] = "error"
            raise
        finally:
            self.timer.facts["network_failures"] = self.attempts.failures
            self.disconnect()
            if self.metrics_dir is not None:
                self.write_metrics(self.metrics_dir)

    def timings_line(self) -> str:
        return self.timer.json_line(self.TIMINGS_NAME)

    def write_metrics(self, directory: str) -> None:
        """The timings line as a metrics file, one per URL (without its
        user, password and query), with when a checkout of it last succeeded
        and failed; a file that cannot be written is a warning."""
        url = metrics.url_label(os.fsdecode(self.request.url))
        report = metrics.Report(directory, "checkout", url,
                                {"vcs": self.VCS, "repository": url})
        facts = self.timer.facts
        for step, seconds in sorted(self.timer.steps.items()):
            report.set("step_duration_seconds", seconds, "Seconds each "
                       "step of the last checkout took", step=step)
        report.set("last_run_duration_seconds",
                   self.timer.as_dict()["total"],
                   "Seconds the last run took")
        for fact in ("cloned", "pulled"):
            report.set("last_run_%s" % fact, 1 if facts.get(fact) else 0,
                       "1 if the last checkout %s its store, else 0" % fact)
        report.set("last_run_network_failures",
                   facts.get("network_failures") or 0,
                   "Network failures the last checkout retried after")
        report.set("last_run_restarts", facts.get("restarts") or 0,
                   "Times the last checkout started over after repairing "
                   "damage")
        metrics.write_quietly(
            report, "success" if facts.get("result") == "ok" else "failure",
            lambda line: self.warn("%s", line))

    def _network_failure(self, exc: Exception) -> str | None:
        """The reason, said, when ``exc`` ends an attempt on a network
        failure; None for any other exception."""
        if not isinstance(exc, NetworkFailure):
            return None
        self.disconnect()
        self.warn("%s", exc.reason)
        return exc.reason

    def _retrying(self, reason: str, failed: int, limit: int,
                  delay: float) -> None:
        self.warn("(retrying after network failure on attempt %d of %d)",
                  failed, limit)
        self.warn("(waiting %.2fs before retry)", delay)

    def network_gave_up(self, gaveup: pooling.GaveUp) -> Exception:
        """The error that ends a run whose last network attempt failed."""
        return self.error("reached maximum number of network attempts; "
                          "giving up (%d attempts; last failure: %s)",
                          gaveup.attempts, gaveup.reason,
                          hint="raise --networkattempts, or check the "
                          "server")

    def _attempt_with_repairs(self) -> None:
        while True:
            self.say("ensuring %s@%s is available at %s", self.shown_url,
                     self.request.wanted, self.shown_dest)
            try:
                with self.holding_destination():
                    return self.attempt()
            except Restart as restart:
                restarts = self.timer.facts["restarts"]
                if restarts == MAX_RESTARTS:
                    raise self.error("giving up after %d attempts to repair "
                                     "the store and checkout",
                                     MAX_RESTARTS + 1,
                                     hint="see the messages above")
                self.timer.facts["restarts"] = restarts + 1
                if restart.announce:
                    self.warn("(attempting checkout from beginning)")

    def attempt(self) -> None:
        """The steps, once, in order."""
        request, step = self.request, self.timer.step
        self.ready_tree = None
        self.check_destination()
        self.store = store = self.prepare_store()
        self.timer.facts["store"] = os.fsdecode(store)
        if self.SHARE_BEFORE_PULL:
            created = self._share(store, None)
            node = self.obtain(store)
        else:
            node = self.obtain(store)
            created = self._share(store, node)
        self.timer.facts["node"] = os.fsdecode(node)
        if request.noupdate:
            self.say("(skipping update since `-U` was passed)")
            return
        with self.reading_store(store):
            self.check_working_state(created)
            # a ready tree is a new checkout: nothing the pool did not put
            # there may stay
            if (request.purge or self.ready_tree) and not created:
                self.say("(purging working directory)")
                with step("purge"):
                    removed = self.purge()
                self.note("(purged %d files)", removed)
            self.prepare_update(node)
            with step("update_sparse" if self.sparse_request()
                      else "update"):
                self.update(node, created)
            self.say("updated to %s", node)
            with step("verify"):
                self.verify(node)
            if self.ready_tree and self.taken_from:
                self.taken_from.finished(os.fsdecode(request.dest))
        if self.wants_disk_report():
            with step("disk"):
                self.report_disk(store)

    def _share(self, store: Text, node: Text | None) -> bool:
        """Make DEST a share of ``store`` unless it is one; whether it was
        created."""
        self._take_ready_tree(store)
        if self.is_shared(store):
            return False
        with self.timer.step("clone"):
            self.create_share(store, node)
        self.behaviors.add("clone")
        return True

    def _take_ready_tree(self, store: Text) -> None:
        """Make a new DEST a ready tree of the pool's, when it keeps any
        (``ready_trees``), by a rename; it is then reused like any
        checkout, purged.  A request or a DEST a ready tree cannot serve
        is written as before, said in one line (``-U`` writes no tree)."""
        dest = os.fsdecode(self.request.dest)
        self.taken_from = trees = self.ready_trees(store)
        if trees is not None and trees.taken_unfinished(dest):
            self.warn("(%s is a ready tree an interrupted checkout took; "
                      "purging it)", self.shown_dest)
            self.ready_tree = "interrupted"
            return
        if trees is None or self.request.noupdate or not trees.exists() or (
                os.path.lexists(dest) and (not os.path.isdir(dest)
                                           or os.listdir(dest))):
            return
        obstacle = self.ready_tree_obstacle()
        if self.sparse_request():
            obstacle = "ready trees are full checkouts, not sparse ones"
        elif obstacle is None and not trees.same_filesystem(dest):
            obstacle = self.text("%s is on another filesystem than the "
                                 "pool's ready trees", self.shown_dest)
        if obstacle:
            self.say("(%s; writing the whole tree)", obstacle)
            return
        with self.timer.step("take"):
            taken = trees.take(dest)
        for name, problem in taken.set_aside:
            self.warn("(ready tree %s was changed behind the pool's back: "
                      "%s; set aside for the pool to delete)", name,
                      problem)
        if taken.name is None:
            self.say("(%s; writing the whole tree)",
                     taken.refused or "no ready tree in the pool")
            return
        self.ready_tree = taken.name
        self.timer.facts["ready_tree"] = taken.name
        self.behaviors.add("ready-tree")
        self.say("(took ready tree %s, at %s, from the pool)", taken.name,
                 (taken.revision or "?")[:12])

    def verify(self, node: Text) -> None:
        """DEST's parent is ``node`` and nothing differs from it; else DEST
        is removed and the run starts over."""
        parent, dirt = self.working_state()
        if parent != node:
            problem = self.text("working directory parent is %s, not %s",
                                parent, node)
        elif dirt:
            problem = self.text("working directory not clean after "
                                "update: %s", dirt)
        else:
            self.note("(verified: working directory is %s and clean)",
                      node[:12])
            return
        self.start_over("(%s; deleting destination)", problem)

    def report_disk(self, store: Text) -> None:
        dest = self.request.dest
        sizes = (pooling.disk_usage(store), pooling.disk_usage(dest),
                 pooling.free_space(dest))
        self.timer.facts.update(zip(("store_bytes", "checkout_bytes",
                                     "free_bytes"), sizes))
        self.say("(disk: pooled store %s, checkout %s, %s free)",
                 *map(pooling.format_bytes, sizes))

    # Helpers of the steps --------------------------------------------------

    def network(self, what: str, operation: Callable[[], T]) -> T:
        """``operation()``, the network step ``what`` ("pull", "clone"...),
        within the request's ``network_deadline``: a failure a retry may
        cure, or the step outliving its deadline (it is then interrupted,
        ``interrupt_network``, and fails on its own error path, so its
        transaction rolls back), restarts the run (``NetworkFailure``),
        after a wait."""
        seconds = self.request.network_deadline
        with pooling.StepDeadline(seconds) as deadline, \
                deadline.watching(self.interrupt_network):
            self.deadline = deadline
            try:
                return operation()
            except Exception as exc:
                if deadline.expired:
                    raise NetworkFailure(
                        "%s exceeded the network deadline of %g seconds "
                        "(sharepool.network-deadline); interrupted"
                        % (what, seconds)) from exc
                reason = self.transient(exc)
                if reason is None:
                    raise
                raise NetworkFailure(reason) from exc
            finally:
                self.deadline = None

    @contextlib.contextmanager
    def pulling(self) -> Iterator[None]:
        """Time a pull of the wanted revision, and count it once done."""
        with self.timer.step("pull"):
            yield
        self.timer.facts["pulled"] = True
        self.behaviors.add("pull")

    def store_cloned(self) -> None:
        """Count a new store, cloned and in place."""
        self.timer.facts["cloned"] = True
        self.behaviors.add("create-store")

    def check_sparse_unchanged(self, sparse: bool) -> None:
        """robustcheckout's rule: a checkout other tools may use is never
        switched between sparse (``sparse``: it is now) and full."""
        hint = "use a separate working directory to use sparse"
        if self.request.sparseprofile and not sparse:
            raise self.error("cannot enable sparse profile on existing "
                             "non-sparse checkout", hint=hint)
        if sparse and not self.request.sparseprofile:
            raise self.error("cannot use non-sparse checkout on existing "
                             "sparse checkout", hint=hint)

    def start_over(self, problem: str, *args: Any) -> NoReturn:
        """Say ``problem`` (a template), delete DEST and start the run
        over."""
        self.warn(problem, *args)
        self.remove_dest()
        raise Restart()

    def remove(self, path: Text, behavior: str) -> None:
        """Remove ``path`` (``pooling.discard``), timed as ``behavior``."""
        with self.timer.step(behavior.replace("-", "_")):
            pooling.discard(path)
        self.behaviors.add(behavior)

    def remove_dest(self) -> None:
        self.remove(self.request.dest, "remove-wdir")

    def remove_store(self, store: Text) -> None:
        """Delete a pooled store under its lock, so that no other checkout
        starts sharing it meanwhile."""
        with self.store_lock(store):
            self.remove(store, "remove-store")

    def remove_leftovers(self, store: Text) -> None:
        """Under the store's lock: remove what killed clones and removals
        of it left in the pool."""
        for leftover in pooling.discarded_leftovers(*os.path.split(store)):
            self.warn("(removing %s, left by an interrupted clone or "
                      "removal)", leftover)
            pooling.discard(leftover)

    def store_lock(self, store: Text) -> ContextManager[None]:
        """The lock of a pool entry, ``<store>.lock`` (the file core
        Mercurial's share.pool locks too)."""
        return self.lock(os.fsdecode(store) + ".lock",
                         self.text("pooled store %s",
                                   os.path.basename(store)))

    @contextlib.contextmanager
    def lock(self, path: Text, what: Text) -> Iterator[None]:
        """Hold the lock file ``path`` (``what`` names it in messages),
        under the run's lock policy."""
        def taken_over(owner: str) -> None:
            self.warn("(took over the lock on %s from %s)", what,
                      pooling.describe_owner(owner))

        lock = pooling.PidLock(os.fsdecode(path), self.lock_policy,
                               self._waiting(what), taken_over)
        with self._lock_timeout(what):
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def stale_lock(self, path: Text, what: Text) -> bool:
        """Whether the lock ``path`` (one the system takes itself) was left
        by an owner the lock policy lets us take over; waits while a live
        owner holds it."""
        with self._lock_timeout(what):
            return pooling.await_lock(os.fsdecode(path), self.lock_policy,
                                      self._waiting(what)) is not None

    def _waiting(self, what: Text) -> pooling.Waiting:
        def say(owner: str, seconds: float, takeover: bool) -> None:
            then = ("taking it over then" if takeover
                    else "giving up then")
            self.warn("(waiting up to %d seconds for lock on %s held by %s; "
                      "%s)", seconds, what, pooling.describe_owner(owner),
                      self.text(then))
        return say

    @contextlib.contextmanager
    def _lock_timeout(self, what: Text) -> Iterator[None]:
        try:
            yield
        except pooling.LockTimeout as timeout:
            raise self.error("timed out waiting for lock on %s held by %s",
                             what, timeout.owner,
                             hint="raise sharepool.lock-timeout, or stop "
                             "that process") from None
