# monitoring.py - bundlegen's metrics file and its freshness check
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""What an admin's monitoring reads of ``hg bundlegen``: the metrics file
each run writes (``bundlegen.metrics-dir``, through the core's
``vcsperf.core.metrics``) and ``--check-fresh``, whose exit status says
whether the published bundles are fresh (``vcsperf.core.freshness``)."""

import os

from mercurial import (
    error,
    pycompat,
)
from mercurial.i18n import _
from mercurial.node import bin

from vcsperf.core import errors, freshness, metrics

from . import manifest, publishing
from .settings import hg_abort

#: A manifest bigger than this is none that bundlegen wrote.
MAX_MANIFEST_BYTES = 1 << 20


def metrics_report(ui, repo, directory):
    """The run's metrics file in ``directory`` (checked: one abort when it
    cannot be written), or None without one."""
    if not directory:
        return None
    try:
        checked = metrics.check_directory(
            pycompat.fsdecode(directory), 'bundlegen.metrics-dir')
    except errors.Abort as err:
        raise hg_abort(err)
    return metrics.BundlegenReport(checked, 'hg',
                                   pycompat.fsdecode(repo.root))


def write_metrics(ui, repo, report, outcome, outdir, uploads):
    """Write the run's metrics file: what is published (from the record
    in ``outdir``, if the run got as far as knowing it),
    how far behind the repository it is, what this run uploaded
    (``uploads``: destination -> (bytes, seconds)); never an error."""
    generations = None
    try:
        if outdir is not None:  # None: the configuration stopped the run
            generations = publishing.load_generations(outdir)
    except error.Abort:
        pass  # the run's own abort says why
    latest = generations and generations.latest
    if latest:
        tip = latest.get('tip', '')
        report.published(tip, latest.get('generated', 0),
                         _behind(repo, tip.encode()))
        for bundle in generations.record.get('bundles') or []:
            report.bundle(bundle['format'], bundle['size'],
                          bundle['seconds'])
    report.uploads(uploads)
    metrics.write_quietly(report, outcome, lambda line: ui.warn(
        pycompat.fsencode(line) + b'\n'))


def _behind(repo, tip):
    """Changesets a pull would send that are not under ``tip`` (no secret
    one: bundles never hold them); None if the repository no longer
    serves it."""
    served = repo.filtered(b'served')
    try:
        if not served.changelog.hasnode(bin(tip)):
            return None
        return len(served.revs(b'not ::%s', tip))
    except (error.Abort, ValueError, error.RepoLookupError):
        return None


def check_fresh(ui, repo, outdir, max_age, max_behind, total):
    """``hg bundlegen --check-fresh``: one line, and 0 when the published
    bundles are fresh, 1 when not (see ``vcsperf.core.freshness``)."""
    generations = publishing.load_generations(outdir)
    latest = generations.latest
    if latest is None:
        return _stale(ui, 'no bundles are published (%s records none)'
                      % os.path.join(outdir, publishing.INDEX).decode())
    path = repo.vfs.join(manifest.MANIFEST)
    try:
        size = os.stat(path).st_size
    except OSError as err:
        return _stale(ui, '%s: %s' % (pycompat.fsdecode(path),
                                      pycompat.sysstr(err.strerror)))
    if size > MAX_MANIFEST_BYTES:
        return _stale(ui, '%s is %d bytes, not a manifest bundlegen wrote'
                      % (pycompat.fsdecode(path), size))
    if manifest.current_sha256(repo) != generations.record.get(
            'manifest_sha256'):
        return _stale(ui, '%s is not the one bundlegen published (a run '
                      'writes its own again)' % pycompat.fsdecode(path))
    tip = latest['tip']
    behind = _behind(repo, tip.encode())
    if behind is None:
        return _stale(ui, 'the published tip %s is no longer in the '
                      'repository' % tip[:12])
    reason = freshness.staleness(latest['generated'], behind, max_age,
                                 max_behind)
    if reason:
        return _stale(ui, 'the bundles of tip %s are %s' % (tip[:12],
                                                           reason))
    sizes = {bundle['file']: bundle['size']
             for bundle in generations.record.get('bundles') or []}
    entries = manifest.read_manifest(repo)
    published = []
    for entry in entries:
        url = pycompat.sysstr(entry[b'URL'])
        [name] = manifest.file_names([entry])
        published.append((url, sizes.get(pycompat.sysstr(name))))
    problem = freshness.missing(published, total)
    if problem:
        return _stale(ui, problem)
    ui.write(_(b'fresh: the bundles of tip %s, %d changesets behind, %s '
               b'old; %d URLs answer\n')
             % (tip[:12].encode(), behind, pycompat.bytestr(
                 freshness.describe_age(freshness.age(latest['generated']))),
                len(published)))
    return 0


def _stale(ui, reason):
    ui.write(b'stale: %s\n' % os.fsencode(reason))
    return 1
