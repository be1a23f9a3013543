"""The layers that the folders show, held true: every import of every module
in our packages, read from its source (ast), against the rules below.

    zstdwire/          the codec                 imports: -
    pastbytes/         the bytes-literal         imports: -
                       importer
    vcsperf/core/      what the adapters share   imports: zstdwire
    hgext/, gitbridge/ the adapters              imports: core, zstdwire,
                                                          pastbytes
    vcsperf/harness/   processes, servers,       imports: core, zstdwire
                       histories, measurements
    vcsperf/bench/     the benchmarks            imports: harness, core,
                                                          zstdwire, pastbytes
    vcsperf/check/     vcsperf check and demo    imports: harness, core,
                                                          zstdwire, pastbytes
    vcsperf/cli.py     the console script        imports: every vcsperf
                                                          layer, zstdwire,
                                                          pastbytes

Each layer may import its own modules too (an adapter only its own: hgext
and gitbridge do not import each other).  pastbytes sits beside zstdwire,
not under the core: nothing the adapters share needs it.  No Mercurial, no
dulwich below the adapters: pastbytes imports the standard library only,
zstdwire the standard library and zstandard, the core the standard
library, zstandard and boto3 (bundlestore's uploads to object storage).
"""

import ast
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Our top-level folders, and the name each is imported as.
PACKAGES = {"zstdwire": "zstdwire", "pastbytes": "pastbytes",
            "vcsperf": "vcsperf", "gitbridge": "gitbridge",
            "hgext": "hgext3rd"}
#: Layer -> the layers it may import (besides itself).
ALLOWED = {
    "zstdwire": set(),
    "pastbytes": set(),
    "core": {"zstdwire"},
    "hgext": {"core", "zstdwire", "pastbytes"},
    "gitbridge": {"core", "zstdwire", "pastbytes"},
    "harness": {"core", "zstdwire"},
    "bench": {"harness", "core", "zstdwire", "pastbytes"},
    "check": {"harness", "core", "zstdwire", "pastbytes"},
    "cli": {"check", "bench", "harness", "core", "zstdwire",
            "pastbytes"},
}
#: Layers that run with the standard library and these packages only.
PLAIN = {"zstdwire": {"zstandard"},
         "pastbytes": set(),
         "core": {"zstandard", "boto3", "botocore"}}


def layer(module):
    """The layer of our module ``module`` (a dotted name), or None when it
    is not ours (``hgext.convert`` is Mercurial's)."""
    parts = module.split(".")
    if parts[0] == "vcsperf":
        if len(parts) > 1 and parts[1] in ("core", "harness", "bench",
                                           "check"):
            return parts[1]
        return "cli"
    return {"zstdwire": "zstdwire", "pastbytes": "pastbytes",
            "gitbridge": "gitbridge", "hgext3rd": "hgext"}.get(parts[0])


def modules(root):
    """``(path, dotted name, is a package)`` of every module of ours under
    ``root``."""
    for folder, name in PACKAGES.items():
        for top, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for file in sorted(files):
                if not file.endswith(".py"):
                    continue
                path = os.path.join(top, file)
                rel = os.path.relpath(path, os.path.join(root, folder))
                parts = [name] + rel[:-3].split(os.sep)
                package = parts[-1] == "__init__"
                if package:
                    parts.pop()
                yield path, ".".join(parts), package


def imported(tree, module, package):
    """``(line, dotted name)`` of every import in ``tree``, at any depth,
    relative ones made absolute; ``from M import N`` names ``M.N``, which
    is M's own module when N is no submodule."""
    here = module if package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield node.lineno, base + "." + alias.name


def violations(root):
    """One line per import that breaks the rules: file, line, import,
    and why."""
    found = []
    known = {name for _, name, _ in modules(root)}
    stdlib = set(sys.stdlib_module_names)
    for path, module, package in modules(root):
        source = layer(module)
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), path)
        for line, name in imported(tree, module, package):
            # ``from M import N`` where N is no module: M itself.
            parent = name.rpartition(".")[0]
            target = parent if name not in known and parent in known \
                else name
            where = "%s:%d: %s" % (os.path.relpath(path, root), line, target)
            dest = layer(target)
            top = target.split(".")[0]
            if dest is None:
                if source in PLAIN and top not in stdlib | PLAIN[source] \
                        and top != "__future__":
                    found.append("%s (%s imports the standard library and "
                                 "%s only)" % (where, source,
                                               ", ".join(PLAIN[source])))
            elif dest != source and dest not in ALLOWED[source]:
                found.append("%s (%s may import %s, not %s)" % (
                    where, source,
                    ", ".join(sorted(ALLOWED[source])) or "nothing of ours",
                    dest))
    return found


def test_every_import_follows_the_layers():
    assert violations(ROOT) == []


def test_the_rules_see_a_planted_bad_import(tmp_path):
    """The checker itself: a tree with one bad import in each direction
    that matters is reported, file and import named."""
    files = {
        "vcsperf/__init__.py": "",
        "vcsperf/core/__init__.py": "",
        "vcsperf/core/rules.py": "import json\nfrom vcsperf.harness "
                                 "import tools\n",
        "vcsperf/core/plain.py": "from mercurial import error\n",
        "vcsperf/harness/__init__.py": "",
        "vcsperf/harness/tools.py": "from ..core import rules\n",
        "gitbridge/__init__.py": "",
        "gitbridge/cli.py": "def f():\n    from vcsperf import harness\n",
        "hgext/ext.py": "from hgext.convert import hg\n"
                        "from hgext3rd import other\nimport zstdwire\n"
                        "from gitbridge import cli\n",
        "hgext/other.py": "from vcsperf.core import rules\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    found = violations(str(tmp_path))
    assert [line.split(" (")[0] for line in found] == [
        "vcsperf/core/plain.py:1: mercurial.error",
        "vcsperf/core/rules.py:2: vcsperf.harness.tools",
        "gitbridge/cli.py:2: vcsperf.harness",
        "hgext/ext.py:4: gitbridge.cli",
    ], found


def test_the_importer_is_a_layer_of_its_own(tmp_path):
    """pastbytes imports nothing of ours and nothing beyond the standard
    library, and the core does not import it; an adapter may."""
    files = {
        "pastbytes/__init__.py": "import tokenize\nfrom . import rewrite\n",
        "pastbytes/rewrite.py": "import zstandard\n"
                                "from vcsperf.core import errors\n",
        "vcsperf/__init__.py": "",
        "vcsperf/core/__init__.py": "",
        "vcsperf/core/errors.py": "import pastbytes\n",
        "hgext/ext.py": "import pastbytes\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = violations(str(tmp_path))
    assert [line.split(" (")[0] for line in found] == [
        "pastbytes/rewrite.py:1: zstandard",
        "pastbytes/rewrite.py:2: vcsperf.core.errors",
        "vcsperf/core/errors.py:1: pastbytes",
    ], found


def readme_rows(text):
    """``(folder, the layers it may import)`` for each folder of ours that
    README's "Where things are" table names."""
    section = text.split("\n## Where things are\n", 1)[1].split("\n## ")[0]
    below_cli = set(ALLOWED["cli"]) - {"zstdwire", "pastbytes"}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        names = set(cells[2].split("(")[0].replace("`", "")
                    .replace("vcsperf.core", "core")
                    .replace("every vcsperf layer", " ".join(below_cli))
                    .replace(",", " ").split()) - {"nothing"}
        for folder in cells[0].replace("`", "").split(","):
            if folder.strip().split("/")[0] in PACKAGES:
                yield folder.strip(), names


def folder_layer(folder):
    """The layer of a folder (or module file) of ours, as README names it."""
    top, _, rest = folder.rstrip("/").partition("/")
    if rest.endswith(".py"):
        rest = rest[:-3]
    return layer(".".join([PACKAGES[top]] + ([rest] if rest else [])))


def test_the_readme_table_states_the_layers():
    """Every layer has its row in README's "Where things are", naming
    folders that exist and what ALLOWED says the layer may import."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        rows = list(readme_rows(fh.read()))
    assert [folder for folder, _ in rows
            if not os.path.exists(os.path.join(ROOT, folder))] == []
    assert {folder_layer(folder): names for folder, names in rows} \
        == ALLOWED
