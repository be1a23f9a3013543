"""Reading git config: the one reader of gitbridge's settings and of the
Git settings its commands follow.

``read(REPO, PATTERN)`` runs ``git config -z --get-regexp PATTERN`` once
(``-z``: a value may hold a newline) in the repository, so git itself
applies its files, includes and environment.  Nothing set is an empty
``GitConfig``; git failing (a config file it cannot parse) is an
``Abort`` with git's one line, never taken for "nothing set".  Runs git
through ``spawn.git_bytes``: the ``commit-msg`` hook and
``commitid-lookup`` read settings too, and cannot afford ``subprocess``.
"""

from __future__ import annotations

from vcsperf.core.settings import parse_bool
from vcsperf.core.spawn import git_bytes


class GitConfig:
    """The settings git listed, in its order (the last of a name wins, as
    in git).  Names are as git prints them: section and key in lower
    case, a subsection as written.  A name written without ``=`` has the
    value None: true as a boolean, empty as text, as git reads it."""

    def __init__(self, entries: list[tuple[str, str | None]]) -> None:
        self.entries = entries

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.get_all(name)
        return values[-1] if values else default

    def get_all(self, name: str) -> list[str]:
        return [value or "" for key, value in self.entries if key == name]

    def boolean(self, name: str, default: bool) -> bool:
        """The setting as a boolean, in Mercurial's words
        (``vcsperf.core.settings.parse_bool``); an empty value is false,
        as in git."""
        values = [value for key, value in self.entries if key == name]
        if not values:
            return default
        value = values[-1]
        if value is None:
            return True
        return parse_bool(value, name) if value.strip() else False


def read(repo_path: str, pattern: str) -> GitConfig:
    """The settings whose names match ``pattern`` (git's extended regular
    expression) that git sees in ``repo_path``; ``Abort`` when git
    fails."""
    # exit status 1: nothing matches
    out = git_bytes(repo_path, "config", "-z", "--get-regexp", pattern,
                    ok=(0, 1))
    entries: list[tuple[str, str | None]] = []
    for entry in out.decode("utf-8", "surrogateescape").split("\0"):
        # git ends the name with a newline only when a value follows
        name, newline, value = entry.partition("\n")
        if name:
            entries.append((name, value if newline else None))
    return GitConfig(entries)
