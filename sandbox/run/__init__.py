"""One simulated run: the runner, its replay, the metric writers and the run's figures."""
