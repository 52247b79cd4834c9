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

--toggle measures within one trainer, where neither drift nor a process's memory layout can differ between the
two modes: the trainer runs under `record --paused` (the collector loaded and dormant), and the bench opens a
flight window with `stepscope attach PID --flight 60s --duration ON` and leaves it closed for OFF seconds, in
turn, for the whole run. Each step's end time comes from the trainer (--step-times); steps within --trim seconds
of a change are left out (the window's first and last seconds: `attach` starting, the window closing). Each
window's cost is its median step against the mean of the closed intervals before and after it. The table gives
every window, their median and mean with a 95% interval, the cost minute by minute, and the CPU the open windows
added outside the training thread (the collector and control threads) and in the `attach` command. --cpu pins
the trainer, its collector and the attach command to one core: the strictest case, a host with no idle core.
--null toggles nothing (a `sleep` in place of `attach`): the method's noise floor. --as-record opens windows at
`record`'s settings instead (attach without --flight: 1 kHz CPU time, everything written).

  bench/flight/flight_cost.py --stepscope build/cli/stepscope --toggle --seconds 600 --cpu 0 [--on 20 --off 10]

To take the cost apart, --flight-args adds options to the flight run (e.g. "--cpu-hz 10"), --flight-env sets
variables for it only (e.g. STEPSCOPE_PYTHON_HOOKS=0), and --null runs the plain trainer in the flight slot: an
A/A pair, the noise floor of the method.
"""
import argparse
import bisect
import os
import re
import resource
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
    ap.add_argument("--stepscope")
    ap.add_argument("--summarize", nargs="+", metavar="OUTPUT", help="the summary of --toggle outputs saved earlier, "
                    "their windows pooled (with --steady); runs nothing")
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
    ap.add_argument("--null", action="store_true", help="--side-by-side: plain in both slots; --toggle: no window "
                    "opened (the noise floor)")
    ap.add_argument("--toggle", action="store_true", help="flight windows opened and closed in turn in one trainer")
    ap.add_argument("--on", type=float, default=20, help="--toggle: seconds each window is open")
    ap.add_argument("--off", type=float, default=10, help="--toggle: seconds between windows")
    ap.add_argument("--trim", type=float, default=2, help="--toggle: seconds left out after each change")
    ap.add_argument("--as-record", action="store_true", help="--toggle: windows at `record`'s settings (attach with no "
                    "--flight: 1 kHz CPU time, everything written), for comparison")
    ap.add_argument("--steady", type=float, default=2.0, help="--toggle: leave out a window whose closed neighbours "
                    "differ by more than this many percent (the host's own pace was moving)")
    ap.add_argument("--cpu", default="", help="--toggle: pin the trainer, its collector and attach to this core")
    a = ap.parse_args()
    if a.summarize:
        return resummarize(a.summarize, a.steady)
    if not a.stepscope:
        ap.error("--stepscope is required")
    steps = int(a.seconds * 1000 / a.step_ms)
    p, _ = run([a.python, TRAINER, "--steps", "50", "--every", "1000000000", "--step-ms", str(a.step_ms)])
    iters = int(re.search(r"^iters (\d+)$", p.stdout, re.M).group(1))
    trainer = [a.python, TRAINER, "--steps", str(steps), "--every", "1000000000", "--iters", str(iters)]
    tmp = tempfile.mkdtemp(prefix="flight-cost-")
    if a.side_by_side:
        return side_by_side(a, trainer, steps, iters, tmp)
    if a.toggle:
        return toggle(a, trainer, steps, iters, tmp)
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
        rows = os.path.join(tmp, "rows.db")  # the save packed (schema 5): its rows, for SQL
        subprocess.run([a.stepscope, "export", os.path.join(tmp, saves[0]), "--format", "sqlite", "-o", rows],
                       check=True, capture_output=True)
        db = sqlite3.connect(rows)
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


def task_cpu_s(pid):
    """(all threads, the main thread) CPU seconds of process `pid`; the first counts threads that have ended."""
    try:
        return stat_cpu_s(f"/proc/{pid}/stat"), stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")
    except OSError:
        return None


def median_step(ends, t0, t1):
    """Median of the steps that began at or after t0 and ended by t1 (ends: sorted step end times), or None."""
    lo = bisect.bisect_left(ends, t0)
    hi = bisect.bisect_right(ends, t1)
    steps = [ends[k] - ends[k - 1] for k in range(lo + 1, hi)]
    return (statistics.median(steps), len(steps)) if len(steps) >= 10 else None


def toggle(a, trainer, steps, iters, tmp):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    pin = ["taskset", "-c", a.cpu] if a.cpu else []
    times_path = f"{tmp}/step-times.txt"
    err_path = f"{tmp}/trainer.err"
    with open(err_path, "w") as err:
        # By time, not by steps: the machine's pace may change after the iteration count was measured.
        p = subprocess.Popen(pin + [a.stepscope, "record", "--paused", "-o", f"{tmp}/paused.db", "--"] + trainer +
                             ["--steps", str(10 * steps), "--until-s", str(a.seconds), "--step-times", times_path], env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    pid = None
    while pid is None and p.poll() is None:
        time.sleep(0.1)
        m = re.search(r"runs paused as process (\d+)", open(err_path).read())
        pid = int(m.group(1)) if m else None
    if pid is None:
        sys.exit(f"flight_cost: the paused trainer did not start: {open(err_path).read()[-2000:]}")
    attach = pin + [a.stepscope, "attach", str(pid)] + ([] if a.as_record else ["--flight", "60s"]) + \
        ["--duration", str(a.on)] + shlex.split(a.flight_args) + ["-o", f"{tmp}/window.db"]
    # Intervals: (open, start, end, (process, main thread) CPU at the start, the same at the end, attach's CPU).
    intervals = []
    start = time.monotonic()
    while p.poll() is None:
        for is_open in (False, True):
            t0, c0 = time.monotonic(), task_cpu_s(pid)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if is_open and not a.null:
                q = subprocess.run(attach, env=env, capture_output=True, text=True)
                if q.returncode != 0 and p.poll() is None:
                    sys.exit(f"flight_cost: {' '.join(attach)} failed: {q.stderr[-2000:]}")
            else:
                while p.poll() is None and time.monotonic() - t0 < (a.on if is_open else a.off):
                    time.sleep(0.05)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t1, c1 = time.monotonic(), task_cpu_s(pid)
            if c0 is None or c1 is None or p.poll() is not None:
                break
            attach_cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            intervals.append((is_open, t0, t1, c0, c1, attach_cpu))
            print(f"{'window' if is_open else 'closed'} {t0 - start:7.1f}-{t1 - start:7.1f} s", file=sys.stderr,
                  flush=True)
    out, _ = p.communicate()
    if p.returncode != 0 or not os.path.exists(times_path):
        sys.exit(f"flight_cost: the trainer failed: {open(err_path).read()[-2000:]}")
    ends = [float(x) for x in open(times_path)]
    # Each window against the closed intervals on either side of it.
    rows = []
    for k in range(1, len(intervals) - 1):
        is_open, t0, t1, c0, c1, attach_cpu = intervals[k]
        if not is_open or intervals[k - 1][0] or intervals[k + 1][0]:
            continue
        # Inside the window whatever `attach` does after it (a record window's part is merged before it returns).
        on = median_step(ends, t0 + a.trim, t0 + a.on - a.trim)
        before = median_step(ends, intervals[k - 1][1] + a.trim, intervals[k - 1][2])
        after = median_step(ends, intervals[k + 1][1] + a.trim, intervals[k + 1][2])
        if not (on and before and after):
            continue
        closed = (before[0] + after[0]) / 2
        other_cpu = 100 * ((c1[0] - c0[0]) - (c1[1] - c0[1])) / (t1 - t0)
        main_cpu = 100 * (c1[1] - c0[1]) / (t1 - t0)
        b0, b1 = intervals[k - 1][3], intervals[k - 1][4]
        other_closed = 100 * ((b1[0] - b0[0]) - (b1[1] - b0[1])) / (intervals[k - 1][2] - intervals[k - 1][1])
        rows.append((t0 - start, 1000 * before[0], 1000 * on[0], 1000 * after[0], 100 * (on[0] / closed - 1), other_cpu, other_closed,
                     100 * attach_cpu / (t1 - t0), main_cpu))
    what = "nothing (--null: the noise floor)" if a.null else \
        " ".join(["`attach" + ("" if a.as_record else " --flight 60s"), a.flight_args]).strip() + "`"
    print(f"{len(ends) - 1} steps of {iters} matmul iterations (~{a.step_ms} ms each) under `record --paused`"
          f"{', all on cpu ' + a.cpu if a.cpu else ''}; {what} open {a.on:g} s, closed {a.off:g} s, in turn; "
          f"{a.trim:g} s after each change left out")
    print(f"{'at s':>7} {'closed ms':>9} {'open ms':>8} {'closed ms':>9} {'cost %':>7} {'coll. %':>8} "
          f"{'(closed)':>8} {'attach %':>8} {'main %':>7}")
    steady = [r for r in rows if abs(r[3] / r[1] - 1) * 100 <= a.steady]
    for r in rows:
        print(f"{r[0]:7.1f} {r[1]:9.3f} {r[2]:8.3f} {r[3]:9.3f} {r[4]:7.2f} {r[5]:8.2f} {r[6]:8.2f} {r[7]:8.2f} "
              f"{r[8]:7.1f}{'' if r in steady else '   unsteady: left out'}")
    summarize(rows, steady, a.steady)


def summarize(rows, steady, limit):
    """The summary lines of --toggle: `steady` are the rows whose closed neighbours agree within `limit` %."""
    print(f"{len(rows) - len(steady)} of {len(rows)} windows left out: their closed neighbours differ by more than "
          f"{limit:g}% (the host's pace moved)")
    all_costs = [r[4] for r in rows]
    rows = steady
    if len(rows) < 2:
        sys.exit("flight_cost: too few steady windows to compare; run longer")
    costs = [r[4] for r in rows]
    mean, sd = statistics.mean(costs), statistics.stdev(costs)
    half = 1.96 * sd / len(costs) ** 0.5
    print(f"all {len(all_costs)} windows: median {statistics.median(all_costs):+.2f}%, mean "
          f"{statistics.mean(all_costs):+.2f}%")
    print(f"{len(rows)} steady windows: cost median {statistics.median(costs):+.2f}%, mean {mean:+.2f}% "
          f"(95% interval {mean - half:+.2f}% to {mean + half:+.2f}%), goal <= 1%")
    by_minute = {}
    for r in rows:
        by_minute.setdefault(int(r[0] // 60), []).append(r[4])
    print("by minute of the run (mean cost %): " +
          " ".join(f"{m}:{statistics.mean(v):+.2f}" for m, v in sorted(by_minute.items())))
    print(f"CPU outside the training thread, % of a core: {statistics.mean(r[5] for r in rows):.2f} with a window "
          f"open, {statistics.mean(r[6] for r in rows):.2f} closed; the attach command "
          f"{statistics.mean(r[7] for r in rows):.2f}")


def resummarize(paths, limit):
    """Pools the window rows of saved --toggle outputs and prints their summary."""
    rows = []
    for path in paths:
        for line in open(path):
            f = line.split()
            if len(f) >= 9 and re.fullmatch(r"-?[0-9]+\.[0-9]", f[0]) and re.fullmatch(r"-?[0-9.]+", f[4]):
                rows.append((float(f[0]),) + tuple(float(x) for x in f[1:9]))
    # The cost from the rounded step times, so that a row's own cost column is not trusted blindly.
    rows = [(r[0], r[1], r[2], r[3], 100 * (r[2] / ((r[1] + r[3]) / 2) - 1)) + r[5:] for r in rows]
    print(f"{len(paths)} outputs pooled: {', '.join(os.path.basename(p) for p in paths)}")
    summarize(rows, [r for r in rows if abs(r[3] / r[1] - 1) * 100 <= limit], limit)


if __name__ == "__main__":
    main()
