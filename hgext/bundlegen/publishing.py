# publishing.py - uploads, the bundles.json record, retirement and expiry
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""Where a run's bundles go and how long they stay: the upload command and
the object storage destinations (through the core's ``bundlestore``, within
the run's deadline), the check that the last generation is still where
clients are sent, the generations in ``bundles.json``, and the deletion of
retired and expired bundles."""

import contextlib
import functools
import os
import stat
import time

from mercurial import (
    error,
    pycompat,
    util,
)
from mercurial.i18n import _
from mercurial.utils import procutil

from vcsperf.core import bundlestore, errors

from . import manifest
from .settings import hg_abort

CONTENT_TYPE = 'application/x-mercurial-bundle'
INDEX = b'bundles.json'
# The place of pending deletions that is the output directory (and the
# delete command): no destination's name is empty.
_OUTPUT_PLACE = ''


def load_generations(outdir):
    """The record of ``outdir``; the core's refusal of one it cannot read
    becomes Mercurial's."""
    try:
        return bundlestore.Generations(os.path.join(outdir, INDEX).decode())
    except errors.Abort as err:
        raise hg_abort(err)


@contextlib.contextmanager
def object_storage(network):
    """Requests to object storage within the run's deadline; the core's
    errors become Mercurial's."""
    try:
        with network:
            yield
    except errors.Abort as err:
        raise hg_abort(err)


def upload(ui, settings, outdir, bundle, published):
    """Run the upload command for ``bundle``, unless the published
    manifest names it already (with its digest, so it was uploaded whole):
    uploading it again could change it while clients download it."""
    if not settings.upload_command:
        return
    digest = b'sha256:' + bundle['sha256'].encode()
    url = bundle['urls'][0].encode() if bundle['urls'] else b''
    if any(entry[b'URL'] == url and entry.get(b'DIGEST') == digest
           for entry in published):
        ui.status(_(b'%s is published already, not uploaded again\n')
                  % bundle['file'].encode())
        return
    path = os.path.join(outdir, bundle['file'].encode())
    name = bundle['file'].encode()
    # Core clone-bundles' names (HGCB_*), and the BUNDLE_* ones that
    # scripts written for earlier bundlegen releases read.
    environ = {
        b'HGCB_BUNDLE_PATH': path,
        b'HGCB_BUNDLE_BASENAME': name,
        b'HGCB_BUNDLE_URL': url,
        b'HGCB_BUNDLE_SPEC': bundle['spec'].encode(),
        b'HGCB_BUNDLE_SHA256': bundle['sha256'].encode(),
        b'BUNDLE_PATH': path,
        b'BUNDLE_NAME': name,
        b'BUNDLE_SPEC': bundle['spec'].encode(),
        b'BUNDLE_SHA256': bundle['sha256'].encode(),
        b'BUNDLE_URL': url,
    }
    code = ui.system(settings.upload_command, environ=environ,
                     blockedtag=b'bundlegen_upload')
    if code:
        raise error.Abort(
            _(b'upload of %s failed (%s)')
            % (bundle['file'].encode(), procutil.explainexit(code)),
            hint=_(b'the manifest was not changed; fix '
                   b'bundlegen.upload-command and run hg bundlegen again'))


def upload_to_destinations(ui, say, destinations, outdir, bundles, clients,
                           network, uploads=None):
    """Upload every bundle to every destination, within the run's
    deadline; if one upload fails, what this run uploaded is deleted and
    the run aborts, so every manifest stays as it was.  ``uploads`` gets
    destination name -> (bytes, seconds)."""
    def report(destination, size, seconds):
        if uploads is not None:
            uploads[destination.name] = (size, seconds)
        say(_(b'uploaded %s to %s in %.1f s\n')
            % (util.bytecount(size), destination.name.encode(), seconds))
    try:
        with network:
            bundlestore.upload_all(destinations, outdir.decode(), bundles,
                                   CONTENT_TYPE, report, clients)
    except errors.Abort as err:
        raise error.Abort(pycompat.bytestr(str(err)),
                          hint=_(b'no manifest was changed; fix the '
                                 b'destination and run hg bundlegen '
                                 b'again'))


def check_published(say, repo, settings, outdir, generations, clients,
                    network):
    """Before saying the latest generation is published already: each of
    its bundles is where clients are sent (HEAD on every destination; the
    output directory when it is served), and the manifest is the one this
    extension wrote.  A missing object is uploaded again from its checked
    local copy, a manifest changed behind our back is written again;
    returns why a new generation is due when neither can be done."""
    bundles = generations.record.get('bundles') or []
    local = {bundle['file'] for bundle in bundles
             if _local_size(outdir, bundle['file']) == bundle['size']}
    if settings.base_url and len(local) < len(bundles):
        return 'published bundles are missing from the output directory'
    for destination in settings.destinations:
        with object_storage(network):
            lacking = bundlestore.missing(destination, bundles,
                                          clients[destination.name])
        if not lacking:
            continue
        resend = [bundle for bundle in bundles if bundle['file'] in lacking
                  and bundle['file'] in local
                  and bundlestore.sha256_file(os.path.join(
                      outdir.decode(), bundle['file']))[0]
                  == bundle['sha256']]
        if len(resend) < len(lacking):
            return ('published bundles are missing from destination %s'
                    % destination.name)
        upload_to_destinations(repo.ui, say, [destination], outdir, resend,
                               clients, network)
        say(_(b'uploaded %d missing bundles to %s again\n')
            % (len(resend), destination.name.encode()))
    written = generations.record.get('manifest_sha256')
    if written and manifest.current_sha256(repo) != written:
        lines = manifest.manifest_lines(repo, settings, bundles)
        with repo.wlock():
            _replaced, written = manifest.write_manifest(repo, lines)
        generations.save(manifest_sha256=written)
        say(_(b'%s was changed by something else; wrote the bundles of '
              b'tip %s into it again\n')
            % (manifest.MANIFEST, generations.latest['tip'][:12].encode()))
    return None


def _local_size(outdir, name):
    try:
        return os.stat(os.path.join(outdir, name.encode())).st_size
    except OSError:
        return None


def places(settings):
    """Where retired bundles are deleted: every destination, and the
    output directory (with ``bundlegen.delete-command``)."""
    return [d.name for d in settings.destinations] + [_OUTPUT_PLACE]


def sweep(ui, settings, outdir, generations, clients, network):
    """Delete the pending retired bundles; what is refused stays pending,
    with a warning line per place.  True if anything was refused."""
    if not generations.pending:
        return False
    deleters = {d.name: functools.partial(bundlestore.delete_objects, d,
                                          client=clients.get(d.name))
                for d in settings.destinations}
    deleters[_OUTPUT_PLACE] = functools.partial(_delete_local, ui,
                                                settings, outdir)
    try:
        with object_storage(network):
            results = generations.sweep(deleters)
    except error.Abort as err:
        ui.warn(_(b'retiring old bundles stopped: %s; the next run tries '
                  b'again\n') % err.message)
        return True
    finally:
        generations.save()
    refused = False
    for place, (_deleted, refusals) in sorted(results.items()):
        if refusals:
            refused = True
            name = sorted(refusals)[0]
            ui.warn(_(b'%s refused to delete %d retired bundles (%s: %s); '
                      b'the next run tries again\n')
                    % (place.encode() or b'the output directory',
                       len(refusals), name.encode(),
                       pycompat.bytestr(refusals[name])))
    return refused


def _delete_local(ui, settings, outdir, names):
    """Delete retired bundles through ``bundlegen.delete-command`` and
    from the output directory; return the refused ones, name ->
    reason."""
    refused = {}
    for name in names:
        if settings.delete_command:
            environ = {b'HGCB_BUNDLE_URL': (settings.url(name.encode())
                                           if settings.base_url else b''),
                       b'HGCB_BASENAME': name.encode(),
                       b'HGCB_BUNDLE_BASENAME': name.encode()}
            code = ui.system(settings.delete_command, environ=environ,
                             blockedtag=b'bundlegen_delete')
            if code:
                refused[name] = pycompat.sysstr(
                    b'bundlegen.delete-command ' + procutil.explainexit(code))
                continue
        try:
            util.tryunlink(os.path.join(outdir, name.encode()))
        except OSError as err:
            refused[name] = err.strerror
    return refused


def expire(outdir, days, keep):
    """Delete the bundles older than ``days`` whose names are not in
    ``keep`` (the new manifest's and the one it replaced)."""
    cutoff = time.time() - days * 86400
    expired = []
    for name in os.listdir(outdir):
        path = os.path.join(outdir, name)
        if name.endswith(b'.hg') and name not in keep:
            info = os.lstat(path)
            if info.st_mtime < cutoff and not stat.S_ISDIR(info.st_mode):
                os.unlink(path)
                expired.append(name)
    return expired
