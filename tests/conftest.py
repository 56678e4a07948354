"""Settings shared by every test folder.

Parallel workers (``pytest -n 2``, pytest-xdist; README "Tests"): each worker process gets an equal share
of the machine's cores as torch intra-op threads (one each on 2 cores), and so do the processes it starts
(``OMP_NUM_THREADS``), so that two workers do not oversubscribe the CPU. A run's numbers do not depend on the
share: runs set their own count (``run.threads``, by default one for the toy tasks; ``task.threads``, by default
one for the LM and Gymnasium tasks), the checks run on one thread (``tests/checks/conftest.py``), and the
bitwise golden tests pass under ``-n 2`` as in one process.

Plugins are off (``SANDBOX_PLUGINS=0``, set before anything imports the sandbox): a component package
installed in the same environment must not change what the project's tests see. A test that exercises
plugins opts in (``tests/components/plugin_site.py`` removes the switch from its subprocesses'
environment; an in-process test deletes it with ``monkeypatch.delenv``).

Ctrl-C reaches the tests as it reaches a terminal's foreground job: a suite started in the background by a shell
without job control (``.ci/run &`` in a script) inherits SIGINT ignored (POSIX), and so would every ``sandbox``
process it starts; the tests that interrupt a command with SIGINT need Python's own handler, so it is put back
(only when the signal was ignored: a handler someone installed is left alone)."""

from __future__ import annotations

import os
import signal

import pytest

os.environ["SANDBOX_PLUGINS"] = "0"
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    import torch

    share = max(1, (os.cpu_count() or 1) // max(1, int(workers)))
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch.set_num_threads(share)


@pytest.fixture(scope="session")
def wheel():
    """``wheel("verl")`` -> directory of the unzipped pinned wheel (tests/export_cases.py). Defined here, not in a
    conftest.py beside the per-framework tests: that would put tests/frameworks/ on sys.path, where the folder
    tests/frameworks/verl/ shadows the verl package imported from the wheel."""
    from export_cases import wheel_getter

    return wheel_getter()
