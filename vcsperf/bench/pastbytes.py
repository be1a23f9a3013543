"""Import benchmark of the bytes-literal importer: plain import of
pre-rewritten source beside Mercurial 5.1's own hook and pastbytes, cold
and warm, on Mercurial 5.1.2's sources, in one run.

    vcsperf bench pastbytes [--repeat 5] [--json out.json]

It also holds the importer's real corpus, which the tests read.

The corpus is Mercurial 5.1.2, the last release that ran its Python-2-style
source on Python 3 through an import hook, downloaded once from the
package registry as an sdist (hash-checked) and cached under
``$VCSPERF_CACHE``.  ``hook_modules`` lists the modules that hook
rewrote, by its own rules.

The benchmark loads every one of those modules through the import system
(finder, then ``loader.get_code``) three ways, on separate copies of the
tree:

- **plain**: Python's own finder and loader on the sources that
  ``contrib/pastbytes_rewrite.py`` wrote (the core baseline);
- **mercurial hook**: Mercurial 5.1's own loader, taken from the sdist,
  on the original sources (the hook ANCHORS.md measured at 4.4x);
- **pastbytes**: our finder and loader on the original sources.

Each is measured cold (no bytecode cached: read, rewrite, compile, write
the pyc) and warm (the pyc is read).  Module bodies are not executed: that
costs the same with and without a hook (Mercurial 5.1's modules do not
run on Python 3.11 anyway), so the ratios here are upper bounds of what a
whole import sees.
"""

import importlib.util
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time

import pastbytes
from vcsperf.bench import benchcli
from vcsperf.harness import history

#: name: (version, sdist file name, sha256)
SDISTS = {
    "mercurial": ("5.1.2", "mercurial-5.1.2.tar.gz",
                  "15af0b090b23649e0e53621a88dde97b55a734d7cb08b77d3df284db"
                  "70d44e2e"),
    "bookcommit": ("1.0", "bookcommit-1.0.tar.gz",
                   "5fe091238ae6b0bb1c0f9492fee0925fe86efa24343a7d1f7b344ecd"
                   "2ff9fe21"),
}

# Mercurial 5.1's hook rewrote these packages, except the exclusions.
HOOK_PACKAGES = ("mercurial", "hgext")
HOOK_EXCLUDED = ("mercurial.cext", "mercurial.thirdparty", "mercurial.zstd",
                 "mercurial.rustext", "hgext.fsmonitor.pywatchman")


def fetch_sdist(name, cache_dir=None):
    """The extracted source tree of one of ``SDISTS``, downloaded with pip
    once (sha256 checked) and kept in the cache."""
    version, filename, sha256 = SDISTS[name]
    cache = os.path.join(cache_dir or history.default_cache_dir(),
                         "pastbytes")
    tree = os.path.join(cache, "%s-%s" % (name, version))

    def build(scratch):
        # Mercurial's setup.py asks for this before it runs on Python 3,
        # and pip runs it to read the metadata.
        env = dict(os.environ, HGPYTHON3="1")
        archive = history.pip_download("%s==%s" % (name, version), filename,
                                       sha256, scratch, "--no-binary",
                                       ":all:", env=env)
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(scratch, filter="data")
            else:
                tar.extractall(scratch)
        return os.path.join(scratch, "%s-%s" % (name, version))
    return history.cached_directory(tree, build)


def hook_modules(root):
    """``[(module name, source path)]`` of the modules under ``root`` that
    Mercurial 5.1's import hook rewrote."""
    modules = []
    for package in HOOK_PACKAGES:
        for dirpath, dirs, files in os.walk(os.path.join(root, package)):
            dirs.sort()
            for filename in sorted(files):
                if not filename.endswith(".py"):
                    continue
                path = os.path.join(dirpath, filename)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                name = ".".join(parts)
                if not any(name == x or name.startswith(x + ".")
                           for x in HOOK_EXCLUDED):
                    modules.append((name, path))
    return modules


def rewrite_tree(root, modules):
    """Rewrite ``modules`` (paths under ``root``) in place, as
    ``contrib/pastbytes_rewrite.py`` does."""
    for _, path in modules:
        with open(path, "rb") as fh:
            text, encoding = pastbytes.decode(fh.read())
        with open(path, "wb") as fh:
            fh.write(pastbytes.transform(text, encoding=encoding)
                     .encode(encoding))


def mercurial_hook_loader(root):
    """Mercurial 5.1's own loader class, from the sdist at ``root``,
    without leaving its finder installed."""
    spec = importlib.util.spec_from_file_location(
        "mercurial51_hook", os.path.join(root, "mercurial", "__init__.py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, root)        # for its hgdemandimport
    before = list(sys.meta_path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(root)
        sys.meta_path[:] = before
    return module.hgloader


def _drop_bytecode(root):
    for dirpath, dirs, _ in os.walk(root):
        if "__pycache__" in dirs:
            shutil.rmtree(os.path.join(dirpath, "__pycache__"))
            dirs.remove("__pycache__")


def _load_all(root, modules, find_spec):
    """Seconds to find and get the code of every module."""
    start = time.perf_counter()
    for name, path in modules:
        spec = find_spec(name, [os.path.dirname(
            os.path.dirname(path) if path.endswith("__init__.py") else path)])
        spec.loader.get_code(name)
    return time.perf_counter() - start


def run(corpus, work, repeat=3):
    """Measure the three ways on copies of ``corpus`` under ``work``;
    returns ``{way: {"cold": s, "warm": s}}`` (best of ``repeat``) and the
    corpus figures."""
    sys.dont_write_bytecode = False
    trees = {}
    for way in ("plain", "mercurial hook", "pastbytes"):
        trees[way] = os.path.join(work, way.replace(" ", "-"))
        shutil.copytree(corpus, trees[way])
    modules = {way: hook_modules(tree) for way, tree in trees.items()}
    rewrite_tree(trees["plain"], modules["plain"])
    hgloader = mercurial_hook_loader(corpus)
    finder = pastbytes.PastBytesFinder(paths=[trees["pastbytes"]])

    # What the import system asks sys.meta_path, as it would without a
    # hook (Mercurial's hook swapped the loader of that spec).
    plain_spec = pastbytes.find_spec_elsewhere

    def hook_spec(name, path):
        spec = plain_spec(name, path)
        spec.loader = hgloader(spec.name, spec.origin)
        return spec

    finders = {"plain": plain_spec, "mercurial hook": hook_spec,
               "pastbytes": finder.find_spec}
    results = {way: {"cold": float("inf"), "warm": float("inf")}
               for way in trees}
    for _ in range(repeat):
        for way, tree in trees.items():
            _drop_bytecode(tree)
            for phase in ("cold", "warm"):
                seconds = _load_all(tree, modules[way], finders[way])
                results[way][phase] = min(results[way][phase], seconds)
    sizes = sum(os.path.getsize(p) for _, p in modules["pastbytes"])
    return results, {"modules": len(modules["pastbytes"]), "bytes": sizes}


def format_report(results, corpus_figures):
    lines = [
        "Mercurial 5.1.2 sources: %d modules the old hook rewrote, %.1f MB"
        % (corpus_figures["modules"], corpus_figures["bytes"] / 1e6),
        "",
        "| import | plain (rewritten source) | mercurial 5.1 hook | ratio "
        "| pastbytes | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for phase in ("cold", "warm"):
        plain = results["plain"][phase]
        hook = results["mercurial hook"][phase]
        ours = results["pastbytes"][phase]
        lines.append("| %s | %.3f s | %.3f s | %.2fx | %.3f s | %.2fx |"
                     % (phase, plain, hook, hook / plain, ours, ours / plain))
    return "\n".join(lines)


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each phase (best is kept)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    corpus = fetch_sdist("mercurial")
    work = tempfile.mkdtemp(prefix="vcsperf-pastbytes-")
    try:
        results, figures = run(corpus, work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(format_report(results, figures))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": results, "corpus": figures}, fh, indent=2)
