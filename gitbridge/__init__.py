"""gitbridge: the Git side of vcsperf, on dulwich and the git binary."""
