"""torch.profiler beside `stepscope record` (tests/python/python_hooks_test.cpp): a CPU-only profile, then two with
CUDA activity (forced into their activities: torch drops it where no GPU is). Prints the monotonic times around
each and what the user's own trace holds. (A profile left running at the exit crashes torch 2.15 plain.)"""
import json
import sys
import time

import torch
import torch.autograd.profiler as ap
from torch.autograd import ProfilerActivity

x = torch.randn(64, 64)


def work(n):
    for _ in range(n):
        x @ x


def profile(activities):
    p = ap.profile(use_kineto=True)
    p.kineto_activities = set(activities)  # what torch.profiler.profile(activities=...) gives on a GPU machine
    return p


work(50)
cpu = profile({ProfilerActivity.CPU})
print("cpu_before", time.monotonic_ns())
with cpu:
    work(10)
print("cpu_after", time.monotonic_ns())
gpu = profile({ProfilerActivity.CPU, ProfilerActivity.CUDA})
print("cuda_before", time.monotonic_ns())
with gpu:
    work(20)
print("cuda_after", time.monotonic_ns())
work(50)
gpu.export_chrome_trace(sys.argv[1])
events = json.load(open(sys.argv[1]))["traceEvents"]
print("user_trace_mm", sum(1 for e in events if e.get("name") == "aten::mm"))
again = profile({ProfilerActivity.CPU, ProfilerActivity.CUDA})
print("again_before", time.monotonic_ns())
with again:
    work(10)
print("again_after", time.monotonic_ns())
