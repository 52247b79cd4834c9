"""A plain-Python loop that makes one function call per iteration: the worst case for a hook that runs at every
call (a profile function), and the loop the --step-func/--data-wait-func costs are measured on.

    python3 python_call_loop.py --seconds 10 --log steps.txt --ready ready.txt
    stepscope attach PID --duration 2 --step-func '^__main__\\.step_fn$' --data-wait-func '^__main__\\.next_batch$'

Each step calls next_batch() (a stand-in for a loader) and step_fn(N), which calls one() N times. Every
--every steps the loop appends the time (CLOCK_MONOTONIC ns) and its thread's CPU time (ns) to --log: its own
pace, read by tests/python/python_detach_test.cpp before, during and after a recording. The CPU time is the
pace to compare on a busy machine: time the loop spent waiting for a core is not in it.
"""

import argparse
import os
import sys
import time


def one(x):
    return x + 1


def next_batch():
    return 1


def step_fn(n):
    s = 0
    for _ in range(n):
        s = one(s)
    return s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--calls", type=int, default=2000, help="calls of one() per step")
    p.add_argument("--every", type=int, default=20, help="steps between two lines of --log")
    p.add_argument("--log", default=None)
    p.add_argument("--ready", default=None, help="created after the first second of steps")
    p.add_argument("--until", default=None, help="stop once this file exists (checked at each --log line)")
    a = p.parse_args()
    log = open(a.log, "w", buffering=1) if a.log else None
    at_start = hooks_state()
    start = time.monotonic()
    end = start + a.seconds
    ready_at = start + 1.0
    steps = 0
    while True:
        next_batch()
        step_fn(a.calls)
        steps += 1
        if steps % a.every == 0:
            now = time.monotonic_ns()
            if log:
                log.write(f"{now} {time.thread_time_ns()}\n")
            if a.ready and now / 1e9 >= ready_at:
                open(a.ready, "w").close()
                a.ready = None
            if now / 1e9 >= end or (a.until and os.path.exists(a.until)):
                break
    print(f"steps {steps} seconds {time.monotonic() - start:.3f}")
    left = hooks_state()
    print("hooks left: " + ("none" if left == at_start else f"{left} (at start: {at_start})"))


def hooks_state():
    """What a profiler may have put in this program: step_fn's code file, sys.monitoring tools, a profile
    function, import finders."""
    mon = getattr(sys, "monitoring", None)
    tools = [mon.get_tool(t) for t in range(6)] if mon else []
    finders = [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path]
    return (f"code {os.path.basename(step_fn.__code__.co_filename)}; "
            f"monitoring {','.join(t for t in tools if t) or 'none'}; profile {sys.getprofile()}; "
            f"finders {','.join(finders) or 'none'}")


if __name__ == "__main__":
    main()
