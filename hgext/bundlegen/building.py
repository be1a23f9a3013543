# building.py - a run's snapshot and the bundles built from it
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""A run's bundles: the snapshot of the repository taken under its store
lock, the ``hg bundle`` processes that build every format from it in
parallel (killed with the run), and each bundle's check and final name."""

import ctypes
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from mercurial import (
    error,
    localrepo,
    phases,
    pycompat,
    streamclone,
    util,
)
from mercurial.i18n import _
from mercurial.node import nullrev
from mercurial.utils import procutil, stringutil

from hgext3rd import _hgcompat
from vcsperf.core import bundlestore

from .formats import FORMATS

_TEMP_PREFIX = b'.bundlegen-tmp-'
_SNAPSHOT_PREFIX = b'bundlegen-snapshot-'


def build(ui, say, repo, settings, outdir):
    """Snapshot the repository and build every format of ``settings``
    from it into ``outdir``; return the snapshot's tip (hex) and the
    bundles, in format order."""
    # what killed runs left: their directories in the output, their
    # snapshots in .hg (a killed run's ``hg bundle`` may still be writing
    # in its own directory, see _child_setup: the next run removes it)
    bundlestore.remove_leftovers(outdir, _TEMP_PREFIX)
    bundlestore.remove_leftovers(repo.sharedpath, _SNAPSHOT_PREFIX)
    rundir = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=outdir)
    # In the .hg holding the store: hardlinks, on any output filesystem, so
    # the store lock is held for seconds.
    snapshot = tempfile.mkdtemp(prefix=_SNAPSHOT_PREFIX,
                                dir=repo.sharedpath)
    try:
        tip, has_secret = _take_snapshot(ui, repo, snapshot)
        formats = _formats_to_build(ui, settings, has_secret)
        bundles = _build_all(ui, say, settings, formats, snapshot, rundir,
                             outdir, tip)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
        shutil.rmtree(snapshot, ignore_errors=True)
    return tip, bundles


def _take_snapshot(ui, repo, path):
    """Copy the store to ``path`` (beside it, so with hardlinks) under the
    store lock, and return the snapshot's tip as hex.  Mercurial breaks a
    hardlink before writing to a file, so later pushes cannot change the
    snapshot."""
    with repo.lock():
        localrepo.createrepository(
            ui, path,
            requirements=set(repo.requirements) - {b'shared', b'relshared'})
        copy = _hgcompat.repofactory.repository(ui, path)
        streamclone.local_copy(repo, copy)
        # local_copy leaves the phases out (as a stream clone does: all
        # public), so the snapshot would bundle and publish secret
        # changesets; it gets the store's own, copied under the same lock.
        phaseroots = repo.svfs.join(b'phaseroots')
        if os.path.exists(phaseroots):
            util.copyfile(phaseroots, copy.svfs.join(b'phaseroots'))
    copy = _hgcompat.repofactory.repository(ui, path)
    # What a pull from the server sends: no secret (nor hidden) changeset.
    tip = copy.filtered(b'served')[b'tip']
    if tip.rev() == nullrev:
        raise error.Abort(_(b'repository is empty, nothing to bundle')
                          if len(copy) == 0 else
                          _(b'repository has only secret changesets, '
                            b'nothing to bundle'))
    return tip.hex(), phases.hassecret(copy)


def _formats_to_build(ui, settings, has_secret):
    """The formats of ``settings`` this run builds: as core refuses a
    stream clone of a repository with secret changesets (which a stream
    bundle would carry, and make public), the stream format is left out
    of it, with a warning, unless ``server.uncompressedallowsecret``."""
    if not has_secret or ui.configbool(b'server', b'uncompressedallowsecret'):
        return list(settings.formats)
    formats = [fmt for fmt in settings.formats if not FORMATS[fmt].stream]
    if len(formats) < len(settings.formats):
        ui.warn(_(b'bundlegen: not building the stream bundle: the '
                  b'repository has secret changesets (see '
                  b'server.uncompressedallowsecret)\n'))
    return formats


if pycompat.sysplatform.startswith(b'linux'):
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _PR_SET_PDEATHSIG = 1

    def _child_setup(parent):
        """In a child before it runs hg: have Linux kill it when its
        parent dies, so a killed run leaves no ``hg bundle`` running."""
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)
else:
    # Elsewhere a killed run's children run on to the end; they write only
    # in that run's own directory, which the next run removes.
    _child_setup = None


def _spawn(ui, args, **popenargs):
    """Start hg with this process's extensions (a snapshot has no hgrc of
    its own, and may need them to be read).  This process must not run
    threads: the child runs _child_setup between fork and exec."""
    config = []
    for name, path in ui.configitems(b'extensions'):
        if not path.startswith(b'!'):
            config += [b'--config', b'extensions.%s=%s' % (name, path)]
    setup = _child_setup and functools.partial(_child_setup, os.getpid())
    return subprocess.Popen(procutil.hgcmd() + config + args,
                            env=dict(os.environ, HGPLAIN='1'),
                            preexec_fn=setup, **popenargs)


def _check_exit(args, code, stderr):
    if code:
        lines = stderr.strip().splitlines() or [b'exit %d' % code]
        raise error.Abort(_(b'%s failed: %s') % (args[2], lines[-1]))


def _hg(ui, args):
    """Run hg as _spawn does and return its stdout."""
    proc = _spawn(ui, args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    _check_exit(args, proc.returncode, err)
    return out


class _Build:
    """One format's ``hg bundle`` of the snapshot, into the run's own
    directory; ``finish`` checks the bundle and publishes it under a name
    that says what it holds."""

    def __init__(self, ui, settings, snapshot, rundir, fmt):
        self.fmt = fmt
        self.snapshot = snapshot
        self.temp = os.path.join(rundir, fmt + b'.hg')
        self.errors = os.path.join(rundir, fmt + b'.err')
        # A changegroup holds what a pull sends, no secret changeset
        # (a stream bundle copies the store; see _formats_to_build).
        # (The stream format is built only where _formats_to_build allows
        # it, and the snapshot has no hgrc to say so.)
        revs = ([b'-a', b'--config', b'server.uncompressedallowsecret=yes']
                if FORMATS[fmt].stream
                else [b'--base', b'null', b'-r', b'heads(not secret())'])
        # wirezstd writes zstd-v2 bundles with long-distance matching
        self.args = ([b'-R', snapshot, b'bundle', b'-q'] + revs
                     + [b'--config', b'extensions.wirezstd=']
                     + FORMATS[fmt].bundle_args(settings))
        self.start = time.monotonic()
        with open(self.errors, 'wb') as errors:
            self.proc = _spawn(ui, self.args + [self.temp],
                               stdout=subprocess.DEVNULL, stderr=errors)

    def finish(self, ui, settings, outdir, tip):
        seconds = time.monotonic() - self.start
        with open(self.errors, 'rb') as fh:
            _check_exit(self.args, self.proc.returncode, fh.read())
        spec = _hg(ui, [b'-R', self.snapshot, b'debugbundle', b'--spec',
                        self.temp]).strip()
        expected = FORMATS[self.fmt]
        if not expected.spec_matches(spec):
            raise error.Abort(_(b'bundle %s has spec %s, expected %s')
                              % (self.fmt, stringutil.escapestr(spec),
                                 expected.spec))
        digest = hashlib.sha256()
        size = 0
        with open(self.temp, 'rb') as fh:
            for block in iter(lambda: fh.read(1 << 20), b''):
                digest.update(block)
                size += len(block)
            os.fsync(fh.fileno())
        # The same name always holds the same bytes: a run never changes a
        # file that a published manifest names.
        name = b'%s.%s.%s.hg' % (tip, self.fmt,
                                 digest.hexdigest()[:16].encode())
        os.replace(self.temp, os.path.join(outdir, name))
        urls = [d.public_url(name.decode()) for d in settings.destinations]
        if settings.base_url:
            urls.insert(0, settings.url(name).decode())
        # ``url``: the base-url one, as bundles.json readers know it
        return {'format': self.fmt.decode(), 'file': name.decode(),
                'url': settings.base_url and urls[0], 'urls': urls,
                'spec': spec.decode(),
                'size': size, 'sha256': digest.hexdigest(),
                'seconds': round(seconds, 2)}


def _build_all(ui, say, settings, formats, snapshot, rundir, outdir, tip):
    """Build ``formats``, up to ``jobs`` at a time; in format order."""
    progress = ui.makeprogress(_(b'bundling'), unit=_(b'bundles'),
                               total=len(formats))
    waiting = list(formats)
    running = []
    built = {}
    try:
        while waiting or running:
            while waiting and len(running) < settings.jobs:
                running.append(_Build(ui, settings, snapshot, rundir,
                                      waiting.pop(0)))
            done = [build for build in running
                    if build.proc.poll() is not None]
            for build in done:
                running.remove(build)
                bundle = build.finish(ui, settings, outdir, tip)
                built[build.fmt] = bundle
                progress.increment()
                say(_(b'built %s: %s in %.1f s (%d of %d)\n')
                    % (build.fmt, util.bytecount(bundle['size']),
                       bundle['seconds'], len(built), len(formats)))
            if not done:
                time.sleep(0.05)
    finally:
        for build in running:
            build.proc.kill()
            build.proc.wait()
    progress.complete()
    return [built[fmt] for fmt in formats]
