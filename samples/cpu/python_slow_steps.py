"""A trainer whose every Nth step is slow, for the flight recorder (docs/flight.md): each step does about
--step-ms of numpy work in `train_step`; every --every-th step also calls `save_checkpoint`, which sleeps
--slow-ms (a stand-in for a checkpoint write, a stalled read, a straggler).

    stepscope record --flight 10s --step-func train_step -- python3 python_slow_steps.py --steps 650

Steps are numbered from 0; step i is slow when (i + 1) % every == 0, so with the defaults steps 199, 399, 599.
Output (stdout): one `slow K` line per slow step, then `steps N`, `loop_s T` (the training loop's wall time) and
`checksum C` (deterministic for a given --iters).
Options: --crash-at K ends the program with an uncaught exception (exit status 1) after step K; --abort-at K
with SIGABRT; --crash-when FILE like --crash-at, after the first step that finds FILE (a test's cue).
"""
import argparse
import os
import time

import numpy as np


def save_checkpoint(slow_s):
    time.sleep(slow_s)


# Gain of the step's layer: with 0.1 the values shrank by ~0.8 an iteration and became float32 denormals after
# ~390 iterations, each then ~17x slower (108 us against 6.3): a step of 500 iterations ran 20x its --step-ms,
# and whether the calibration crossed 390 decided if the whole run took 1 s or 23 s. At 0.25 they hold at ~0.66.
W_SCALE = 0.25
_ITERS = {}
FIXED_ITERS = 0  # --iters: the same work in every run (a benchmark compares runs)


def work_iters(step_s):
    """Iterations of the step's matmul that take about step_s on this machine (measured once, unprofiled pace)."""
    if FIXED_ITERS > 0:
        return FIXED_ITERS
    if step_s not in _ITERS:
        rng = np.random.default_rng(1)
        w = rng.standard_normal((64, 64)).astype(np.float32) * W_SCALE
        y = rng.standard_normal((32, 64)).astype(np.float32)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.2:
            y = np.tanh(y @ w)
            n += 1
        _ITERS[step_s] = max(1, int(n * step_s / 0.2))
    return _ITERS[step_s]


def train_step(i, w, x, step_s, every, slow_s):
    # A fixed amount of numpy work (about step_s when nothing else runs): the loop's time shows what a profiler costs.
    y = x
    for _ in range(work_iters(step_s)):
        y = np.tanh(y @ w)
    if (i + 1) % every == 0:
        save_checkpoint(slow_s)
        print(f"slow {i}", flush=True)
    return float(y[0, 0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=650)
    ap.add_argument("--every", type=int, default=200)
    ap.add_argument("--step-ms", type=float, default=8.0)
    ap.add_argument("--slow-ms", type=float, default=500.0)
    ap.add_argument("--crash-at", type=int, default=-1)
    ap.add_argument("--abort-at", type=int, default=-1)
    ap.add_argument("--crash-when", default="", help="fail like --crash-at after the first step that sees this file")
    ap.add_argument("--iters", type=int, default=0, help="matmul iterations per step (0: about --step-ms)")
    ap.add_argument("--until-s", type=float, default=0, help="end after the step that reaches this many seconds of "
                    "the loop, if that comes before --steps")
    ap.add_argument("--step-times", default="", help="write each step's end (time.monotonic(), s) to this file at "
                    "the end, a line each (bench/flight/flight_cost.py --toggle)")
    a = ap.parse_args()
    global FIXED_ITERS
    FIXED_ITERS = a.iters
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32) * W_SCALE
    x = rng.standard_normal((32, 64)).astype(np.float32)
    checksum = 0.0
    t0 = time.perf_counter()
    ends = [time.monotonic()] if a.step_times else None
    for i in range(a.steps):
        checksum += train_step(i, w, x, a.step_ms / 1000, a.every, a.slow_ms / 1000)
        if ends is not None:
            ends.append(time.monotonic())
        if a.until_s > 0 and time.perf_counter() - t0 >= a.until_s:
            break
        if i == a.crash_at or (a.crash_when and os.path.exists(a.crash_when)):
            raise RuntimeError(f"the trainer failed after step {i}")
        if i == a.abort_at:
            os.abort()
    loop_s = time.perf_counter() - t0
    if ends is not None:
        with open(a.step_times + ".tmp", "w") as f:
            f.write("".join(f"{t:.6f}\n" for t in ends))
        os.replace(a.step_times + ".tmp", a.step_times)
    print(f"steps {i + 1 if a.steps else 0}", flush=True)
    print(f"iters {work_iters(a.step_ms / 1000)}", flush=True)
    print(f"loop_s {loop_s:.4f}", flush=True)
    print(f"checksum {round(checksum, 3)}", flush=True)


if __name__ == "__main__":
    main()
