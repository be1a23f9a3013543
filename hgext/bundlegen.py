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
  # core's: makes hg serve offer the manifest to clients
  clonebundles =

  [bundlegen]
  output = /var/www/hg-bundles/myrepo
  base-url = https://cdn.example.com/hg-bundles/myrepo
  formats = zstd-max, gzip, stream

Object storage: ``bundlegen`` uploads the bundles itself to any number of
S3-compatible destinations (AWS S3 in several regions, GCS's XML API,
MinIO, versitygw...), each with manifest lines of its own.  Needs boto3
(the ``s3`` extra of your vcsperf checkout: ``pip install
'/path/to/vcsperf[s3]'``); credentials come the way boto3 finds them
(environment, ``~/.aws``, instance role; ``profile`` picks one)::

  [bundlegen]
  output = /var/lib/hg-bundles/mozilla-central
  # clients' order of preference, when they state none
  destinations = cdn, usw2, euc1

  [bundlegen-destinations]
  cdn.url = s3://moz-hg-bundles/mozilla-central
  cdn.region = us-west-2
  cdn.base-url = https://hg.cdn.example.com/mozilla-central
  cdn.cdn = true
  usw2.url = s3://moz-hg-bundles/mozilla-central
  usw2.region = us-west-2
  usw2.attributes = ec2region=us-west-2
  euc1.url = s3://moz-hg-bundles-euc1/mozilla-central
  euc1.region = eu-central-1
  euc1.attributes = ec2region=eu-central-1
  # a server that is not AWS: its endpoint (path-style URLs)
  # local.endpoint = http://127.0.0.1:7070

A destination's settings: ``url`` (``s3://BUCKET/PREFIX``, required),
``region`` (default ``us-east-1``), ``endpoint``, ``profile``,
``base-url`` (where clients download from, by default the bucket's S3
URL), ``attributes`` (``KEY=VALUE`` pairs its manifest lines carry, for
``ui.clonebundleprefers``), ``cdn`` (``true`` adds ``cdn=true``),
``cache-control`` (default ``public, max-age=31536000, immutable``: a
bundle's name never stands for other bytes).  Uploads go in 64 MiB parts
with a SHA-256 checksum per part that the server checks, with retries, as
``application/x-mercurial-bundle``; an object already there under the
same name, size and sha256 is not sent again.

Every run first checks each destination (boto3 installed, credentials
found, the bucket answering), before it builds anything.  All of a run's
requests to object storage together (checks, uploads, deletes) take at
most ``bundlegen.upload-timeout`` seconds (default 3600; raise it for
bundles of many GiB on a slow link), however a server stalls or trickles;
besides, each connect waits at most 20 s and each read 60 s, and a
request is tried 5 times.  A run that passes the deadline aborts before
the manifest is touched, and takes back what it uploaded.

One run:

1. decides whether new bundles are due: when the repository moved at
   least ``bundlegen.min-changesets`` (default 1) changesets or
   ``bundlegen.min-bytes`` (default 0: off) bytes of store past the last
   published tip, or formats or destinations changed, or ``--force``;
   otherwise it says why it does nothing (a no-op takes well under a
   second).  ``--dry-run`` says what a run would build and retire.
   Before it says the bundles are published already, it checks that
   they are: every object of the last generation on every destination
   (one HEAD each), the files of the output directory when ``base-url``
   serves it, and the manifest (the sha256 of what it last wrote, kept
   in ``bundles.json``).  A missing object is uploaded again from its
   local copy once the copy's sha256 is checked; without a good copy,
   new bundles are built.  A manifest that something else rewrote is
   written again;
2. takes a snapshot of the repository under its store lock, in the
   ``.hg`` directory that holds the store (``bundlegen-snapshot-*``), so
   with hardlinks whatever filesystem the output directory is on: seconds
   even for big repositories.  A push landing meanwhile cannot tear the
   bundles apart, and all of them hold the same changesets;
3. builds every format from the snapshot, in parallel up to
   ``bundlegen.jobs`` processes, in a directory of its own in the output
   directory (``.bundlegen-tmp-*``, removed by the next run if this one is
   killed), saying each one's size and time as it is done;
4. checks each bundle's spec (``hg debugbundle --spec``), computes its
   sha256 and moves it to ``<tip node>.<format>.<sha256 prefix>.hg``;
5. runs ``bundlegen.upload-command`` once per bundle that the published
   manifest does not name already, if set, with core clone-bundles'
   variables ``HGCB_BUNDLE_PATH`` and ``HGCB_BUNDLE_BASENAME``, and
   ``HGCB_BUNDLE_URL``, ``HGCB_BUNDLE_SPEC``, ``HGCB_BUNDLE_SHA256`` (the
   older ``BUNDLE_PATH``, ``BUNDLE_NAME``, ``BUNDLE_SPEC``,
   ``BUNDLE_SHA256`` and ``BUNDLE_URL`` are still set); then uploads every
   bundle to every destination;
6. replaces ``clonebundles.manifest`` atomically, keeping the previous one
   as ``clonebundles.manifest.old``.  Its lines come in the order of
   ``bundlegen.formats`` (clients take the first they can use unless
   ``ui.clonebundleprefers`` says otherwise), and within a format the
   ``base-url`` line first, then one per destination; they carry
   ``BUNDLESPEC``, ``DIGEST=sha256:...`` (clients check it), for https
   URLs ``REQUIRESNI=true``, and the destination's attributes;
7. records the generation in ``bundles.json`` next to the bundles
   (formats, specs, sizes, digests, build times), keeping the new
   generation and the ``bundlegen.keep`` ones before it (default 1, at
   least 1: the generation a run replaces is never deleted by that run,
   so a client that read the manifest just before, or a CDN's cached
   copy of it, still finds its bundle).  The bundles of older generations
   are recorded as still to delete (``undeleted``), then deleted from
   every destination, through ``bundlegen.delete-command`` (with
   ``HGCB_BUNDLE_URL`` and ``HGCB_BASENAME``, as core's) and from the
   output directory.  A deletion that is refused (an Object-Lock bucket,
   a policy without delete, a server that is down, a failing delete
   command) stays recorded and is tried again by every later run, even
   one with nothing else to do; the run says so in one line per place,
   goes on with the other places, and exits with status 1.  Last, it
   deletes the other bundles of the output directory, named neither by the
   new manifest nor by the one it replaced, once they are
   ``bundlegen.expire-days`` old.

Exit status: 0 when the bundles are published (or nothing was due), 1
when they are but some retired bundles could not be deleted, 255 on an
abort (the manifest is then unchanged).

Service operation: progress lines and one line per format go to
``ui.status`` on a terminal or not (to stderr with ``-T json``, which
prints one object per bundle, or one saying why nothing was done); a
second run started meanwhile says whose lock it waits for, and does
nothing if the first published the same tip; it waits at most
``ui.timeout`` seconds (core's lock setting, default 600), then aborts.
``bundlegen`` events go to ``ui.log`` (blackbox).

bundlegen owns ``.hg/clonebundles.manifest``.  Core's clone-bundles
auto-generation writes the same file, so a run aborts when
``clone-bundles.auto-generate.formats`` is set; use one or the other.  If
something else rewrites the manifest (``hg admin::clone-bundles-refresh``
run by hand, an editor), the next run notices and writes its own again.

A bundle's name holds the start of its sha256, so a name never stands for
other bytes, and no run changes a file that clients may be sent: a rerun
at the same tip whose bundle differs (bundles also hold caches and
obsolescence markers) publishes it under a new name.  The files of the
manifest a run replaces stay at least until the next run, for clients
that read it just before (see ``bundlegen.keep``).  The upload command
may write in place (a plain ``cp`` to a web server's directory): what it
writes is named by no manifest yet.  Use one output directory per
repository.

A bad configuration, a manifest clients cannot parse, or a failed upload
to any destination stops the run before the manifest is touched: clients
keep getting the bundles they got before (a failed run deletes what it
uploaded).  ``bundlegen.base-url`` must be an absolute
``http``, ``https`` or ``file`` URL with no query or fragment, and
characters a URL may not hold percent-encoded (a space as ``%20``); every
manifest line is parsed back as clients parse it before it is published.

A run killed with its process group (``kill -9 -PGID``, or systemd
stopping the unit) leaves nothing running.  On Linux, its ``hg bundle``
processes are also killed when only the run is; elsewhere they run on in
that run's own directory, and the next run does not wait for them.

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
  format.  Built with ``obsolescence=yes``, so a repository with
  obsolescence markers (a non-publishing server) is bundled with them;
  the markers are not mandatory (``obsolescence-mandatory=no``), so a
  client without evolution clones and leaves them out.

Clients that cannot fetch a bundle (a 404, a refused connection) fall
back to a normal clone when they set ``ui.clonebundlefallback = true``.
A truncated or corrupt download is caught by the digest, and a stock
client then stops the clone with an error; a client with this extension
enabled falls back to a normal clone instead, as long as nothing of the
bundle stayed in the store (always so for changegroup bundles, whose
transaction is rolled back; a broken stream bundle still stops the clone,
whose destination is then removed).
"""

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time

from mercurial import (
    bundlecaches,
    cmdutil,
    error,
    exchange,
    extensions,
    localrepo,
    lock as lockmod,
    pycompat,
    registrar,
    streamclone,
    util,
)
from mercurial.i18n import _
from mercurial.node import bin, nullrev
from mercurial.utils import procutil, stringutil

from hgext3rd import _hgcompat
from vcsperf.core import bundlestore, errors

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'bundlegen', b'output', default=None)
configitem(b'bundlegen', b'base-url', default=None)
configitem(b'bundlegen', b'formats', default=[b'zstd-max', b'gzip',
                                              b'stream'])
configitem(b'bundlegen', b'zstd-level', default=19)
configitem(b'bundlegen', b'zstd-threads',
           default=min(os.cpu_count() or 1, 200))
configitem(b'bundlegen', b'jobs', default=os.cpu_count() or 1)
configitem(b'bundlegen', b'expire-days', default=7)
configitem(b'bundlegen', b'upload-command', default=None)
configitem(b'bundlegen', b'delete-command', default=None)
configitem(b'bundlegen', b'keep', default=1)
configitem(b'bundlegen', b'upload-timeout', default=3600)
configitem(b'bundlegen', b'min-changesets', default=1)
configitem(b'bundlegen', b'min-bytes', default=0)
configitem(b'bundlegen', b'destinations', default=[])

# Format name -> bundle spec given to ``hg bundle``; zstd-max also gets
# the configured level and threads.
FORMATS = {
    b'zstd-max': b'zstd-v2',
    b'zstd': b'zstd-v2',
    b'gzip': b'gzip-v2',
    b'stream': b'none-v2;stream=v2',
}

MANIFEST = b'clonebundles.manifest'
CONTENT_TYPE = 'application/x-mercurial-bundle'
INDEX = b'bundles.json'
_TEMP_PREFIX = b'.bundlegen-tmp-'
_SNAPSHOT_PREFIX = b'bundlegen-snapshot-'
# The place of pending deletions that is the output directory (and the
# delete command): no destination's name is empty.
_OUTPUT_PLACE = ''

# What a base URL may be: http, https or file, then only characters a URL
# holds as they are (RFC 3986's unreserved and reserved ones, but not the
# ``?`` and ``#`` after which a bundle's name could not be appended) and
# %XX escapes.  Clients split manifest lines at whitespace and open the URL
# as it is written.
_URL_CHAR = br"(?:[A-Za-z0-9\-._~:/@!$&'()*+,;=\[\]]|%[0-9A-Fa-f]{2})"
_BASE_URL = re.compile(br"(?:(?i:https?)://(?!/)%s+|(?i:file):///%s+)\Z"
                       % (_URL_CHAR, _URL_CHAR))

class _Settings:
    """The checked ``[bundlegen]`` and ``[bundlegen-destinations]``
    configuration."""

    def __init__(self, ui, output, base_url):
        self.output = output or ui.config(b'bundlegen', b'output')
        base_url = base_url or ui.config(b'bundlegen', b'base-url')
        self.destinations = _destinations(ui)
        if not self.output or not (base_url or self.destinations):
            raise error.Abort(
                _(b'bundlegen needs an output directory, and a base URL or '
                  b'a destination'),
                hint=_(b'set bundlegen.output and bundlegen.base-url (or '
                       b'bundlegen.destinations), or pass --output and '
                       b'--base-url'))
        self.base_url = base_url and check_base_url(base_url)
        self.formats = ui.configlist(b'bundlegen', b'formats')
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise error.Abort(
                _(b'unknown bundle format in bundlegen.formats: %s')
                % b', '.join(unknown or [b'(none listed)']),
                hint=_(b'known formats: %s') % b', '.join(sorted(FORMATS)))
        if len(set(self.formats)) != len(self.formats):
            raise error.Abort(_(b'bundlegen.formats lists a format twice'),
                              hint=_(b'list each format once'))
        self.zstd_level = _config_int(ui, b'zstd-level', 1, 22)
        # zstd runs at most 200 worker threads
        self.zstd_threads = _config_int(ui, b'zstd-threads', 0, 200)
        self.jobs = _config_int(ui, b'jobs', 1, 4096)
        self.expire_days = _config_int(ui, b'expire-days', 0, 36500)
        self.keep = _config_int(ui, b'keep', 1, 1000)
        self.upload_timeout = _config_int(ui, b'upload-timeout', 1,
                                          7 * 86400)
        self.min_changesets = _config_int(ui, b'min-changesets', 0, 1 << 40)
        self.min_bytes = _config_int(ui, b'min-bytes', 0, 1 << 60)
        self.upload_command = ui.config(b'bundlegen', b'upload-command')
        self.delete_command = ui.config(b'bundlegen', b'delete-command')

    def bundle_args(self, fmt):
        """Arguments to ``hg bundle`` for format ``fmt``."""
        args = [b'-t', FORMATS[fmt]]
        if fmt == b'stream':
            # Without it ``hg bundle`` refuses a repository with markers;
            # with it the bundle carries them, as a stream clone does.  Not
            # mandatory: a client without evolution (Mercurial 6.9 aborts
            # on a mandatory part) clones and leaves the markers out.
            args[1] += b';obsolescence=yes;obsolescence-mandatory=no'
        if fmt == b'zstd-max':
            args += [b'--config', b'experimental.bundlecomplevel.zstd=%d'
                     % self.zstd_level,
                     b'--config', b'experimental.bundlecompthreads.zstd=%d'
                     % self.zstd_threads]
        return args

    def url(self, name):
        return b'%s/%s' % (self.base_url, name)

    def layout(self):
        """What a generation's bundles depend on beside the tip: a run
        with another layout publishes a new generation."""
        return {'formats': [f.decode() for f in self.formats],
                'base-url': (self.base_url or b'').decode(),
                'destinations': [d.name for d in self.destinations]}


def _destinations(ui):
    """The destinations of ``bundlegen.destinations`` (by default every
    one of ``[bundlegen-destinations]``, in its order)."""
    table = {}
    for key, value in ui.configitems(b'bundlegen-destinations'):
        name, dot, setting = pycompat.sysstr(key).rpartition('.')
        if not dot or not name:
            raise error.Abort(
                _(b'bundlegen-destinations.%s is not NAME.SETTING') % key,
                hint=_(b'for example usw2.url = s3://bucket/prefix'))
        table.setdefault(name, {})[setting] = pycompat.sysstr(value)
    order = [pycompat.sysstr(name)
             for name in ui.configlist(b'bundlegen', b'destinations')]
    try:
        return bundlestore.destinations(table, order or list(table))
    except errors.Abort as err:
        raise _hg_abort(err, b'bundlegen: ')


def _config_int(ui, name, low, high):
    value = ui.config(b'bundlegen', name)
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise error.Abort(
            _(b'bundlegen.%s must be a whole number from %d to %d')
            % (name, low, high),
            hint=_(b'it is %s') % stringutil.escapestr(
                pycompat.bytestr(value)))
    return number


def check_base_url(url):
    """``url`` without trailing slashes, if clients can fetch
    ``<url>/<bundle name>`` from a manifest line naming it; else abort."""
    if not _BASE_URL.match(url.rstrip(b'/')):
        raise error.Abort(
            _(b'bundlegen.base-url is not a URL clients can fetch from: %s')
            % stringutil.escapestr(url),
            hint=_(b'give an absolute http, https or file URL without '
                   b'query or fragment; percent-encode other characters '
                   b'(a space as %20)'))
    return url.rstrip(b'/')


@command(
    b'bundlegen',
    [
        (b'', b'output', b'', _(b'write bundles to this directory'),
         _(b'DIR')),
        (b'', b'base-url', b'', _(b'URL under which the directory is '
                                  b'served'), _(b'URL')),
        (b'f', b'force', None, _(b'build new bundles even if the '
                                 b'repository has not moved enough')),
        (b'n', b'dry-run', None, _(b'say what a run would do, and do '
                                   b'nothing')),
    ] + cmdutil.formatteropts,
    _(b'hg bundlegen [--output DIR] [--base-url URL] [-f] [-n] [-T json]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def bundlegen(ui, repo, output=None, base_url=None, **opts):
    """generate clone bundles and publish them in the manifest

    Builds every format of ``bundlegen.formats`` from one snapshot of the
    repository, verifies each bundle, uploads it to every destination,
    then replaces ``.hg/clonebundles.manifest`` (see :hg:`help -e
    bundlegen`).  Does nothing when the repository has not moved past
    ``bundlegen.min-changesets`` or ``bundlegen.min-bytes`` since the
    last bundles, unless ``--force``; ``--dry-run`` says what a run would
    do.  With ``-T json``, one object per bundle (or one saying why
    nothing was done); progress then goes to stderr.

    Only one run per repository at a time; a second one says whose run it
    waits for, and then does nothing if that run published this tip.
    """
    settings = _Settings(ui, output, base_url)
    _refuse_core_autogeneration(ui)
    outdir = _output_directory(settings.output)
    fm = ui.formatter(b'bundlegen', pycompat.byteskwargs(opts))
    say = ui.status if fm.isplain() else _stderr(ui)
    with fm:
        if opts.get('dry_run'):
            generations = _generations(outdir)
            reason = _due(repo, settings, generations.latest)
            if reason is None and not opts.get('force'):
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
            generations = _generations(outdir)
            # Written now, unchanged, so that a record that cannot be
            # written stops the run before anything is built or published
            # (a new one: the run's directory beside it is made first).
            if generations.list:
                generations.save()
            with _object_storage(network):
                clients = bundlestore.check(settings.destinations)
            reason = _due(repo, settings, generations.latest)
            if reason is None and not opts.get('force'):
                reason = _check_published(say, repo, settings, outdir,
                                          generations, clients, network)
            if reason is None and not opts.get('force'):
                refused = _sweep(ui, settings, outdir, generations, clients,
                                 network)
                _nothing_to_do(ui, fm, repo, generations.latest,
                               waited=getattr(held, 'delay', 0))
                return 1 if refused else 0
            reason = reason or 'forced'
            say(_(b'bundlegen: building %s (%s)\n')
                % (b', '.join(settings.formats), pycompat.bytestr(reason)))
            published = _read_manifest(repo)
            _remove_leftovers(outdir, _TEMP_PREFIX)
            _remove_leftovers(repo.sharedpath, _SNAPSHOT_PREFIX)
            rundir = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=outdir)
            # In the .hg holding the store: hardlinks, on any output
            # filesystem, so the store lock is held for seconds.
            snapshot = tempfile.mkdtemp(prefix=_SNAPSHOT_PREFIX,
                                        dir=repo.sharedpath)
            try:
                tip = _take_snapshot(ui, repo, snapshot)
                bundles = _build_all(ui, say, settings, snapshot, rundir,
                                     outdir, tip)
            finally:
                shutil.rmtree(rundir, ignore_errors=True)
                shutil.rmtree(snapshot, ignore_errors=True)
            lines = _manifest_lines(repo, settings, bundles)
            for bundle in bundles:
                _upload(ui, settings, outdir, bundle, published)
            _upload_to_destinations(ui, say, settings.destinations, outdir,
                                    bundles, clients, network)
            with repo.wlock():
                replaced, written = _write_manifest(repo, lines)
            generations.add(dict(
                settings.layout(), tip=tip.decode(),
                generated=bundlestore.now(), changesets=len(repo),
                store_bytes=_store_bytes(repo),
                files=[bundle['file'] for bundle in bundles]))
            # bundlegen.keep counts the generations besides the new one
            retired = generations.retire(settings.keep + 1,
                                         _places(settings))
            # The deletions are recorded before any is done: a killed or
            # refused one is done by a later run.
            generations.save(tip=tip.decode(),
                             generated=generations.latest['generated'],
                             bundles=bundles, manifest_sha256=written)
            # Only now that the new manifest is out: what fell out of the
            # kept generations goes, everywhere.
            refused = _sweep(ui, settings, outdir, generations, clients,
                             network)
            keep = _file_names(replaced) | {
                name.encode() for name in generations.held()}
            expired = _expire(outdir, settings.expire_days, keep)
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


def _refuse_core_autogeneration(ui):
    """Core's clone-bundles auto-generation writes the same manifest: two
    writers would replace each other's bundles."""
    if ui.configlist(b'clone-bundles', b'auto-generate.formats'):
        raise error.Abort(
            _(b'bundlegen and clone-bundles.auto-generate both write '
              b'.hg/clonebundles.manifest'),
            hint=_(b'use one of them: remove clone-bundles.auto-generate.'
                   b'formats from the configuration, or stop running hg '
                   b'bundlegen for this repository'))


@contextlib.contextmanager
def _object_storage(network):
    """Requests to object storage within the run's deadline; the core's
    errors become Mercurial's."""
    try:
        with network:
            yield
    except errors.Abort as err:
        raise _hg_abort(err)


def _places(settings):
    """Where retired bundles are deleted: every destination, and the
    output directory (with ``bundlegen.delete-command``)."""
    return [d.name for d in settings.destinations] + [_OUTPUT_PLACE]


def _check_published(say, repo, settings, outdir, generations, clients,
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
        with _object_storage(network):
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
        _upload_to_destinations(repo.ui, say, [destination], outdir,
                                resend, clients, network)
        say(_(b'uploaded %d missing bundles to %s again\n')
            % (len(resend), destination.name.encode()))
    written = generations.record.get('manifest_sha256')
    current = hashlib.sha256(repo.vfs.tryread(MANIFEST)).hexdigest()
    if written and current != written:
        lines = _manifest_lines(repo, settings, bundles)
        with repo.wlock():
            _replaced, written = _write_manifest(repo, lines)
        generations.save(manifest_sha256=written)
        say(_(b'%s was changed by something else; wrote the bundles of '
              b'tip %s into it again\n')
            % (MANIFEST, generations.latest['tip'][:12].encode()))
    return None


def _local_size(outdir, name):
    try:
        return os.stat(os.path.join(outdir, name.encode())).st_size
    except OSError:
        return None


def _sweep(ui, settings, outdir, generations, clients, network):
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
        with _object_storage(network):
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
    unfiltered = repo.unfiltered()
    tip = latest['tip'].encode()
    if repo[b'tip'].hex() == tip:
        return None
    if not unfiltered.changelog.hasnode(bin(tip)):
        return 'the last bundled tip is no longer in the repository'
    moved = len(repo.revs(b'not ::%s', tip))
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
    if latest and latest['tip'] == repo[b'tip'].hex().decode() and waited:
        why = _(b'another run published bundles of this tip while this '
                b'one waited')
    elif latest and latest['tip'] == repo[b'tip'].hex().decode():
        why = _(b'the bundles of tip %s are published already') % (
            latest['tip'][:12].encode())
    else:
        why = _(b'the repository has not moved past bundlegen.'
                b'min-changesets or bundlegen.min-bytes since tip %s') % (
            latest['tip'][:12].encode())
    fm.startitem()
    fm.data(action=b'skipped', tip=repo[b'tip'].hex())
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
    fm.data(action=b'would-build', tip=repo[b'tip'].hex(),
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


def _output_directory(output):
    outdir = util.expandpath(output)
    try:
        util.makedirs(outdir)
    except OSError as err:
        raise error.Abort(
            _(b'cannot use %s as bundlegen.output: %s')
            % (outdir, stringutil.forcebytestr(err.strerror)),
            hint=_(b'give a directory, or a path where one can be made'))
    if not os.path.isdir(outdir):
        # makedirs takes an existing file for the directory it was asked
        # to make.
        raise error.Abort(
            _(b'cannot use %s as bundlegen.output: not a directory') % outdir,
            hint=_(b'give a directory, or a path where one can be made'))
    return outdir


def _hg_abort(err, prefix=b''):
    """Mercurial's abort for the core's ``err``."""
    return error.Abort(prefix + pycompat.bytestr(str(err)),
                       hint=err.hint and pycompat.bytestr(err.hint))


def _generations(outdir):
    """The record of ``outdir``; the core's refusal of one it cannot read
    becomes Mercurial's."""
    try:
        return bundlestore.Generations(os.path.join(outdir, INDEX).decode())
    except errors.Abort as err:
        raise _hg_abort(err)


def _parse_manifest_line(repo, line):
    """The entries Mercurial's own parser makes of ``line``, or None where
    it fails: clients then crash, with a ValueError for a field without
    "=", or an AssertionError for a spec whose "-" follows its first ";"."""
    try:
        return bundlecaches.parseclonebundlesmanifest(repo, line)
    except (ValueError, AssertionError):
        return None


def _read_manifest(repo):
    """The entries of the published manifest, as clients parse them.  A
    line they cannot parse stops the run: which bundles the manifest names
    decides what may be deleted."""
    data = repo.vfs.tryread(MANIFEST)
    entries = []
    for number, line in enumerate(data.splitlines(), 1):
        parsed = _parse_manifest_line(repo, line)
        if parsed is None:
            raise error.Abort(
                _(b'%s line %d cannot be parsed by clients: %s')
                % (repo.vfs.join(MANIFEST), number,
                   stringutil.escapestr(stringutil.ellipsis(line, 100))),
                hint=_(b'fix or remove that line, then run hg bundlegen '
                       b'again'))
        entries += parsed
    return entries


def _file_names(entries):
    """The names of the files the manifest entries point to."""
    names = set()
    for entry in entries:
        path = re.split(br'[?#]', entry[b'URL'], 1)[0]
        names.add(util.urlreq.unquote(path.rsplit(b'/', 1)[-1]))
    return names


def _remove_leftovers(folder, prefix):
    """Remove what killed runs left behind in ``folder`` (their
    directories in the output directory, their snapshots in .hg); the
    bundlegen lock is held, so no live run owns any of it.  A killed run's
    ``hg bundle`` may still be writing in its own directory (see
    _child_setup): it is removed again by the next run."""
    for name in os.listdir(folder):
        if name.startswith(prefix):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                util.tryunlink(path)


def _take_snapshot(ui, repo, path):
    """Copy the store to ``path`` (beside it, so with hardlinks) under the
    store lock, and return the snapshot's tip as hex.  Mercurial breaks a
    hardlink before writing to a file, so later pushes cannot change the
    snapshot."""
    with repo.lock():
        localrepo.createrepository(
            ui, path,
            requirements=set(repo.requirements) - {b'shared', b'relshared'})
        streamclone.local_copy(repo,
                               _hgcompat.repofactory.repository(ui, path))
    tip = _hgcompat.repofactory.repository(ui, path)[b'tip']
    if tip.rev() == nullrev:
        raise error.Abort(_(b'repository is empty, nothing to bundle'))
    return tip.hex()


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
        self.args = [b'-R', snapshot, b'bundle', b'-q', b'-a', b'--config',
                     b'extensions.wirezstd='] + settings.bundle_args(fmt)
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
        if spec != expected and not spec.startswith(expected + b';'):
            raise error.Abort(_(b'bundle %s has spec %s, expected %s')
                              % (self.fmt, stringutil.escapestr(spec),
                                 expected))
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


def _build_all(ui, say, settings, snapshot, rundir, outdir, tip):
    """Build every format, up to ``jobs`` at a time; in format order."""
    progress = ui.makeprogress(_(b'bundling'), unit=_(b'bundles'),
                               total=len(settings.formats))
    waiting = list(settings.formats)
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
                       bundle['seconds'], len(built), len(settings.formats)))
            if not done:
                time.sleep(0.05)
    finally:
        for build in running:
            build.proc.kill()
            build.proc.wait()
    progress.complete()
    return [built[fmt] for fmt in settings.formats]


def _upload(ui, settings, outdir, bundle, published):
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


def _upload_to_destinations(ui, say, destinations, outdir, bundles, clients,
                            network):
    """Upload every bundle to every destination, within the run's
    deadline; if one upload fails, what this run uploaded is deleted and
    the run aborts, so every manifest stays as it was."""
    def report(destination, size, seconds):
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


def _manifest_lines(repo, settings, bundles):
    """The manifest: format by format in ``bundlegen.formats`` order, the
    output directory's URL first, then each destination's in the order
    of ``bundlegen.destinations``, each with its attributes."""
    lines = []
    for bundle in bundles:
        sites = [[]] if settings.base_url else []
        sites += [d.attributes for d in settings.destinations]
        for url, attributes in zip(bundle['urls'], sites):
            lines.append(manifest_line(
                repo, url.encode(), bundle['spec'].encode(),
                bundle['sha256'].encode(),
                [(k.encode(), v.encode()) for k, v in attributes]))
    return lines


def manifest_line(repo, url, spec, digest, extra=()):
    """The ``clonebundles.manifest`` line of one bundle, checked by parsing
    it as clients do: the same URL, spec, digest and ``extra`` attributes
    (pairs), or abort."""
    # ``debugbundle --spec`` already quotes parameter values once, which
    # is what manifest readers unquote.
    attrs = {b'BUNDLESPEC': spec}
    if url[:8].lower() == b'https://':
        attrs[b'REQUIRESNI'] = b'true'
    attrs[b'DIGEST'] = b'sha256:' + digest
    attrs.update(extra)
    line = b' '.join([url] + [b'%s=%s' % item for item in attrs.items()])
    expected = {key: util.urlreq.unquote(value)
                for key, value in attrs.items()}
    expected[b'URL'] = url
    entries = _parse_manifest_line(repo, line) or []
    if (len(entries) != 1
            or any(entries[0].get(key) != value
                   for key, value in expected.items())
            or b'COMPRESSION' not in entries[0]):
        raise error.Abort(
            _(b'refusing to publish a manifest line clients would misread: '
              b'%s') % stringutil.escapestr(line),
            hint=_(b'check bundlegen.base-url and the bundle spec'))
    return line


def _write_manifest(repo, lines):
    """Replace the manifest; return the entries of the one it replaced,
    and the sha256 of what was written (to see later whether something
    else wrote it)."""
    replaced = _read_manifest(repo)
    old = repo.vfs.tryread(MANIFEST)
    if old:
        with repo.vfs(MANIFEST + b'.old', b'wb', atomictemp=True) as fh:
            fh.write(old)
    data = b''.join(line + b'\n' for line in lines)
    with repo.vfs(MANIFEST, b'wb', atomictemp=True) as fh:
        fh.write(data)
    return replaced, hashlib.sha256(data).hexdigest()


def _expire(outdir, days, keep):
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
    _hgcompat.report_our_crashes()
    extensions.wrapfunction(exchange, 'trypullbundlefromurl',
                            _trypullbundlefromurl)
