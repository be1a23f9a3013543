"""The features ``vcsperf check`` runs, one record each, in the order they
run and are reported: the name the report gives it, its function, what
its time and disk are estimated by, what runs beside it, whether it needs
``--git``.

A feature is a function ``(check, work)`` in a module of its own, named
after it, that works in the directory ``work`` (removed when it ends) and
returns None when it passed, a reason when it skipped, and raises
``outcome.Failed`` when it failed.  Adding one is that module and one row
of ``FEATURES``; a row without rates, or with a rate per a unit that
``estimates`` does not measure, fails when this module is imported."""

import dataclasses
import numbers
import types
from typing import Callable, Mapping, Optional

from vcsperf.check import (
    bundles,
    checkouts,
    commitid,
    dictionaries,
    estimates,
    importer,
    wire,
)


def _rates(feature, field, units):
    """The rates of ``feature``'s ``field``, checked against ``units``,
    read-only."""
    rates = getattr(feature, field)
    if not rates:
        raise ValueError("feature %r has no %s" % (feature.name, field))
    for unit, rate in rates.items():
        if unit not in units:
            raise ValueError("feature %r: %s has a rate per %r, which is "
                             "none of %s" % (feature.name, field, unit,
                                             ", ".join(units)))
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool) \
                or rate < 0:
            raise ValueError("feature %r: %s[%r] is %r, not a number of "
                             "0 or more" % (feature.name, field, unit, rate))
    return types.MappingProxyType(dict(rates))


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of the check; construction checks every field."""

    #: The name the report, the progress line and its directory give it.
    name: str
    #: ``function(check, work)``, above.
    function: Callable
    #: Seconds on this machine per unit of what it works on
    #: (``{unit of estimates.TIME_UNITS: rate}``).
    seconds_per: Mapping[str, float]
    #: Bytes of scratch disk it takes at its peak, per byte of what it
    #: works on (``{unit of estimates.DISK_UNITS: factor}``).
    disk_per: Mapping[str, float]
    #: The feature run beside it, in a thread of its own, the two sharing
    #: the machine while neither runs a timed step; it comes after this
    #: one in ``FEATURES``.
    beside: Optional[str] = None
    #: Whether it runs only with ``--git``.
    git: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("a feature needs a name, not %r" % (self.name,))
        if not callable(self.function):
            raise ValueError("feature %r: its function %r cannot be called"
                             % (self.name, self.function))
        object.__setattr__(self, "seconds_per", _rates(
            self, "seconds_per", estimates.TIME_UNITS))
        object.__setattr__(self, "disk_per", _rates(
            self, "disk_per", estimates.DISK_UNITS))
        if self.beside == self.name:
            raise ValueError("feature %r cannot run beside itself"
                             % self.name)

    @property
    def directory(self):
        """The name of its directory in the scratch directory."""
        return self.name.replace(" ", "-")


def table(*features):
    """``features`` as the table: names unique, each ``beside`` a later
    feature that no other runs beside."""
    names = [feature.name for feature in features]
    for index, feature in enumerate(features):
        if names.count(feature.name) > 1:
            raise ValueError("two features are named %r" % feature.name)
        if feature.beside is not None and (
                feature.beside not in names[index + 1:]
                or [f.beside for f in features].count(feature.beside) > 1):
            raise ValueError("feature %r runs beside %r, which is no later "
                             "feature of its own" % (feature.name,
                                                     feature.beside))
    return tuple(features)


#: The time rates are seconds on this machine with nothing else running
#: (``estimates.seconds`` scales them when it is busy), fitted by least
#: squares of the relative error to four quick runs one after the other
#: at load 1.4 to 1.7, the check's own (issue 30, BENCHMARKS.md): a
#: 40,000-file tree's slice (200 changesets, 1,795 files), the
#: Firefox-scale repository's (200 changesets, 1,505 files; its manifests
#: and changelog are the whole history's, hence the store-size terms),
#: pip's whole history (57 changesets, 513 files, weighted half) and the
#: 1,000,000-changeset one's slice of 1,000 (weighted half).  The disk
#: factors are fitted
#: to the peaks of four quick runs (issue 30): pip's whole (57
#: changesets, 513 files) and a slice of 20 of it, a 40,000-file tree's
#: slice (200 changesets, 1,795 files) and the Firefox-scale
#: repository's (200 changesets, 1,505 files), so that the run's peak
#: estimated is within 1.25 times the one measured either way; the wire's
#: per byte of the tree stands for a block at least per revlog of each
#: file it pulls.
FEATURES = table(
    # The upgraded store beside the old one, then the revlogs being
    # recompressed.  Commit IDs (nothing of it timed but its last step)
    # run beside its training, conversion and verification.
    Feature("dictionaries", dictionaries.dictionaries,
            seconds_per={"run": 1.8, "MB": 0.35, "store kfiles": 0.0043},
            disk_per={"work": 0.3}, beside="commit IDs"),
    # A pulled clone, and the hardlinked clone the pull of the last 100
    # starts from, its stripped revlogs copied (a narrowed slice at
    # Firefox scale: 1.3 times the pulled bytes).
    Feature("wire", wire.wire,
            seconds_per={"run": 6.6, "MB": 0.18, "store kfiles": 0.0056},
            disk_per={"pulled": 0.6, "tree": 0.6}),
    # Every bundle (zstd-max, gzip, stream, core zstd-v2), each smaller
    # than the store, and a clone from each of the three, verified
    # together at the end.
    Feature("bundles", bundles.bundles,
            seconds_per={"run": 5.9, "MB": 0.5, "store kfiles": 0.012},
            disk_per={"work": 3.8}),
    # The pool, the checkouts, and a plain clone beside them.
    Feature("checkouts", checkouts.checkouts,
            seconds_per={"run": 0.8, "MB": 0.1, "kfiles": 2.5,
                         "kchangesets": 0.77, "store kfiles": 0.014},
            disk_per={"pulled": 0.35, "checkouts": 0.85}),
    # Writing to a hardlinked revlog copies it first: the rewritten
    # revlogs, up to the whole store, and a working directory.
    Feature("commit IDs", commitid.commitid,
            seconds_per={"MB": 0.15, "rewritten": 0.23},
            disk_per={"work": 0.2, "tree": 1.6}),
    # The Python files at tip.
    Feature("importer", importer.importer,
            seconds_per={"run": 0.4, "Python kfiles": 3.5},
            disk_per={"tree": 1}),
    Feature("git checkouts", checkouts.git_checkouts,
            seconds_per={"run": 10, "kfiles": 5},
            disk_per={"git": 2, "checkouts": 1}, git=True),
)
