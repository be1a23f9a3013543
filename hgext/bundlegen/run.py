# run.py - one run of hg bundlegen, step by step
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""One run of ``hg bundlegen``: whether new bundles are due, what a dry run
says, and the steps of a run in order under the bundlegen lock (check the
destinations, build, upload, publish the manifest, record the generation,
retire and expire), with what it reports."""

import os
import time

from mercurial import (
    lock as lockmod,
    pycompat,
    util,
)
from mercurial.i18n import _
from mercurial.node import bin

from vcsperf.core import bundlestore

from . import building, manifest, publishing


def run(ui, repo, settings, outdir, fm, force=False, dry_run=False,
        uploads=None):
    """Publish a new generation of bundles if one is due (or ``force``),
    writing what was done to the formatter ``fm``; return the exit
    status.  ``uploads`` (a dict) gets destination name -> (bytes,
    seconds) of what the run uploaded, for its metrics."""
    say = ui.status if fm.isplain() else _stderr(ui)
    with fm:
        if dry_run:
            generations = publishing.load_generations(outdir)
            reason = _due(repo, settings, generations.latest)
            if reason is None and not force:
                return _nothing_to_do(ui, fm, repo, generations.latest)
            _dry_run(ui, fm, repo, settings, generations,
                     reason or 'forced')
            return 0
        started = time.monotonic()
        # One budget for every request of the run to object storage.
        network = bundlestore.Deadline(settings.upload_timeout,
                                       'bundlegen.upload-timeout')
        with lockmod.trylock(ui, repo.vfs, b'bundlegen.lock',
                             ui.configint(b'ui', b'timeout'), 0,
                             desc=b'bundlegen') as held:
            generations = publishing.load_generations(outdir)
            # Written now, unchanged, so that a record that cannot be
            # written stops the run before anything is built or published
            # (a new one: the run's directory beside it is made first).
            if generations.list:
                generations.save()
            with publishing.object_storage(network):
                clients = bundlestore.check(settings.destinations)
            reason = _due(repo, settings, generations.latest)
            if reason is None and not force:
                reason = publishing.check_published(
                    say, repo, settings, outdir, generations, clients,
                    network)
            if reason is None and not force:
                refused = publishing.sweep(ui, settings, outdir, generations,
                                           clients, network)
                _nothing_to_do(ui, fm, repo, generations.latest,
                               waited=getattr(held, 'delay', 0))
                return 1 if refused else 0
            reason = reason or 'forced'
            say(_(b'bundlegen: building %s (%s)\n')
                % (b', '.join(settings.formats), pycompat.bytestr(reason)))
            published = manifest.read_manifest(repo)
            tip, bundles = building.build(ui, say, repo, settings, outdir)
            lines = manifest.manifest_lines(repo, settings, bundles)
            for bundle in bundles:
                publishing.upload(ui, settings, outdir, bundle, published)
            publishing.upload_to_destinations(
                ui, say, settings.destinations, outdir, bundles, clients,
                network, uploads)
            with repo.wlock():
                replaced, written = manifest.write_manifest(repo, lines)
            generations.add(dict(
                settings.layout(), tip=tip.decode(),
                generated=bundlestore.now(), changesets=len(repo),
                store_bytes=_store_bytes(repo),
                files=[bundle['file'] for bundle in bundles]))
            # bundlegen.keep counts the generations besides the new one
            retired = generations.retire(settings.keep + 1,
                                         publishing.places(settings))
            # The deletions are recorded before any is done: a killed or
            # refused one is done by a later run.
            generations.save(tip=tip.decode(),
                             generated=generations.latest['generated'],
                             bundles=bundles, manifest_sha256=written)
            # Only now that the new manifest is out: what fell out of the
            # kept generations goes, everywhere.
            refused = publishing.sweep(ui, settings, outdir, generations,
                                       clients, network)
            keep = manifest.file_names(replaced) | {
                name.encode() for name in generations.held()}
            expired = publishing.expire(outdir, settings.expire_days, keep)
        seconds = time.monotonic() - started
        for bundle in bundles:
            fm.startitem()
            fm.data(action=b'built', tip=tip,
                    format=bundle['format'].encode(),
                    file=bundle['file'].encode(),
                    spec=bundle['spec'].encode(), size=bundle['size'],
                    sha256=bundle['sha256'].encode(),
                    seconds=bundle['seconds'],
                    urls=[url.encode() for url in bundle['urls']])
            fm.plain(_(b'%s: %s, %s in %.1f s\n') % (
                bundle['file'].encode(), bundle['spec'].encode(),
                util.bytecount(bundle['size']), bundle['seconds']))
        if retired:
            say(_(b'retired %d bundles of older generations\n')
                % len(retired))
        if expired:
            say(_(b'deleted %d expired bundles\n') % len(expired))
    ui.log(b'bundlegen', b'published %d bundles of %s in %.1f s (%s)\n',
           len(bundles), tip, seconds, pycompat.bytestr(reason),
           bundlegen_tip=tip, bundlegen_seconds=seconds,
           bundlegen_retired=len(retired))
    if b'clonebundles' not in dict(ui.configitems(b'extensions')):
        ui.warn(_(b'(the server offers the manifest to clients only with '
                  b'the clonebundles extension enabled)\n'))
    return 1 if refused else 0


def _stderr(ui):
    """Progress lines on stderr, where they stay out of ``-T json``."""
    def say(message):
        if not ui.quiet:
            ui.write_err(message)
    return say


def _due(repo, settings, latest):
    """Why a new generation is due, or None when the last one stands."""
    if latest is None:
        return 'no bundles yet'
    if any(latest.get(key) != value
           for key, value in settings.layout().items()):
        return 'formats or destinations changed'
    # What a pull sends: a secret changeset is never bundled, so it moves
    # nothing.
    served = repo.filtered(b'served')
    tip = latest['tip'].encode()
    if served[b'tip'].hex() == tip:
        return None
    if not served.changelog.hasnode(bin(tip)):
        return 'the last bundled tip is no longer in the repository'
    moved = len(served.revs(b'not ::%s', tip))
    moved_bytes = 0
    if settings.min_bytes:
        moved_bytes = _store_bytes(repo) - latest.get('store_bytes', 0)
    return bundlestore.freshness(moved, moved_bytes,
                                 settings.min_changesets, settings.min_bytes)


def _store_bytes(repo):
    """The bytes of the store's revlogs."""
    total = 0
    for root, _dirs, files in os.walk(repo.spath):
        for name in files:
            if name.endswith((b'.i', b'.d')):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _nothing_to_do(ui, fm, repo, latest, waited=0):
    tip = repo.filtered(b'served')[b'tip'].hex()
    if latest and latest['tip'] == tip.decode() and waited:
        why = _(b'another run published bundles of this tip while this '
                b'one waited')
    elif latest and latest['tip'] == tip.decode():
        why = _(b'the bundles of tip %s are published already') % (
            latest['tip'][:12].encode())
    else:
        why = _(b'the repository has not moved past bundlegen.'
                b'min-changesets or bundlegen.min-bytes since tip %s') % (
            latest['tip'][:12].encode())
    fm.startitem()
    fm.data(action=b'skipped', tip=tip)
    fm.write(b'reason', _(b'nothing to do: %s (--force builds anyway)\n'),
             why)
    ui.log(b'bundlegen', b'nothing to do: %s\n', why)
    return 0


def _dry_run(ui, fm, repo, settings, generations, reason):
    """What a run would build, upload and retire."""
    retired = bundlestore.Generations(generations.path)
    retired.add({'files': []})
    names = retired.retire(settings.keep + 1)
    fm.startitem()
    served_tip = repo.filtered(b'served')[b'tip'].hex()
    fm.data(action=b'would-build', tip=served_tip,
            retire=[n.encode() for n in names],
            destinations=[d.name.encode() for d in settings.destinations])
    fm.write(b'formats reason', _(b'would build %s (%s)\n'),
             b', '.join(settings.formats), pycompat.bytestr(reason))
    for destination in settings.destinations:
        fm.plain(_(b'would upload to %s (%s)\n') % (
            destination.name.encode(), destination.base_url.encode()))
    if names:
        fm.plain(_(b'would retire %d bundles of older generations\n')
                 % len(names))
