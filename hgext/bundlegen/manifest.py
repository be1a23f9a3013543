# manifest.py - the clonebundles.manifest bundlegen publishes
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""``.hg/clonebundles.manifest``, the list ``hg serve`` hands to cloning
clients: its lines made and parsed back as clients parse them before they
are published, the published one read, and a new one written in place of
it atomically."""

import hashlib
import re

from mercurial import (
    bundlecaches,
    error,
    util,
)
from mercurial.i18n import _
from mercurial.utils import stringutil

MANIFEST = b'clonebundles.manifest'


def manifest_lines(repo, settings, bundles):
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


def write_manifest(repo, lines):
    """Replace the manifest; return the entries of the one it replaced,
    and the sha256 of what was written (to see later whether something
    else wrote it)."""
    replaced = read_manifest(repo)
    old = repo.vfs.tryread(MANIFEST)
    if old:
        with repo.vfs(MANIFEST + b'.old', b'wb', atomictemp=True) as fh:
            fh.write(old)
    data = b''.join(line + b'\n' for line in lines)
    with repo.vfs(MANIFEST, b'wb', atomictemp=True) as fh:
        fh.write(data)
    return replaced, hashlib.sha256(data).hexdigest()


def _parse_manifest_line(repo, line):
    """The entries Mercurial's own parser makes of ``line``, or None where
    it fails: clients then crash, with a ValueError for a field without
    "=", or an AssertionError for a spec whose "-" follows its first ";"."""
    try:
        return bundlecaches.parseclonebundlesmanifest(repo, line)
    except (ValueError, AssertionError):
        return None


def read_manifest(repo):
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


def file_names(entries):
    """The names of the files the manifest entries point to."""
    names = set()
    for entry in entries:
        path = re.split(br'[?#]', entry[b'URL'], 1)[0]
        names.add(util.urlreq.unquote(path.rsplit(b'/', 1)[-1]))
    return names


def current_sha256(repo):
    """The sha256 of the manifest as it is now, to compare with what this
    extension last wrote."""
    return hashlib.sha256(repo.vfs.tryread(MANIFEST)).hexdigest()
