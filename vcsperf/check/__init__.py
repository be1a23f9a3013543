"""``vcsperf check`` and ``vcsperf demo``.  ``runner`` runs the check:
the features of ``features``, one row each and one module each named
after it (``dictionaries``, ``wire``, ``bundles``, ``checkouts``,
``commitid``, ``importer``; ``checkcmds`` is the hg extension they call;
``sample`` the slice ``--quick`` works on; ``tree`` the files of a
revision, names as hg stores them; ``outcome`` how a feature fails), on a
copy of the repository (``copying``), within the machine's disk and
cores (``resources``), estimated before (``estimates``), resumable
(``resume``), shown as it runs (``console``) and reported (``report``;
``page``, the HTML page of ``--html`` and ``vcsperf report``).
``demo`` builds the repositories it checks.  Imports the core and the
harness.
"""
