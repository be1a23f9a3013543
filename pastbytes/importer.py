"""The import machinery: a finder that gives the modules it is told to
rewrite a loader of its own, that loader, and its pyc cache.

    install(packages=["legacyext"], paths=["/srv/hg/legacy"])
    import legacyext            # its 'foo' literals are now b'foo'
    load_path("/srv/hg/legacy/bookcommit.py", "hgext_bookcommit")

Only modules whose names match the configured packages (the package and
its submodules), or whose files lie under the configured directories, are
rewritten; every other import is left to Python.  Compiled modules are
cached in their own pyc files,
``cache_from_source(path, optimization='pastbytes<N>...')``, which plain
Python never reads or overwrites; the tag changes with the rules
(:meth:`~pastbytes.rewrite.Rules.tag`).

A syntax error in the original source is raised as Python raises it.  A
module that only a zip, frozen or sourceless loader provides is refused
with ``ImportError`` rather than loaded unrewritten.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import marshal
import os
import sys

from . import rewrite

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import Literal

    #: A directory, in any form ``os.fsdecode`` takes.
    DirPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]


def compile_source(data: bytes, path: str,
                   rules: rewrite.Rules = rewrite.DEFAULT_RULES,
                   optimize: int = -1) -> CodeType:
    """Compile source bytes with the rewrite.  A syntax error in the
    original is raised exactly as Python raises it."""
    try:
        text, encoding = rewrite.decode(data)
        code = compile(rewrite.transform(text, rules, encoding), path,
                       "exec", dont_inherit=True, optimize=optimize)
    except (SyntaxError, UnicodeDecodeError, LookupError,
            rewrite.ScanError) as err:
        failure = err
    else:
        return code
    # Outside the except clause, so that Python's own error is not
    # chained to ours.
    compile(data, path, "exec", dont_inherit=True, optimize=optimize)
    if isinstance(failure, rewrite.ScanError):
        raise ImportError("pastbytes: %s: %s" % (path, failure), path=path)
    raise failure       # the original compiles: the rewrite is to blame


def _pyc_header(mtime: float, size: int) -> bytes:
    return (importlib.util.MAGIC_NUMBER + bytes(4)
            + (int(mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (size & 0xFFFFFFFF).to_bytes(4, "little"))


class PastBytesLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles the rewritten source and caches it in
    a pyc of its own (timestamp-validated, like Python's)."""

    def __init__(self, fullname: str, path: str,
                 rules: rewrite.Rules = rewrite.DEFAULT_RULES) -> None:
        super().__init__(fullname, path)
        self.rules = rules
        self._cache_path: str | None | Literal[False] = False

    def cache_path(self) -> str | None:
        """Where the rewritten bytecode is cached, or None when this
        Python caches no bytecode."""
        if self._cache_path is False:
            try:
                self._cache_path = importlib.util.cache_from_source(
                    self.path, optimization=self.rules.tag())
            except NotImplementedError:
                self._cache_path = None
        return self._cache_path

    # Narrower than InspectLoader's static method, which also compiles
    # str and syntax trees: SourceLoader.get_code passes the file's bytes.
    def source_to_code(  # type: ignore[override]
            self, data: bytes, path: str, *,
            _optimize: int = -1) -> CodeType:
        return compile_source(data, path, self.rules, _optimize)

    def get_code(self, fullname: str) -> CodeType:
        source_path = self.get_filename(fullname)
        bytecode_path = self.cache_path()
        stats = self.path_stats(source_path)
        header = _pyc_header(stats["mtime"], stats["size"])
        if bytecode_path is not None:
            try:
                cached = self.get_data(bytecode_path)
            except OSError:
                pass
            else:
                if cached[:16] == header:
                    try:
                        return marshal.loads(memoryview(cached)[16:])
                    except (EOFError, ValueError, TypeError):
                        pass        # damaged: compile again
        code = self.source_to_code(self.get_data(source_path), source_path)
        if bytecode_path is not None and not sys.dont_write_bytecode:
            self.set_data(bytecode_path, header + marshal.dumps(code))
        return code


class PastBytesFinder(importlib.abc.MetaPathFinder):
    """Gives the modules of ``packages``, and those found under ``paths``,
    a :class:`PastBytesLoader`; every other module is left alone."""

    def __init__(self, packages: Iterable[str] = (),
                 paths: Iterable[DirPath] = (),
                 rules: rewrite.Rules = rewrite.DEFAULT_RULES) -> None:
        self.packages = tuple(packages)
        self.rules = rules
        dirs = []
        for path in paths:
            path = os.path.abspath(os.path.expanduser(os.fsdecode(path)))
            dirs += [path, os.path.realpath(path)]
        self.paths = tuple(sorted(set(os.path.normcase(d) for d in dirs)))
        self._prefixes = tuple(d + os.sep for d in self.paths)

    def wants_name(self, fullname: str) -> bool:
        return any(fullname == p or fullname.startswith(p + ".")
                   for p in self.packages)

    def covers(self, filename: str) -> bool:
        """Whether ``filename`` lies under one of the configured
        directories."""
        return _absolute(filename).startswith(self._prefixes)

    def _may_find_under_paths(self, path: Sequence[str] | None) -> bool:
        for entry in (sys.path if path is None else path):
            entry = _absolute(entry or os.curdir) + os.sep
            if entry.startswith(self._prefixes) or \
                    any(d.startswith(entry) for d in self._prefixes):
                return True
        return False

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        by_name = self.wants_name(fullname)
        if not by_name and not (self.paths and
                                self._may_find_under_paths(path)):
            return None
        spec = find_spec_elsewhere(fullname, path, target)
        if spec is None or spec.origin is None:
            return None             # not found, or a namespace package
        if not by_name and not (spec.has_location and
                                self.covers(spec.origin)):
            return None
        # A lazy loader (Mercurial's demandimport installs one) wraps the
        # loader that reads the file: replace that one.  (typeshed does not
        # declare a LazyLoader's ``loader``, hence the ignores.)
        lazy = isinstance(spec.loader, importlib.util.LazyLoader)
        loader = (spec.loader.loader  # type: ignore[union-attr]
                  if lazy else spec.loader)
        if loader is importlib.machinery.BuiltinImporter or \
                isinstance(loader, importlib.machinery.ExtensionFileLoader):
            return None             # compiled code: nothing to rewrite
        if not isinstance(loader, importlib.machinery.SourceFileLoader):
            raise ImportError(
                "pastbytes: cannot rewrite %s: %s provides it (%s), not a "
                "source file; extract it to a directory on sys.path, or "
                "leave it out of the pastbytes packages and paths"
                % (fullname, getattr(loader, "__name__",
                                     type(loader).__name__), spec.origin),
                name=fullname)
        # The spec is the other finder's fresh copy: adapt it in place.
        ours = PastBytesLoader(spec.name, spec.origin, self.rules)
        if lazy:
            spec.loader.loader = ours  # type: ignore[union-attr]
        else:
            spec.loader = ours
        spec.cached = ours.cache_path()
        return spec


def _absolute(path: str) -> str:
    # Import paths are mostly absolute already; abspath is slow.
    if not os.path.isabs(path):
        path = os.path.abspath(path)
    return os.path.normcase(path)


def find_spec_elsewhere(fullname: str, path: Sequence[str] | None = None,
                        target: ModuleType | None = None
                        ) -> ModuleSpec | None:
    """The spec that the rest of ``sys.meta_path`` finds: what importing
    finds without pastbytes."""
    for finder in sys.meta_path:
        if isinstance(finder, PastBytesFinder):
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is not None:
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
    return None


def install(packages: Iterable[str] = (),
            paths: Iterable[DirPath] = (),
            rules: rewrite.Rules = rewrite.DEFAULT_RULES) -> PastBytesFinder:
    """Rewrite the modules of ``packages`` (names: the package and its
    submodules) and every module found under ``paths`` (directories) when
    they are imported from now on.  Returns the finder."""
    finder = PastBytesFinder(packages, paths, rules)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: PastBytesFinder | None = None) -> None:
    """Remove ``finder`` (by default every pastbytes finder) from
    ``sys.meta_path``.  Modules already imported stay as they are."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not (f is finder or (finder is None and
                                isinstance(f, PastBytesFinder)))]


def load_path(filename: str, module_name: str,
              rules: rewrite.Rules = rewrite.DEFAULT_RULES) -> ModuleType:
    """Import the file ``filename`` as ``module_name`` with the rewrite
    (for hosts that load plugins by path, as Mercurial does)."""
    loader = PastBytesLoader(module_name, filename, rules)
    spec = importlib.util.spec_from_file_location(module_name, filename,
                                                  loader=loader)
    assert spec is not None     # None only when no loader is given
    spec.cached = loader.cache_path()
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
