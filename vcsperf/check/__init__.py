"""``vcsperf check``: ``runner`` copies the repository, runs each feature
(one module each: ``store``, ``clones``, ``checkouts``, ``commit_ids``,
``importer``; ``checkcmds`` is the hg extension they call; ``sample`` the
slice ``--quick`` works on; ``tree`` the files of a revision, names as
hg stores them) and reports;
and ``vcsperf demo``.  Imports the core, the harness and the benchmarks'
measurements."""
