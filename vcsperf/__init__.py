"""vcsperf: the suite's tools (demo, real-repository runner, benchmarks'
shared code) and the logic that Mercurial and Git adapters share."""
