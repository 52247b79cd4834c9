#!/usr/bin/env python3
"""What the flight recorder costs a trainer (issue 25's goal: <= 1% of step time at the default settings), side by
side with the plain run and with `stepscope record` at its defaults (1 kHz CPU time, everything written).

The trainer is samples/cpu/python_slow_steps.py with no slow step: a fixed amount of numpy work per step (the
iteration count is measured once, plain, and then passed to every run), so the loop's wall time shows the cost.
Modes alternate round by round; the table gives the median loop time, its overhead against plain and the spread
(max-min over median) of each mode. A last flight run ends with an error so the recorder saves its window: its
meta gives the window's memory, per thread and per second.

  bench/flight/flight_cost.py --stepscope build/cli/stepscope [--seconds 120] [--rounds 3] [--python PY]
                              [--only 1,2] [--no-memory]

--side-by-side runs plain and `record --flight 60s` at the same time instead, each pinned to a core of its own
(taskset; one BLAS thread each), then again with the cores swapped, so a machine that drifts moves both alike.
The collector's thread shares its trainer's core, so all its CPU is charged to the trainer: the strictest case,
a host with no idle core. Every 30 s it reads the collector thread's CPU time (/proc, the thread named
"stepscope"), to tell a fixed cost from one that grows with the run.

  bench/flight/flight_cost.py --stepscope build/cli/stepscope --side-by-side --seconds 600 --rounds 1

To take the cost apart, --flight-args adds options to the flight run (e.g. "--cpu-hz 10"), --flight-env sets
variables for it only (e.g. STEPSCOPE_PYTHON_HOOKS=0), and --null runs the plain trainer in the flight slot: an
A/A pair, the noise floor of the method.
"""
import argparse
import os
import re
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "..", "..", "samples", "cpu", "python_slow_steps.py")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^loop_s ([0-9.]+)$", p.stdout, re.M)
    return p, float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stepscope", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=8.0)
    ap.add_argument("--only", default="", help="comma-separated mode numbers to run (1 plain, 2 flight, 3 flight + "
                    "step-func, 4 record); default all")
    ap.add_argument("--no-memory", action="store_true", help="skip the last run that measures the window's memory")
    ap.add_argument("--side-by-side", action="store_true", help="plain and flight at once, on a core each, swapped "
                    "in the next pair")
    ap.add_argument("--flight-args", default="", help="--side-by-side: more options for the flight run")
    ap.add_argument("--flight-env", action="append", default=[], metavar="K=V",
                    help="--side-by-side: a variable for the flight run only (repeatable)")
    ap.add_argument("--null", action="store_true", help="--side-by-side: plain in both slots (the noise floor)")
    a = ap.parse_args()
    steps = int(a.seconds * 1000 / a.step_ms)
    p, _ = run([a.python, TRAINER, "--steps", "50", "--every", "1000000000", "--step-ms", str(a.step_ms)])
    iters = int(re.search(r"^iters (\d+)$", p.stdout, re.M).group(1))
    trainer = [a.python, TRAINER, "--steps", str(steps), "--every", "1000000000", "--iters", str(iters)]
    tmp = tempfile.mkdtemp(prefix="flight-cost-")
    if a.side_by_side:
        return side_by_side(a, trainer, steps, iters, tmp)
    # The step-func hook (a profile function on Python < 3.12, called at every Python and C call) costs the
    # same with or without the flight recorder: its own mode keeps the recorder's cost apart from the hook's.
    modes = {
        "plain": [],
        "record --flight 60s (its defaults)": [a.stepscope, "record", "--flight", "60s", "-o", f"{tmp}/f.db", "--"],
        "  + --step-func train_step": [a.stepscope, "record", "--flight", "60s", "--step-func", "train_step",
                                       "-o", f"{tmp}/g.db", "--"],
        "record (1 kHz CPU, all written)": [a.stepscope, "record", "--step-func", "train_step", "-o", f"{tmp}/r.db",
                                            "--"],
    }
    if a.only:
        keep = {int(x) for x in a.only.split(",")} | {1}
        modes = {m: v for k, (m, v) in enumerate(modes.items(), 1) if k in keep}
    loops = {m: [] for m in modes}
    for r in range(a.rounds):
        for m, prefix in modes.items():
            p, loop = run(prefix + trainer)
            if loop is None:
                sys.exit(f"flight_cost: {m} failed: {p.stderr[-2000:]}")
            loops[m].append(loop)
            print(f"round {r + 1} {m}: loop {loop:.3f} s", file=sys.stderr, flush=True)
    base = statistics.median(loops["plain"])
    print(f"{steps} steps of {iters} matmul iterations (~{a.step_ms} ms each), {a.rounds} alternating rounds, medians")
    print(f"{'mode':36} {'loop s':>9} {'ovh %':>7} {'spread %':>9} {'step ms':>8}   goal")
    for m, v in loops.items():
        med = statistics.median(v)
        spread = 100 * (max(v) - min(v)) / med
        goal = {"plain": "", "record --flight 60s (its defaults)": "<= 1%"}.get(m, "(for comparison)")
        print(f"{m:36} {med:9.3f} {100 * (med / base - 1):7.2f} {spread:9.2f} {1000 * med / steps:8.3f}   {goal}")
    if a.no_memory:
        return
    # The window's memory: a flight run that fails at its last step saves the window at exit.
    out = f"{tmp}/mem.db"
    p = subprocess.run([a.stepscope, "record", "--flight", "60s", "--step-func", "train_step", "-o", out, "--"] + trainer[:-4] +
                       ["--every", "1000000000", "--iters", str(iters), "--crash-at", str(steps - 1)],
                       capture_output=True, text=True)
    saves = [f for f in os.listdir(tmp) if f.startswith("mem-") and f.endswith("-exit.db")]
    if saves:
        db = sqlite3.connect(os.path.join(tmp, saves[0]))
        meta = dict(db.execute("SELECT key, value FROM meta"))
        threads = db.execute("SELECT COUNT(DISTINCT tid) FROM samples").fetchone()[0]
        span = db.execute("SELECT (MAX(time_ns) - MIN(time_ns)) / 1e9 FROM samples").fetchone()[0] or 0
        mem = int(meta.get("flight.window_memory_bytes", "0"))
        per = mem / max(1, threads) / max(1e-9, span)
        print(f"window memory: {mem / 1024:.0f} KiB for {threads} sampled threads over {span:.1f} s "
              f"= {per / 1024:.1f} KiB per thread per second (dictionary of frames and stacks included)")
    else:
        print("window memory: the failing run saved no window:", p.stderr[-500:])


def stat_cpu_s(stat_path):
    """utime + stime of a /proc .../stat file, in seconds (OSError when it is gone)."""
    fields = open(stat_path).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def collector_cpu_s(launcher_pid):
    """CPU seconds of the collector thread ("stepscope") in the recorded trainer under `launcher_pid`, or None."""
    try:
        children = open(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read().split()
    except OSError:
        return None
    for child in children:
        try:
            for tid in os.listdir(f"/proc/{child}/task"):
                if open(f"/proc/{child}/task/{tid}/comm").read().strip() == "stepscope":
                    return stat_cpu_s(f"/proc/{child}/task/{tid}/stat")
        except OSError:
            continue
    return None


def own_cpu_s(pid):
    """CPU seconds of process `pid` itself (all its threads, not its children), or None."""
    try:
        return stat_cpu_s(f"/proc/{pid}/stat")
    except OSError:
        return None


def side_by_side(a, trainer, steps, iters, tmp):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    flight = [a.stepscope, "record", "--flight", "60s"] + shlex.split(a.flight_args) + ["-o", f"{tmp}/f.db", "--"]
    if a.null:
        flight = []
    flight_env = dict(env, **dict(kv.split("=", 1) for kv in a.flight_env))
    pairs = []
    for r in range(a.rounds):
        for plain_cpu, flight_cpu in ((0, 1), (1, 0)):
            p_plain = subprocess.Popen(["taskset", "-c", str(plain_cpu)] + trainer, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            p_flight = subprocess.Popen(["taskset", "-c", str(flight_cpu)] + flight + trainer, env=flight_env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            start, series, last, launcher_cpu = time.monotonic(), [], (0.0, 0.0), None
            while p_flight.poll() is None:
                time.sleep(1)
                if not a.null:
                    launcher_cpu = own_cpu_s(p_flight.pid) or launcher_cpu
                if time.monotonic() - start - last[0] >= 30:
                    cpu = collector_cpu_s(p_flight.pid)
                    if cpu is not None:
                        now = time.monotonic() - start
                        series.append((now, 100 * (cpu - last[1]) / (now - last[0])))
                        last = (now, cpu)
            outs = [p.communicate() for p in (p_plain, p_flight)]
            loops = []
            for (out, err), name in zip(outs, ("plain", "flight")):
                m = re.search(r"^loop_s ([0-9.]+)$", out, re.M)
                if not m:
                    sys.exit(f"flight_cost: {name} failed: {err[-2000:]}")
                loops.append(float(m.group(1)))
            if launcher_cpu is not None:
                print(f"the launcher (`stepscope record`, on the flight trainer's core): {launcher_cpu:.2f} s of CPU",
                      file=sys.stderr, flush=True)
            pairs.append((plain_cpu, flight_cpu, loops[0], loops[1], series))
            print(f"pair {len(pairs)}: plain on cpu {plain_cpu} {loops[0]:.3f} s, flight on cpu {flight_cpu} "
                  f"{loops[1]:.3f} s ({100 * (loops[1] / loops[0] - 1):+.2f}%)", file=sys.stderr, flush=True)
    what = "plain (--null)" if a.null else " ".join(["`record --flight 60s", a.flight_args]).strip() + "`"
    if a.flight_env and not a.null:
        what += " with " + " ".join(a.flight_env)
    print(f"{steps} steps of {iters} matmul iterations (~{a.step_ms} ms each); plain and {what} at the "
          f"same time, each pinned to one core (its collector thread on its trainer's core), cores swapped pair by pair")
    print(f"{'pair':>4} {'plain cpu':>9} {'plain s':>9} {'flight cpu':>10} {'flight s':>9} {'ovh %':>7}   collector "
          f"thread's CPU per 30 s, % of its core")
    for i, (pc, fc, lp, lf, series) in enumerate(pairs, 1):
        cpu = " ".join(f"{v:.2f}" for _, v in series)
        print(f"{i:4} {pc:9} {lp:9.3f} {fc:10} {lf:9.3f} {100 * (lf / lp - 1):7.2f}   {cpu}")
    total_plain, total_flight = sum(p[2] for p in pairs), sum(p[3] for p in pairs)
    print(f"all pairs: {100 * (total_flight / total_plain - 1):+.2f}% (goal <= 1%; each core ran each mode as often)")


if __name__ == "__main__":
    main()
