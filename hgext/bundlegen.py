# bundlegen.py - generate clone bundles, their manifest and index
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""generate clone bundles from one consistent snapshot, for a CDN

``hg bundlegen`` makes the clone bundles of a server repository, writes
them where a web server or CDN serves them, and publishes them in the
repository's ``clonebundles.manifest``, which ``hg serve`` hands to cloning
clients.  Run it from cron or a systemd timer (``contrib/bundlegen/`` has
examples)::

  [extensions]
  bundlegen =
  clonebundles =   # core's: makes hg serve offer the manifest to clients

  [bundlegen]
  output = /var/www/hg-bundles/myrepo
  base-url = https://cdn.example.com/hg-bundles/myrepo
  formats = zstd-max, gzip, stream

One run:

1. takes a snapshot of the repository under its store lock (hardlinks,
   seconds even for big repositories), so a push landing meanwhile cannot
   tear the bundles apart, and all of them hold the same changesets;
2. builds every format from the snapshot, in parallel up to
   ``bundlegen.jobs`` processes;
3. writes each bundle under a temporary name, checks its bundle spec
   (``hg debugbundle --spec``) and computes its sha256, then renames it
   to ``<tip node>.<format>.hg``;
4. runs ``bundlegen.upload-command`` once per bundle, if set, with the
   environment variables ``BUNDLE_PATH``, ``BUNDLE_NAME``, ``BUNDLE_SPEC``,
   ``BUNDLE_SHA256`` and ``BUNDLE_URL``;
5. replaces ``clonebundles.manifest`` atomically, keeping the previous one
   as ``clonebundles.manifest.old``.  Its lines come in the order of
   ``bundlegen.formats`` (clients take the first they can use unless
   ``ui.clonebundleprefers`` says otherwise) and carry ``BUNDLESPEC``,
   ``DIGEST=sha256:...`` (clients check it) and, for https URLs,
   ``REQUIRESNI=true``;
6. writes ``bundles.json`` (formats, specs, sizes, digests, build times)
   next to the bundles, and deletes bundles older than
   ``bundlegen.expire-days`` that the new manifest does not name.

A bad configuration or a failed upload stops the run before the manifest
is touched: clients keep getting the bundles they got before.

Formats:

``zstd-max``
  ``zstd-v2`` at ``bundlegen.zstd-level`` (default 19) with
  ``bundlegen.zstd-threads`` threads and long-distance matching (from the
  ``wirezstd`` extension, which bundlegen loads to build it).  The window
  stays at 2^27 bytes, so every Mercurial with zstd applies it.
``zstd``
  ``zstd-v2`` at core's default level.
``gzip``
  ``gzip-v2``, for clients without zstd.
``stream``
  ``none-v2;stream=v2``: raw store files, the fastest to apply; clients
  use it when they clone with ``--stream`` and support the repository's
  format.

Clients that cannot fetch a bundle (a 404, a refused connection) fall
back to a normal clone when they set ``ui.clonebundlefallback = true``.
A truncated or corrupt download is caught by the digest, and a stock
client then stops the clone with an error; a client with this extension
enabled falls back to a normal clone instead, as long as nothing of the
bundle stayed in the store (always so for changegroup bundles, whose
transaction is rolled back; a broken stream bundle still stops the clone,
whose destination is then removed).
"""

import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import time

from mercurial.i18n import _
from mercurial.node import nullrev
from mercurial import (
    error,
    exchange,
    extensions,
    hg,
    localrepo,
    lock as lockmod,
    pycompat,
    registrar,
    streamclone,
    util,
)
from mercurial.utils import procutil, stringutil

testedwith = b'6.9 7.0 7.2'
minimumhgversion = b'6.9'

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'bundlegen', b'output', default=None)
configitem(b'bundlegen', b'base-url', default=None)
configitem(b'bundlegen', b'formats', default=[b'zstd-max', b'gzip',
                                              b'stream'])
configitem(b'bundlegen', b'zstd-level', default=19)
configitem(b'bundlegen', b'zstd-threads', default=os.cpu_count() or 1)
configitem(b'bundlegen', b'jobs', default=os.cpu_count() or 1)
configitem(b'bundlegen', b'expire-days', default=7)
configitem(b'bundlegen', b'upload-command', default=None)

# Format name -> bundle spec given to ``hg bundle``; zstd-max also gets
# the configured level and threads.
FORMATS = {
    b'zstd-max': b'zstd-v2',
    b'zstd': b'zstd-v2',
    b'gzip': b'gzip-v2',
    b'stream': b'none-v2;stream=v2',
}

MANIFEST = b'clonebundles.manifest'
INDEX = b'bundles.json'
_TEMP_PREFIX = b'.bundlegen-tmp-'


class _Settings:
    """The checked ``[bundlegen]`` configuration."""

    def __init__(self, ui, output, base_url):
        self.output = output or ui.config(b'bundlegen', b'output')
        self.base_url = base_url or ui.config(b'bundlegen', b'base-url')
        if not self.output or not self.base_url:
            raise error.ConfigError(
                _(b'bundlegen needs an output directory and a base URL'),
                hint=_(b'set bundlegen.output and bundlegen.base-url, or '
                       b'pass --output and --base-url'))
        self.formats = ui.configlist(b'bundlegen', b'formats')
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise error.ConfigError(
                _(b'unknown bundle format in bundlegen.formats: %s')
                % b', '.join(unknown or [b'(none listed)']),
                hint=_(b'known formats: %s') % b', '.join(sorted(FORMATS)))
        if len(set(self.formats)) != len(self.formats):
            raise error.ConfigError(
                _(b'bundlegen.formats lists a format twice'))
        self.zstd_level = ui.configint(b'bundlegen', b'zstd-level')
        if not 1 <= self.zstd_level <= 22:
            raise error.ConfigError(
                _(b'bundlegen.zstd-level must be 1 to 22, not %d')
                % self.zstd_level)
        self.zstd_threads = max(0, ui.configint(b'bundlegen',
                                                b'zstd-threads'))
        self.jobs = max(1, ui.configint(b'bundlegen', b'jobs'))
        self.expire_days = ui.configint(b'bundlegen', b'expire-days')
        self.upload_command = ui.config(b'bundlegen', b'upload-command')

    def bundle_args(self, fmt):
        """Arguments to ``hg bundle`` for format ``fmt``."""
        args = [b'-t', FORMATS[fmt]]
        if fmt == b'zstd-max':
            args += [b'--config', b'experimental.bundlecomplevel.zstd=%d'
                     % self.zstd_level,
                     b'--config', b'experimental.bundlecompthreads.zstd=%d'
                     % self.zstd_threads]
        return args

    def url(self, name):
        return b'%s/%s' % (self.base_url.rstrip(b'/'), name)


@command(
    b'bundlegen',
    [
        (b'', b'output', b'', _(b'write bundles to this directory'),
         _(b'DIR')),
        (b'', b'base-url', b'', _(b'URL under which the directory is '
                                  b'served'), _(b'URL')),
    ],
    _(b'hg bundlegen [--output DIR] [--base-url URL]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def bundlegen(ui, repo, output=None, base_url=None):
    """generate clone bundles and publish them in the manifest

    Builds every format of ``bundlegen.formats`` from one snapshot of the
    repository, verifies each bundle, uploads it if configured, then
    replaces ``.hg/clonebundles.manifest`` (see :hg:`help -e bundlegen`).

    Only one run per repository at a time; a second one waits.
    """
    settings = _Settings(ui, output, base_url)
    outdir = util.expandpath(settings.output)
    util.makedirs(outdir)
    with lockmod.trylock(ui, repo.vfs, b'bundlegen.lock', 3600, 10,
                         desc=b'bundlegen'):
        _remove_temporaries(outdir)
        snapshot = os.path.join(outdir, b'%ssnapshot' % _TEMP_PREFIX)
        try:
            tip = _take_snapshot(ui, repo, snapshot)
            bundles = _build_all(ui, settings, snapshot, outdir, tip)
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)
        for bundle in bundles:
            _upload(ui, settings, outdir, bundle)
        with repo.wlock():
            _write_manifest(repo, settings, bundles)
        _write_index(outdir, tip, settings, bundles)
        expired = _expire(outdir, settings.expire_days,
                          {bundle['file'] for bundle in bundles})
    for bundle in bundles:
        ui.status(_(b'%s: %s, %s in %.1f s\n') % (
            pycompat.sysbytes(bundle['file']),
            pycompat.sysbytes(bundle['spec']),
            util.bytecount(bundle['size']), bundle['seconds']))
    if expired:
        ui.status(_(b'deleted %d expired bundles\n') % len(expired))
    if b'clonebundles' not in dict(ui.configitems(b'extensions')):
        ui.warn(_(b'(the server offers the manifest to clients only with '
                  b'the clonebundles extension enabled)\n'))
    return 0


def _remove_temporaries(outdir):
    """Remove what killed runs left behind; the bundlegen lock is held, so
    no live run owns any of it."""
    for name in os.listdir(outdir):
        if name.startswith(_TEMP_PREFIX):
            path = os.path.join(outdir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                util.tryunlink(path)


def _take_snapshot(ui, repo, path):
    """Copy the store to ``path`` with hardlinks, under the store lock, and
    return the snapshot's tip as hex.  Mercurial breaks a hardlink before
    writing to a file, so later pushes cannot change the snapshot."""
    with repo.lock():
        localrepo.createrepository(
            ui, path,
            requirements=set(repo.requirements) - {b'shared', b'relshared'})
        streamclone.local_copy(repo, hg.repository(ui, path))
    tip = hg.repository(ui, path)[b'tip']
    if tip.rev() == nullrev:
        raise error.Abort(_(b'repository is empty, nothing to bundle'))
    return tip.hex()


def _hg(ui, args):
    """Run hg with this process's extensions (a snapshot has no hgrc of its
    own, and may need them to be read); return its stdout."""
    config = []
    for name, path in ui.configitems(b'extensions'):
        if not path.startswith(b'!'):
            config += [b'--config', b'extensions.%s=%s' % (name, path)]
    env = dict(os.environ, HGPLAIN='1')
    proc = subprocess.run(procutil.hgcmd() + config + args, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines() or [b'exit %d'
                                                     % proc.returncode]
        raise error.Abort(_(b'%s failed: %s') % (args[2], lines[-1]))
    return proc.stdout


def _build_one(ui, settings, snapshot, outdir, tip, fmt):
    name = b'%s.%s.hg' % (tip, fmt)
    temp = os.path.join(outdir, _TEMP_PREFIX + name)
    start = time.monotonic()
    _hg(ui, [b'-R', snapshot, b'bundle', b'-q', b'-a', b'--config',
             b'extensions.wirezstd='] + settings.bundle_args(fmt) + [temp])
    seconds = time.monotonic() - start
    spec = _hg(ui, [b'-R', snapshot, b'debugbundle', b'--spec',
                    temp]).strip()
    expected = FORMATS[fmt]
    if spec != expected and not spec.startswith(expected + b';'):
        raise error.Abort(_(b'bundle %s has spec %s, expected %s')
                          % (name, spec, expected))
    digest = hashlib.sha256()
    size = 0
    with open(temp, 'rb') as fh:
        for block in iter(lambda: fh.read(1 << 20), b''):
            digest.update(block)
            size += len(block)
        os.fsync(fh.fileno())
    os.replace(temp, os.path.join(outdir, name))
    return {'format': fmt.decode(), 'file': name.decode(),
            'spec': spec.decode(), 'size': size,
            'sha256': digest.hexdigest(), 'seconds': round(seconds, 2)}


def _build_all(ui, settings, snapshot, outdir, tip):
    """Build every format, in parallel up to ``jobs``; in format order."""
    progress = ui.makeprogress(_(b'bundling'), unit=_(b'bundles'),
                               total=len(settings.formats))
    with concurrent.futures.ThreadPoolExecutor(settings.jobs) as pool:
        futures = {pool.submit(_build_one, ui, settings, snapshot, outdir,
                               tip, fmt): fmt for fmt in settings.formats}
        built = {}
        for future in concurrent.futures.as_completed(futures):
            built[futures[future]] = future.result()
            progress.increment()
    progress.complete()
    return [built[fmt] for fmt in settings.formats]


def _upload(ui, settings, outdir, bundle):
    if not settings.upload_command:
        return
    environ = {
        b'BUNDLE_PATH': os.path.join(outdir, bundle['file'].encode()),
        b'BUNDLE_NAME': bundle['file'].encode(),
        b'BUNDLE_SPEC': bundle['spec'].encode(),
        b'BUNDLE_SHA256': bundle['sha256'].encode(),
        b'BUNDLE_URL': settings.url(bundle['file'].encode()),
    }
    code = ui.system(settings.upload_command, environ=environ,
                     blockedtag=b'bundlegen_upload')
    if code:
        raise error.Abort(
            _(b'upload of %s failed (%s)')
            % (bundle['file'].encode(), procutil.explainexit(code)),
            hint=_(b'the manifest was not changed; fix '
                   b'bundlegen.upload-command and run hg bundlegen again'))


def manifest_line(settings, bundle):
    """The ``clonebundles.manifest`` line of one bundle."""
    url = settings.url(bundle['file'].encode())
    # ``debugbundle --spec`` already quotes parameter values once, which
    # is what manifest readers unquote.
    attrs = [b'BUNDLESPEC=' + bundle['spec'].encode()]
    if url.startswith(b'https://'):
        attrs.append(b'REQUIRESNI=true')
    attrs.append(b'DIGEST=sha256:' + bundle['sha256'].encode())
    return b' '.join([url] + attrs)


def _write_manifest(repo, settings, bundles):
    old = repo.vfs.tryread(MANIFEST)
    if old:
        with repo.vfs(MANIFEST + b'.old', b'wb', atomictemp=True) as fh:
            fh.write(old)
    with repo.vfs(MANIFEST, b'wb', atomictemp=True) as fh:
        for bundle in bundles:
            fh.write(manifest_line(settings, bundle) + b'\n')


def _write_index(outdir, tip, settings, bundles):
    index = {
        'tip': tip.decode(),
        'generated': int(time.time()),
        'bundles': [dict(bundle, url=settings.url(
            bundle['file'].encode()).decode()) for bundle in bundles],
    }
    with util.atomictempfile(os.path.join(outdir, INDEX),
                             b'wb') as fh:
        fh.write(json.dumps(index, indent=2).encode() + b'\n')


def _expire(outdir, days, keep):
    """Delete bundles older than ``days`` that are not in ``keep``."""
    cutoff = time.time() - days * 86400
    expired = []
    for name in os.listdir(outdir):
        path = os.path.join(outdir, name)
        if (name.endswith(b'.hg') and name.decode() not in keep
                and os.path.getmtime(path) < cutoff):
            os.unlink(path)
            expired.append(name)
    return expired


# Clients ---------------------------------------------------------------


def _store_holds_data(repo):
    for root, _dirs, files in os.walk(repo.spath):
        for name in files:
            if (name.endswith((b'.i', b'.d', b'.n'))
                    and os.path.getsize(os.path.join(root, name))):
                return True
    return False


def _trypullbundlefromurl(orig, ui, repo, url, *args, **kwargs):
    try:
        return orig(ui, repo, url, *args, **kwargs)
    except (error.Abort, IOError) as err:
        repo.invalidate()
        if (not ui.configbool(b'ui', b'clonebundlefallback')
                or len(repo.unfiltered()) or _store_holds_data(repo)):
            raise
        ui.warn(_(b'clone bundle %s is broken: %s\n')
                % (url, stringutil.forcebytestr(err)))
        return False


def extsetup(ui):
    extensions.wrapfunction(exchange, 'trypullbundlefromurl',
                            _trypullbundlefromurl)
