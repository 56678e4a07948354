"""The checks' statistics are compared with their tolerances at a fixed thread count: one intra-op
thread makes every check's numbers independent of the machine's core count."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
