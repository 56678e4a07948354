"""Whole-command peak memory of ``sandbox run quickstart`` at two lengths: the main process's peak
RSS, the peak of main RSS + the figure workers' unique memory (USS: a forked worker shares the main
process's pages, so summing RSS counts them twice; that sum is printed too), sampled every 20 ms,
and the growth per step between the two lengths (README, "memory").

    PYTHONPATH=. python benchmarks/whole_command_memory.py 480 1920
"""

import subprocess
import sys
import tempfile
import time

import psutil

res = {}
for steps in map(int, sys.argv[1:]):
    out = tempfile.mkdtemp()
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sandbox.cli import main; main()",
            "run",
            "quickstart",
            "--set",
            f"run.steps={steps}",
            "--out",
            out + "/r",
            "-q",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    proc = psutil.Process(p.pid)
    peak_tree = peak_main = peak_kids = peak_uss = 0
    while p.poll() is None:
        try:
            kids = proc.children(recursive=True)
            main = proc.memory_info().rss
            k = sum(c.memory_info().rss for c in kids if c.is_running())
            u = sum(c.memory_full_info().uss for c in kids if c.is_running()) if kids else 0
        except psutil.Error:
            continue
        peak_main, peak_kids = max(peak_main, main), max(peak_kids, k)
        peak_tree, peak_uss = max(peak_tree, main + k), max(peak_uss, main + u)
        time.sleep(0.02)
    res[steps] = {
        "rc": p.returncode,
        "main_MB": peak_main / 2**20,
        "children_rss_MB": peak_kids / 2**20,
        "tree_MB": peak_tree / 2**20,
        "main_plus_children_uss_MB": peak_uss / 2**20,
    }
    print(steps, res[steps], flush=True)
a, b = sorted(res)
for k in ("main_MB", "tree_MB", "main_plus_children_uss_MB"):
    print(k, "KB/step:", (res[b][k] - res[a][k]) * 1024 / (b - a))
print(
    "at",
    b,
    "steps: tree - main",
    res[b]["tree_MB"] - res[b]["main_MB"],
    "MB; main + children USS - main",
    res[b]["main_plus_children_uss_MB"] - res[b]["main_MB"],
    "MB",
)
