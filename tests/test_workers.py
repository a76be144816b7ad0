"""make test's processes (pytest-xdist, tests/conftest.py): each starts every test at its share of
the CPUs, and OpenMP was loaded after its wait policy was set, in this process and in the
subprocesses tests start."""

import os
import subprocess
import sys

import torch

import conftest


def test_each_test_starts_at_this_process_share_of_the_cpus():
    cpus = len(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    assert conftest.CPU_SHARE == max(1, cpus // workers)
    if "PYTEST_XDIST_WORKER" in os.environ:  # one process alone: torch's own default stands
        assert torch.get_num_threads() == conftest.CPU_SHARE
    torch.set_num_threads(cpus + 1)  # left changed for the next test, which the fixture resets


def test_the_next_test_is_reset():
    if "PYTEST_XDIST_WORKER" in os.environ:
        assert torch.get_num_threads() == conftest.CPU_SHARE


def test_openmp_loads_after_its_wait_policy():
    assert not conftest.OPENMP_LOADED_FIRST, "torch was imported before tests/conftest.py"
    if "PYTEST_XDIST_WORKER" in os.environ:
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['OMP_WAIT_POLICY'])"],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert child.stdout.strip() == "PASSIVE"
