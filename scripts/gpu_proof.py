#!/usr/bin/env python3
"""The GPU proof's measuring and checking (scripts/gpu-proof.sh calls both; docs/collector.md, "GPU proof").

  gpu_proof.py run   --build DIR --out OUT [--python PY] [--overhead-seconds 30] [--deadline-s 510]
  gpu_proof.py check --out OUT [--stepscope PATH]

`run` needs a GPU: it records the programs the claims are about and writes OUT/runs.json (what ran, exit codes,
times, logs and stores, and the facts of stores it does not keep). `check` needs none: it reads OUT/runs.json,
the logs and stores, and writes OUT/gpu-proof.md (claim | measured | expected | verdict) and OUT/gpu-proof.json.
The suite runs `check` on stepscope 0.1's H100 recordings (../shared/recordings), so the verdict logic is tested
where there is no GPU.

The overhead runs: each workload's plain run stops after --overhead-seconds (launch_bound --ops 30 --duration,
the trainer --duration) and prints its step count; the default window, `--gpu-window all` and CUPTI alone then
run that many steps. torch.profiler's trainer run is bounded: the steps of PROFILER_SECONDS of the plain trainer
(at least PROFILER_MIN_STEPS), under a time limit of its own large enough for its post-processing; the claim
compares its mean step over those steps with plain's mean step and says so.

The attach: launch_bound --ops 30 runs 20 s with a `window:` line every 2000 steps (~0.2 s); stepscope attaches 5 s
after its first window for 6 s. The claim compares the median window after the detach with the median before
the attach (the first two windows and those the attach or detach falls in left out) and states the spread
(IQR / median) of the windows before: PASS within 3%, "inconclusive" (FAIL) when that spread alone exceeds 3%.
A CPU rehearsal (--device cpu) attaches to the trainer instead: no CUDA sample runs there.

The flight recorder (docs/flight.md): launch_bound --ops 30 runs 20 s under `record --flight 30s` (its defaults:
100 Hz wall-clock, `--gpu-window 20/200`, the slow-step trigger) with a `window:` line every 2000 steps; 10 s after
its first window `stepscope dump <record's pid>` (--wait 30, a 45 s limit) saves the window. flight-dump: the
store it printed exists, with meta flight.trigger = dump, kernels and flight.gpu_steps not `none`. flight-overhead:
its windows (the first two and those the dump falls in left out) against plain's — the overhead phase's plain
launch_bound (whose runs print the same windows) where it ran, else a 20 s plain run of this phase: the median
window and the mean step each ≤ +1% (the issue's always-on goal), "inconclusive" (FAIL) when plain's windows spread
(IQR / median) more than 1%. The phase takes ~25 s (~50 s with its own plain run; at most ~115 s by its limits);
when it comes after the overhead phase, that phase leaves it 40 s of the deadline. Its saves stay out of the
threads and launch-rows claims: a save has no `gpu_windows` row for a GPU window still open at the save.

The exits: launch_bound recorded 9 times with `--duration` 0.4-1.2 s, so its exit falls where the collector's
launch-cost calibration (~1 s after CUDA started) may be under way; each must exit 0 as it does plain (the H100
run of 2026-11-27 ended one such run with SIGSEGV). unique-launch-ids: in every store, no two kernels (CUDA-graph
replays aside) share a (pid, correlation id) — CUPTI restarts its ids after each re-attach, and windows 3-6 of
launch_bound once joined window 2's launches.

Exit codes: run 0 done (some runs may have failed: check says which), 2 usage, 3 no GPU;
check 0 every claim PASS, 1 some FAIL or NOT RUN, 2 usage or no runs.json.
"""
import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRAINER = os.path.join(ROOT, "bench", "gpu_overhead", "torch_workloads.py")
DDP = os.path.join(ROOT, "samples", "cpu", "python_ddp_gloo.py")
VARIANTS = os.path.join(ROOT, "samples", "variants.txt")
sys.path.insert(0, os.path.dirname(TRAINER))
from gpu_overhead import gpu_present  # noqa: E402  (the one test of "a GPU is here", as the bench's)

# Goals, each named where a verdict uses it (the numbers).
MAX_API_ROWS_PER_KERNEL = 3.0
MAX_STORE_BYTES_PER_KERNEL = 250.0
MAX_DEFAULT_WINDOW_OVERHEAD = 0.03  # whole run, mean step time over plain
MAX_PEAK_RSS_GROWTH_MB = 100.0
MAX_SAVING_ERROR = 0.25  # |estimated - measured| / measured
MAX_REPLAY_ERROR = 0.15  # |replayed cure step / the cure's measured step - 1| (issue 27)
MAX_LAUNCH_COST_ERROR = 0.25
MAX_DETACH_SLOWDOWN = 0.03  # |median window after the detach / median before - 1|; also the most the windows
#                             before may spread (IQR / median) for the comparison to tell
MIN_ATTACH_WINDOWS = 3  # on each side of the attach
ATTACH_SECONDS = 20  # launch_bound's run in the attach phase
LB_REPORT_EVERY = 2000  # launch_bound steps per window line: ~0.23 s on an H100 (117 µs a step); attach, flight and
#                         the overhead runs (flight-overhead reuses plain's windows)
ATTACH_REPORT_EVERY = LB_REPORT_EVERY
# The flight phase: launch_bound FLIGHT_SECONDS under `record --flight FLIGHT_WINDOW`, `stepscope dump` at
# FLIGHT_DUMP_AFTER_S after its first window line; the run's limit (start, the dump, the end) FLIGHT_SECONDS +
# FLIGHT_RUN_SLACK_S. The overhead phase keeps FLIGHT_RESERVE_S of the deadline for it.
FLIGHT_WINDOW = "30s"
FLIGHT_SECONDS = 20
FLIGHT_DUMP_AFTER_S = 10
FLIGHT_DUMP_WAIT_S = 30  # `dump --wait`: the launcher merges a save 2 s after it appeared, then symbolizes it
FLIGHT_DUMP_TIMEOUT_S = 45
FLIGHT_RUN_SLACK_S = 40
FLIGHT_RESERVE_S = FLIGHT_SECONDS + 20  # the flight run (plain reused from the overhead phase) and its start/end
MAX_FLIGHT_OVERHEAD = 0.01  # median window and mean step over plain's: the goal for always-on; also the
#                             most plain's windows may spread (IQR / median) for the comparison to tell
MIN_FLIGHT_WINDOWS = 5  # of each run, after the warm-up windows and those the dump falls in
MIN_OVERHEAD_RUN_S = 30.0
TRAINER_STEPS = 600
# torch.profiler's trainer run: as many steps as PROFILER_SECONDS of the plain trainer did (at least
# PROFILER_MIN_STEPS, at most all of them). Its post-processing after the timed steps took ~8 ms a step on the
# H200 (146 s for 18,625 steps) and never finished a 30 s run inside the proof's deadline; its own time limit is
# PROFILER_TIMEOUT_BASE_S + PROFILER_TIMEOUT_PER_STEP_S a step (start, the profiled steps, post-processing: 2×).
PROFILER_SECONDS = 5.0
PROFILER_MIN_STEPS = 500
PROFILER_TIMEOUT_BASE_S = 60.0
PROFILER_TIMEOUT_PER_STEP_S = 0.025
# launch_bound's --steps cap under --duration: a step of 20 µs (its fused step on an H100 is ~25 µs).
LB_MIN_STEP_US = 20.0


def launch_bound_cap(seconds):
    """--steps for a `launch_bound --duration seconds` run: a cap it does not reach (its cudaEvents, one per
    100 steps, are made up front)."""
    return min(10000000, max(100000, int(seconds * 1e6 / LB_MIN_STEP_US)))  # 10,000,000: its --steps range


def profiler_steps(plain_steps, plain_seconds):
    """Steps of torch.profiler's bounded trainer run, from the plain run's steps in plain_seconds."""
    return min(plain_steps, max(PROFILER_MIN_STEPS, round(plain_steps * PROFILER_SECONDS / plain_seconds)))


def profiler_timeout(steps):
    return PROFILER_TIMEOUT_BASE_S + PROFILER_TIMEOUT_PER_STEP_S * steps
ITEM_MARK = "# sync: .item()"

# Sample timing lines: `time: LABEL: step median X us, mean Y us, ...` (samples/cuda/sample_common.cuh and the
# Python samples); stepscope 0.1's torch_dataloader printed `time: step median X ms (second half), mean Y ms`.
STEP_US = re.compile(r"^time: [^:\n]*: step median ([0-9.]+) us, mean ([0-9.]+) us", re.M)
STEP_MS = re.compile(r"^time: step median ([0-9.]+) ms \(second half\), mean ([0-9.]+) ms", re.M)


def step_times(text):
    """(median µs, mean µs) of the first timing line, or None."""
    m = STEP_US.search(text)
    if m:
        return float(m.group(1)), float(m.group(2))
    m = STEP_MS.search(text)
    if m:
        return 1e3 * float(m.group(1)), 1e3 * float(m.group(2))
    return None


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_variants(path=VARIANTS):
    """samples/variants.txt as a list of dicts."""
    out = []
    for line in read_text(path).splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sample, args, must, mustnot, cure = (line.split("|") + [""] * 6)[:6]
        out.append({"name": name, "sample": sample, "args": args, "must": must.split(),
                    "mustnot": mustnot.split(), "cure": cure.strip()})
    return out


# ---------------------------------------------------------------------------------------------------- stores

def _count(con, sql):
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0


def _columns(con, table):
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


GPU_TABLES = ("kernels", "api_calls", "syncs", "memcpys", "memsets")


def gpu_trace_bytes(con):
    """Bytes of the GPU trace's tables and their indexes (SQLite's dbstat), or None where dbstat is missing:
    the CPU samples' stack trie is no cost of API tracing."""
    try:
        tables = {n: t for n, t in con.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')")}
        return sum(size for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
                   if tables.get(name) in GPU_TABLES)
    except sqlite3.Error:
        return None


def store_facts(path):
    """What the claims need from one store: counts, thread checks, blocking-call stacks, steps, windows, meta."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        f = {"path": path, "bytes": os.path.getsize(path)}
        f["meta"] = dict(con.execute("SELECT key, value FROM meta"))
        f["kernels"] = _count(con, "SELECT count(*) FROM kernels")
        f["api_rows"] = _count(con, "SELECT count(*) FROM api_calls")
        f["sync_rows"] = _count(con, "SELECT count(*) FROM syncs")
        f["samples"] = _count(con, "SELECT count(*) FROM samples")
        f["gpu_bytes"] = gpu_trace_bytes(con)
        threads = set(con.execute("SELECT pid, tid FROM threads"))
        sampled = set(con.execute("SELECT DISTINCT pid, tid FROM samples"))
        # CUDA rows on their OS thread: the (pid, tid) of every API and sync row is a thread the samples know.
        checked = not_in_threads = unsampled = 0
        examples = []
        for table in ("api_calls", "syncs"):
            for pid, tid, n in con.execute(f"SELECT pid, tid, count(*) FROM {table} GROUP BY pid, tid"):
                checked += n
                bad = False
                if (pid, tid) not in threads:
                    not_in_threads += n
                    bad = True
                elif (pid, tid) not in sampled:
                    unsampled += n
                    bad = True
                if bad and len(examples) < 4:
                    examples.append(f"{table} pid {pid} tid {tid}: {n} rows")
        f["thread_rows_checked"] = checked
        f["thread_rows_not_in_threads"] = not_in_threads
        f["thread_rows_unsampled"] = unsampled
        f["thread_examples"] = examples
        f["steps"] = [list(r) for r in con.execute("SELECT start_ns, end_ns FROM steps ORDER BY start_ns")]
        f["gpu_windows"] = ([list(r) for r in con.execute("SELECT start_ns, end_ns FROM gpu_windows ORDER BY 1")]
                            if "gpu_windows" in {r[0] for r in con.execute(
                                "SELECT name FROM sqlite_master WHERE type='table'")} else [])
        f["kernel_span"] = list(con.execute("SELECT min(start_ns), max(end_ns) FROM kernels").fetchone())
        f["blocking"] = _blocking_stacks(con)
        f["window_launches"] = _window_launches(con, f["gpu_windows"])
        f["shared_launch_ids"] = shared_launch_ids(con)
        return f
    finally:
        con.close()


def shared_launch_ids(con):
    """Kernels (CUDA-graph replays aside) whose (pid, correlation id) another kernel has too."""
    not_graph = " AND graph_id = 0" if "graph_id" in _columns(con, "kernels") else ""
    return _count(con, f"SELECT coalesce(sum(n), 0) FROM (SELECT count(*) AS n FROM kernels WHERE correlation != 0"
                       f"{not_graph} GROUP BY pid, correlation HAVING n > 1)")


def _blocking_stacks(con):
    """API rows with a stack (captured at blocking calls): how many, and their innermost Python file:line."""
    if "stack" not in _columns(con, "api_calls"):
        return {"rows_with_stack": 0, "python_lines": {}, "without_python": 0, "column": False}
    frames = {}
    for fid, kind, file, line in con.execute(
            "SELECT f.id, f.kind, s.value, f.line FROM frames f JOIN strings s ON s.id = f.file"):
        frames[fid] = (kind, file, line)
    parent = dict(con.execute("SELECT id, parent FROM stacks"))
    frame_of = dict(con.execute("SELECT id, frame FROM stacks"))
    innermost_python = {}
    lines, without = {}, 0
    rows = 0
    for stack, n in con.execute("SELECT stack, count(*) FROM api_calls WHERE stack != 0 GROUP BY stack"):
        rows += n
        if stack not in innermost_python:
            found, node, hops = None, stack, 0
            while node and hops < 4096:  # leaf first: the first Python frame met is the innermost
                fr = frames.get(frame_of.get(node))
                if fr and fr[0] == 1:
                    found = f"{os.path.basename(fr[1])}:{fr[2]}"
                    break
                node, hops = parent.get(node, 0), hops + 1
            innermost_python[stack] = found
        where = innermost_python[stack]
        if where:
            lines[where] = lines.get(where, 0) + n
        else:
            without += n
    return {"rows_with_stack": rows, "python_lines": lines, "without_python": without, "column": True}


def _window_launches(con, windows):
    """Per GPU window (the whole run when there are none): [kernels not replayed from a CUDA graph, those of them
    whose launch API row — same process and correlation id, made inside the window — is in the store]."""
    not_graph = " AND k.graph_id = 0" if "graph_id" in _columns(con, "kernels") else ""
    spans = windows or [[None, None]]
    out = []
    for i, (ws, we) in enumerate(spans):
        if ws is None:
            k_where, a_where = "1", "1"
        else:
            nxt = spans[i + 1][0] if i + 1 < len(spans) else None
            k_where = f"k.start_ns >= {int(ws)}" + (f" AND k.start_ns < {int(nxt)}" if nxt is not None else "")
            a_where = f"a.start_ns BETWEEN {int(ws)} AND {int(we)}"
        n, joined = con.execute(
            f"SELECT count(*), coalesce(sum(EXISTS(SELECT 1 FROM api_calls a WHERE a.correlation = k.correlation "
            f"AND a.pid = k.pid AND {a_where})), 0) FROM kernels k WHERE {k_where}{not_graph}").fetchone()
        out.append([n, joined])
    return out


def all_store_facts(runs, out):
    """Facts of every store the runs name: kept stores are read now, deleted ones were read by `run`."""
    facts = {}
    for name, r in iter_runs(runs):
        if r.get("facts"):
            facts[name] = r["facts"]
        elif r.get("store") and os.path.exists(resolve(out, r["store"])):
            facts[name] = store_facts(resolve(out, r["store"]))
        for i, s in enumerate(r.get("stores", [])):
            if os.path.exists(resolve(out, s)):
                facts[f"{name}[{i}]"] = store_facts(resolve(out, s))
    samples_dir = resolve(out, runs.get("samples_dir", "samples"))
    for v in read_variants():
        db = os.path.join(samples_dir, v["name"] + ".db")
        if os.path.exists(db):
            facts[f"samples/{v['name']}"] = store_facts(db)
    return facts


def iter_runs(runs):
    for name, r in runs.get("runs", {}).items():
        yield name, r
    for w, modes in runs.get("overhead", {}).items():
        for m, r in modes.items():
            yield f"overhead/{w}/{m}", r


def resolve(out, p):
    return p if os.path.isabs(p) else os.path.join(out, p)


# ---------------------------------------------------------------------------------------------------- claims

def claim(cid, text, measured, expected, verdict, **details):
    return {"id": cid, "claim": text, "measured": measured, "expected": expected, "verdict": verdict,
            "details": details}


def not_run(cid, text, expected, why):
    return claim(cid, text, f"not run: {why}", expected, "NOT RUN")


def claim_threads(facts):
    text = "CUDA API rows and syncs are on the OS thread that called them"
    expected = "0 rows on a thread unknown to `threads` or never sampled"
    stores = {n: f for n, f in facts.items() if f["thread_rows_checked"]}
    if not stores:
        return not_run("threads", text, expected, "no store with CUDA API or sync rows")
    checked = sum(f["thread_rows_checked"] for f in stores.values())
    absent = sum(f["thread_rows_not_in_threads"] for f in stores.values())
    unsampled = sum(f["thread_rows_unsampled"] for f in stores.values())
    bad = {n: f["thread_examples"] for n, f in stores.items() if f["thread_examples"]}
    measured = (f"{absent + unsampled} of {checked} rows in {len(stores)} stores violate "
                f"({absent} on a tid not in `threads`, {unsampled} on a thread never sampled)")
    return claim("threads", text, measured, expected, "PASS" if absent + unsampled == 0 else "FAIL",
                 violations_by_store=bad)


MIN_LAUNCH_JOIN = 0.99  # kernels whose launch API row is in the store, in every GPU window
MAX_SHARED_LAUNCH_IDS = 0.001  # kernels (graph replays aside) whose (pid, correlation) another kernel has too
EXIT_DURATIONS = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]  # the exits phase's launch_bound --duration


def claim_launch_rows(facts):
    text = "every GPU window keeps the launches' host side (the API row of each kernel's launch)"
    expected = (f"≥ {MIN_LAUNCH_JOIN:.0%} of the kernels (CUDA-graph replays aside) in every window with kernels "
                f"have their launch row")
    windows = [(name, i, n, j) for name, f in sorted(facts.items()) for i, (n, j) in
               enumerate(f.get("window_launches", [])) if n]
    if not windows:
        return not_run("launch-rows", text, expected, "no store with kernels")
    short = [(name, i, n, j) for name, i, n, j in windows if j < MIN_LAUNCH_JOIN * n]
    measured = (f"{len(windows) - len(short)} of {len(windows)} windows with kernels in "
                f"{len({w[0] for w in windows})} stores")
    if short:
        measured += "; short: " + ", ".join(f"{name} window {i}: {j} of {n}" for name, i, n, j in short[:4])
        if len(short) > 4:
            measured += f", … {len(short) - 4} more"
    return claim("launch-rows", text, measured, expected, "FAIL" if short else "PASS",
                 short=[list(w) for w in short])


def claim_unique_launch_ids(facts):
    text = "a launch's correlation id names one kernel in its process (CUPTI restarts its ids at each re-attach)"
    expected = (f"≤ {MAX_SHARED_LAUNCH_IDS:.1%} of the kernels (CUDA-graph replays aside) share their (pid, "
                f"correlation) with another, in every store")
    stores = [(name, f["kernels"], f.get("shared_launch_ids")) for name, f in sorted(facts.items())
              if f.get("kernels") and f.get("shared_launch_ids") is not None]
    if not stores:
        return not_run("unique-launch-ids", text, expected, "no store with kernels")
    bad = [(name, n, d) for name, n, d in stores if d > MAX_SHARED_LAUNCH_IDS * n]
    measured = (f"{sum(d for _, _, d in stores)} of {sum(n for _, n, _ in stores)} kernels in {len(stores)} stores"
                + ("; " + ", ".join(f"{name}: {d} of {n}" for name, n, d in bad[:4]) if bad else ""))
    return claim("unique-launch-ids", text, measured, expected, "FAIL" if bad else "PASS")


def claim_exits(runs):
    text = "recorded programs end as they do plain: launch_bound ending 0.4-1.2 s in, where the calibration runs"
    expected = "every run exits 0 (and every recorded sample as its plain run did)"
    r = runs.get("runs", {}).get("exits")
    if not r or not r.get("runs"):
        return not_run("exits", text, expected, "no exits run")
    rcs = [x.get("rc") for x in r["runs"]]
    bad = [f"{d} s: exit {rc}" for d, rc in zip(r.get("durations", []), rcs) if rc != 0]
    samples_log = read_text(resolve(runs.get("_out", "."), "logs/record-samples.log")) or ""
    crashed = re.findall(r"record-samples: (\S+): plain run exited (\d+), recorded run exited (\d+)", samples_log)
    bad += [f"sample {n}: plain {p}, recorded {q}" for n, p, q in crashed]
    measured = f"{rcs.count(0)} of {len(rcs)} runs exited 0" + ("; " + ", ".join(bad[:6]) if bad else "")
    return claim("exits", text, measured, expected, "FAIL" if bad else "PASS")


def claim_lean(runs, facts):
    text = "lean API tracing on a PyTorch training loop"
    expected = (f"≤ {MAX_API_ROWS_PER_KERNEL:g} API rows per kernel and ≤ {MAX_STORE_BYTES_PER_KERNEL:g} store "
                f"bytes per kernel (`--gpu-window all`); `--cuda-api all` for comparison")
    lean, full = facts.get("trainer_all_lean"), facts.get("trainer_all_api")
    if not lean or not lean["kernels"]:
        return not_run("lean-api", text, expected, "no lean trainer store with kernels")
    rows = lean["api_rows"] / lean["kernels"]
    # The GPU trace's own tables (kernels, API calls, syncs, copies, their indexes); the whole store also holds
    # the CPU samples, stated beside it. Where dbstat is missing the whole store counts.
    gpu = lean.get("gpu_bytes")
    per_kernel = (gpu if gpu is not None else lean["bytes"]) / lean["kernels"]
    measured = (f"{rows:.2f} API rows/kernel, {per_kernel:.0f} B/kernel of GPU trace tables"
                if gpu is not None else f"{rows:.2f} API rows/kernel, {per_kernel:.0f} B/kernel (whole store)")
    measured += f" ({lean['kernels']} kernels; whole store {lean['bytes'] / 1e6:.1f} MB, {lean['bytes'] / lean['kernels']:.0f} B/kernel)"
    if full and full["kernels"]:
        fb = full.get("gpu_bytes")
        measured += (f"; `--cuda-api all`: {full['api_rows'] / full['kernels']:.2f} rows/kernel, "
                     f"{(fb if fb is not None else full['bytes']) / full['kernels']:.0f} B/kernel")
    # Few rows because launches lost theirs is no lean trace (a re-attach once did that: 0 rows per kernel).
    n = sum(w[0] for w in lean.get("window_launches", []))
    joined = sum(w[1] for w in lean.get("window_launches", []))
    if n:
        measured += f"; {joined} of {n} kernels with their launch row"
    ok = (rows <= MAX_API_ROWS_PER_KERNEL and per_kernel <= MAX_STORE_BYTES_PER_KERNEL and
          (n == 0 or joined >= MIN_LAUNCH_JOIN * n))
    return claim("lean-api", text, measured, expected, "PASS" if ok else "FAIL")


def item_line():
    """The line of torch_workloads.py that reads the loss with .item() (marked with ITEM_MARK)."""
    for i, line in enumerate(read_text(TRAINER).splitlines(), 1):
        if ITEM_MARK in line:
            return f"{os.path.basename(TRAINER)}:{i}"
    return None


def claim_blocking_stacks(facts):
    text = "a stack with the Python file:line at each sampled blocking call (`.item()` each step)"
    where = item_line()
    expected = (f"every API row with a stack has a Python file:line (setup copies and the final synchronize have "
                f"their own); the per-step ones at {where}")
    f = facts.get("trainer_recorded")
    if not f:
        return not_run("blocking-stacks", text, expected, "no recorded trainer store")
    b = f["blocking"]
    if not b["column"]:
        return claim("blocking-stacks", text, "the store has no api_calls.stack column (written before stacks "
                     "at blocking calls existed)", expected, "FAIL")
    at_item = b["python_lines"].get(where, 0)
    others = {k: v for k, v in b["python_lines"].items() if k != where}
    measured = (f"{b['rows_with_stack']} API rows with a stack: {at_item} at {where}, "
                f"{sum(others.values())} at other lines, {b['without_python']} without a Python frame")
    ok = b["rows_with_stack"] > 0 and b["without_python"] == 0 and at_item > 0
    return claim("blocking-stacks", text, measured, expected, "PASS" if ok else "FAIL", other_lines=others)


def _pct(a, b):
    return 100.0 * (a / b - 1.0)


TIMED_STEPS = re.compile(r"^steps: timed (\d+)", re.M)


def claim_overhead(runs, workload):
    text = f"overhead on {workload}: whole run (mean step) against plain, each run ≥ {MIN_OVERHEAD_RUN_S:g} s"
    if workload == "trainer":
        text += " (torch.profiler: a bounded run, its post-processing is minutes)"
    expected = f"default window ≤ +{100 * MAX_DEFAULT_WINDOW_OVERHEAD:g}%; the others stated"
    modes = runs.get("overhead", {}).get(workload)
    if not modes or "plain" not in modes:
        return not_run(f"overhead-{workload}", text, expected, "no overhead runs")
    means, walls, steps = {}, {}, {}
    for m, r in modes.items():
        text_ = read_text(resolve(runs["_out"], r["log"])) if r.get("log") else ""
        t = step_times(text_)
        done = TIMED_STEPS.search(text_)
        # torch.profiler stopped in its post-processing: its timed steps were done and printed.
        post = m == "torch.profiler" and r.get("rc") != 0 and t and done
        if (r.get("rc") == 0 or post) and t:
            means[m] = t[1]
            walls[m] = r.get("timed_s") or r.get("wall_s", 0)
            if done:
                steps[m] = int(done.group(1))
    if "plain" not in means:
        return claim(f"overhead-{workload}", text, "the plain run failed (see its log)", expected, "FAIL")
    parts = [f"plain {means['plain']:.1f} µs/step"]
    for m in ("default", "all", "cupti-only", "torch.profiler"):
        if m in means:
            parts.append(f"{m} {_pct(means[m], means['plain']):+.1f}%" +
                         (" (stopped in its post-processing)" if modes[m].get("rc") != 0 else ""))
            if modes[m].get("bounded_steps") and m in steps:  # a shorter run by design: say over what
                parts[-1] += (f" (a bounded run: its mean step over its own {steps[m]} steps against plain's over "
                              f"{steps.get('plain', '?')})")
        elif m in modes:
            parts.append(f"{m} failed (exit {modes[m].get('rc')})")
    short = sorted(m for m, w in walls.items() if w < MIN_OVERHEAD_RUN_S and not modes[m].get("bounded_steps"))
    if short:
        parts.append(f"runs under {MIN_OVERHEAD_RUN_S:g} s: {', '.join(short)}")
    ok = "default" in means and _pct(means["default"], means["plain"]) <= 100 * MAX_DEFAULT_WINDOW_OVERHEAD \
        and not short
    return claim(f"overhead-{workload}", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 mean_step_us=means, wall_s=walls)


def peak_rss_kib(text):
    m = re.search(r"^memory: peak rss (\d+) KiB", text, re.M)
    return int(m.group(1)) if m else None


def claim_memory(runs):
    text = f"the trainer's peak RSS over {TRAINER_STEPS} steps, with and without stepscope"
    expected = f"≤ +{MAX_PEAK_RSS_GROWTH_MB:g} MB"
    r = runs.get("runs", {})
    if "trainer_plain" not in r or "trainer_recorded" not in r:
        return not_run("memory", text, expected, "no trainer runs")
    a = peak_rss_kib(read_text(resolve(runs["_out"], r["trainer_plain"]["log"])))
    b = peak_rss_kib(read_text(resolve(runs["_out"], r["trainer_recorded"]["log"])))
    if a is None or b is None:
        return claim("memory", text, "a run printed no `memory:` line", expected, "FAIL")
    growth = (b - a) / 1024.0
    return claim("memory", text, f"{a / 1024:.0f} MB plain, {b / 1024:.0f} MB recorded: {growth:+.0f} MB", expected,
                 "PASS" if growth <= MAX_PEAK_RSS_GROWTH_MB else "FAIL")


def analysis_of(samples_dir, name, stepscope):
    """The sample's analysis JSON (record-samples.sh writes NAME.json; made here when absent)."""
    path = os.path.join(samples_dir, name + ".json")
    if not os.path.exists(path) and stepscope and os.path.exists(os.path.join(samples_dir, name + ".db")):
        r = subprocess.run([stepscope, "analyze", "--json", os.path.join(samples_dir, name + ".db")],
                           capture_output=True, text=True)
        if r.returncode == 0:
            with open(path, "w") as f:
                f.write(r.stdout)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def saving_per_step(analysis, finding):
    """A finding's saving per step of the run (µs): its share of the summed traced step time × the mean traced
    step. est_savings_us_per_step is the mean over the steps it affects only — one slow step's figure when the
    finding is in one step — while a cure is measured as the difference of whole runs' step medians."""
    steps = analysis.get("steps", [])
    traced = [s["dur_us"] for s in steps if s.get("gpu_traced")] or [s["dur_us"] for s in steps]
    if not traced or "share" not in finding:
        return finding.get("est_savings_us_per_step", 0.0)
    return finding["share"] * sum(traced) / len(traced)


def claims_samples(runs, stepscope):
    """Per variant: findings as samples/variants.txt expects; per problem: the estimate against its cure."""
    samples_dir = resolve(runs["_out"], runs.get("samples_dir", "samples"))
    out = []
    variants = read_variants()
    plain = {v["name"]: step_times(read_text(os.path.join(samples_dir, v["name"] + ".plain.log")))
             for v in variants}
    for v in variants:
        name = v["name"]
        text = f"sample {name}: findings as expected"
        expected = "; ".join(x for x in ("has " + ", ".join(v["must"]) if v["must"] else "",
                                         "not " + ", ".join(v["mustnot"]) if v["mustnot"] else "") if x)
        a = analysis_of(samples_dir, name, stepscope)
        if a is None:
            out.append(not_run(f"sample:{name}", text, expected, "no recording or analysis"))
            continue
        found = {f["rule"]: f for f in a.get("findings", [])}
        missing = [r for r in v["must"] if r not in found]
        unwanted = [r for r in v["mustnot"] if r in found]
        cells = ", ".join(f"{r} {f.get('severity')} {f.get('est_savings_us_per_step', 0):.1f} µs" for r, f in
                          found.items()) or "no findings"
        out.append(claim(f"sample:{name}", text, cells, expected,
                         "FAIL" if missing or unwanted else "PASS", missing=missing, unwanted=unwanted))
        if not v["cure"] or not v["must"]:
            continue
        rule = v["must"][0]
        text = f"sample {name}: the {rule} saving against its cure {v['cure']}"
        expected = f"estimate within {100 * MAX_SAVING_ERROR:g}% of plain {name} − plain {v['cure']} (step medians)"
        p, c = plain.get(name), plain.get(v["cure"])
        if not p or not c or rule not in found:
            out.append(not_run(f"cure:{name}", text, expected,
                               "no timing line in a plain log" if not p or not c else f"no {rule} finding"))
            continue
        measured = p[0] - c[0]
        est = saving_per_step(a, found[rule])
        err = abs(est - measured) / measured if measured > 0 else float("inf")
        out.append(claim(f"cure:{name}", text,
                         f"estimated {est:.1f} µs, measured {measured:.1f} µs ({p[0]:.1f} → {c[0]:.1f}): "
                         f"{100 * (est / measured - 1) if measured > 0 else 0:+.0f}%", expected,
                         "PASS" if err <= MAX_SAVING_ERROR else "FAIL", estimated_us=est, measured_us=measured))
        # The what-if replay (docs/critical-path.md): the recording replayed with the cure, against the cure's step.
        text = f"sample {name}: the what-if step with the {rule} cure against {v['cure']}'s step"
        expected = f"within {100 * MAX_REPLAY_ERROR:g}% of plain {v['cure']} (step median)"
        replayed = found[rule].get("replayed")
        if not replayed:
            out.append(not_run(f"replay:{name}", text, expected, "no what-if replay in the analysis"))
            continue
        pred = replayed["step_us"]
        off = pred / c[0] - 1 if c[0] > 0 else float("inf")
        out.append(claim(f"replay:{name}", text,
                         f"replayed with {replayed['cure']}: {pred:.1f} µs; {v['cure']} measured {c[0]:.1f} µs: "
                         f"{100 * off:+.0f}%", expected, "PASS" if abs(off) <= MAX_REPLAY_ERROR else "FAIL",
                         predicted_us=pred, measured_us=c[0]))
    return out


def launches_per_step(text):
    m = re.search(r"kernels_per_step=(\d+)", text)
    return int(m.group(1)) if m else None


def claim_launch_cost(runs, facts):
    text = ("launch-cost calibration: the per-launch cost stepscope measured against plain vs `--gpu-window all` "
            "(or CUPTI alone)")
    expected = f"within {100 * MAX_LAUNCH_COST_ERROR:g}%"
    modes = runs.get("overhead", {}).get("launch_bound", {})
    f = facts.get("overhead/launch_bound/default") or facts.get("overhead/launch_bound/all")
    if not f:
        return not_run("launch-cost", text, expected, "no recorded launch_bound run")
    cost = f["meta"].get("cupti.launch_cost_ns")
    if cost is None:
        why = f["meta"].get("cupti.calibration", "no cupti.calibration either")
        return claim("launch-cost", text, f"no cupti.launch_cost_ns in the store ({why})", expected, "FAIL")
    out = runs["_out"]
    # Every launch traced: `--gpu-window all`, or where the deadline left that out, CUPTI alone (the same activity
    # kinds for the whole run, without stepscope's own work).
    ref = "all" if "all" in modes else "cupti-only"
    pl, al = (read_text(resolve(out, modes[m]["log"])) if m in modes else "" for m in ("plain", ref))
    tp, ta, n = step_times(pl), step_times(al), launches_per_step(pl)
    if not tp or not ta or not n:
        return claim("launch-cost", text, f"calibrated {float(cost) / 1e3:.2f} µs; no plain/all timing to "
                     "compare with", expected, "FAIL")
    diff_ns = 1e3 * (ta[1] - tp[1]) / n
    err = abs(float(cost) - diff_ns) / diff_ns if diff_ns > 0 else float("inf")
    return claim("launch-cost", text, f"calibrated {float(cost) / 1e3:.2f} µs per launch; plain vs {ref} "
                 f"{diff_ns / 1e3:.2f} µs per launch ({n} launches/step)", expected,
                 "PASS" if err <= MAX_LAUNCH_COST_ERROR else "FAIL")


def windows_of(text):
    """The `window:` lines of launch_bound or the trainer: (end_ns, steps, mean_us)."""
    return [(int(a), int(b), float(c)) for a, b, c in
            re.findall(r"^window: end_ns=(\d+) steps=(\d+) mean_us=([0-9.]+)", text, re.M)]


def relative_iqr(values):
    """(q3 - q1) / median: how much windows of one steady phase spread."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / q2


def claim_attach(runs, facts):
    r = runs.get("runs", {}).get("attach")
    # launch_bound since 2026-11-26 (the trainer's own drift swamped 3%); the trainer in a CPU rehearsal and before
    target = r.get("target", "trainer") if r else "launch_bound"
    text = f"attach to a running CUDA program ({target}), then detach"
    expected = (f"kernels recorded, all inside the attach; median window step time after the detach within "
                f"{100 * MAX_DETACH_SLOWDOWN:g}% of the median before, the windows before spreading (IQR) ≤ "
                f"{100 * MAX_DETACH_SLOWDOWN:g}%")
    f = facts.get("attach")
    if not r:
        return not_run("attach", text, expected, "no attach run")
    if not f:
        return claim("attach", text, f"no store (attach exit {r.get('attach_rc')})", expected, "FAIL")
    t0, t1 = r["attach_start_ns"], r["attach_end_ns"]
    wins = windows_of(read_text(resolve(runs["_out"], r["log"])))
    # The first two windows warm up; a window that the attach or the detach falls in counts on neither side.
    before = [w[2] for w in wins[2:] if w[0] < t0]
    after = [w[2] for w in wins if w[0] - w[1] * w[2] * 1e3 > t1]
    parts = [f"{f['kernels']} kernels"]
    ok = f["kernels"] > 0
    details = {"windows_before": len(before), "windows_after": len(after)}
    if f["kernels"]:
        k0, k1 = f["kernel_span"]
        inside = t0 <= k0 and k1 <= t1
        ok = ok and inside
        parts.append(f"first {(k0 - t0) / 1e6:.0f} ms after attach, {'all inside' if inside else 'NOT all inside'}"
                     " the attach")
    if len(before) >= MIN_ATTACH_WINDOWS and len(after) >= MIN_ATTACH_WINDOWS:
        mb, ma = statistics.median(before), statistics.median(after)
        slow = ma / mb - 1
        spread = relative_iqr(before)
        details.update(median_before_us=mb, median_after_us=ma, slowdown=slow, iqr_before=spread,
                       iqr_after=relative_iqr(after))
        parts.append(f"median window step {mb:.1f} µs before ({len(before)} windows, IQR {100 * spread:.1f}% of "
                     f"the median), {ma:.1f} µs after the detach ({len(after)} windows): {100 * slow:+.1f}%")
        if spread > MAX_DETACH_SLOWDOWN:
            parts.append(f"inconclusive: the windows before spread {100 * spread:.1f}%, more than the "
                         f"{100 * MAX_DETACH_SLOWDOWN:g}% to tell")
            ok = False
        ok = ok and abs(slow) <= MAX_DETACH_SLOWDOWN
    else:
        parts.append(f"too few step windows before ({len(before)}) or after ({len(after)}); "
                     f"{MIN_ATTACH_WINDOWS} needed on each side")
        ok = False
    return claim("attach", text, "; ".join(parts), expected, "PASS" if ok else "FAIL", **details)


def claim_paused(runs, facts):
    text = "`record --paused` + `start`/`stop`: the store holds only the windows' steps"
    expected = "0 steps outside the windows, steps in each window"
    r = runs.get("runs", {}).get("paused")
    f = facts.get("paused")
    if not r:
        return not_run("paused", text, expected, "no paused run")
    if not f:
        return claim("paused", text, f"no store (exit {r.get('rc')})", expected, "FAIL")
    wins = r.get("windows", [])
    slack = 50_000_000  # a step that began just before `start` returned is the window's first
    inside = [0] * len(wins)
    outside = 0
    for s, _ in f["steps"]:
        hit = [i for i, (a, b) in enumerate(wins) if a - slack <= s <= b + slack]
        if hit:
            inside[hit[0]] += 1
        else:
            outside += 1
    ok = outside == 0 and wins and all(inside)
    return claim("paused", text, f"{len(wins)} windows with {inside} steps, {outside} steps outside", expected,
                 "PASS" if ok else "FAIL")


def claim_ranks(runs, facts):
    text = "two ranks on one GPU (torchrun, gloo) with `-o rank-%r.db`"
    expected = "two stores, each with kernels"
    r = runs.get("runs", {}).get("ranks")
    if not r:
        return not_run("ranks", text, expected, "no ranks run")
    kernels = [facts[f"ranks[{i}]"]["kernels"] for i in range(len(r.get("stores", []))) if f"ranks[{i}]" in facts]
    ok = len(kernels) == 2 and all(k > 0 for k in kernels)
    return claim("ranks", text, f"{len(kernels)} stores, kernels {kernels} (exit {r.get('rc')})", expected,
                 "PASS" if ok else "FAIL")


def claim_doctor(runs):
    text = "`stepscope doctor` on the GPU machine: driver, CUPTI, the self-test's kernels and API rows on its thread"
    expected = "exit 0, `doctor: recording works fully`"
    r = runs.get("runs", {}).get("doctor")
    if not r:
        return not_run("doctor", text, expected, "no doctor run")
    lines = [l for l in read_text(resolve(runs["_out"], r["log"])).splitlines() if l.strip()]
    last = lines[-1] if lines else "no output"
    fails = [l.strip() for l in lines if l.lstrip().startswith("FAIL")]
    return claim("doctor", text, f"exit {r.get('rc')}: {last}" + (f" ({'; '.join(fails)})" if fails else ""),
                 expected, "PASS" if r.get("rc") == 0 and last == "doctor: recording works fully" else "FAIL")


def flight_store_facts(runs, out):
    """Facts of the store `stepscope dump` printed in the flight phase: None when there is none, {"error": …} when
    it does not read. Kept apart from the other stores' facts (see the docstring: threads, launch-rows)."""
    p = runs.get("runs", {}).get("flight", {}).get("dump_store")
    if not p or not os.path.exists(resolve(out, p)):
        return None
    try:
        return store_facts(resolve(out, p))
    except sqlite3.Error as e:
        return {"error": str(e)}


def _clip(text, n=60):
    """text, cut after the last ", " before n characters (flight.gpu_steps' ranges)."""
    if len(text) <= n:
        return text
    cut = text.rfind(", ", 0, n)
    return text[:cut] + ", …" if cut > 0 else text[:n] + "…"


def _flight_target(r):
    return r.get("target", "launch_bound") if r else "launch_bound"


def _other_saves(r):
    """The flight run's saves other than the dump's: its own triggers'."""
    dump = os.path.basename(r.get("dump_store") or "")
    return [x for x in r.get("saves", []) if os.path.basename(x) != dump]


def claim_flight_dump(runs, f):
    """f: the dump store's facts (flight_store_facts)."""
    r = runs.get("runs", {}).get("flight")
    text = (f"`stepscope dump PID` during `record --flight {FLIGHT_WINDOW}` ({_flight_target(r)}): the window saved "
            f"on demand")
    expected = "a store printed; its meta flight.trigger = dump, kernels > 0, flight.gpu_steps not `none`"
    if not r:
        return not_run("flight-dump", text, expected, "no flight run")
    if "dump_rc" not in r:
        return claim("flight-dump", text, f"no dump: the run printed no window line (exit {r.get('rc')})", expected,
                     "FAIL")
    if r["dump_rc"] != 0 or not r.get("dump_store"):
        said = [l.strip() for l in read_text(resolve(runs["_out"], r["dump_log"])).splitlines()[1:] if l.strip()]
        return claim("flight-dump", text, f"dump exit {r['dump_rc']} in {r.get('dump_s')} s, no store printed"
                     + (f": {said[-1]}" if said else ""), expected, "FAIL")
    name = os.path.basename(r["dump_store"])
    if not f:
        return claim("flight-dump", text, f"dump printed {r['dump_store']}: no such store", expected, "FAIL")
    if "error" in f:
        return claim("flight-dump", text, f"{name} does not read: {f['error']}", expected, "FAIL")
    trigger = f["meta"].get("flight.trigger", "absent")
    gpu = f["meta"].get("flight.gpu_steps")
    parts = [f"dump exit 0 in {r.get('dump_s')} s: {name}", f"flight.trigger {trigger}",
             f"{f['kernels']} kernels, {len(f['steps'])} steps",
             f"flight.gpu_steps {_clip(gpu) if gpu is not None else 'absent'}"]
    others = _other_saves(r)
    if others:
        parts.append(f"the run's own triggers saved {len(others)} more")
    ok = trigger == "dump" and f["kernels"] > 0 and gpu not in (None, "none")
    return claim("flight-dump", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 gpu_steps=gpu, detail=f["meta"].get("flight.detail"), other_saves=others)


def flight_plain(runs, r):
    """(name, record) of the plain run flight-overhead compares with: `overhead/W/plain` or the phase's own."""
    name = r.get("plain")
    if not name:
        return None, None
    if name.startswith("overhead/"):
        _, w, m = name.split("/", 2)
        return name, runs.get("overhead", {}).get(w, {}).get(m)
    return name, runs.get("runs", {}).get(name)


def _weighted_mean(wins):
    """The mean step over windows: their time over their steps."""
    return sum(n * m for _, n, m in wins) / sum(n for _, n, _ in wins)


def claim_flight_overhead(runs):
    r = runs.get("runs", {}).get("flight")
    goal = 100 * MAX_FLIGHT_OVERHEAD
    text = (f"the flight recorder always on ({_flight_target(r)}): step time under `record --flight {FLIGHT_WINDOW}` "
            f"(default GPU window) against plain")
    expected = (f"median window and mean step ≤ +{goal:g}% over plain's (the first two windows and those the dump "
                f"falls in left out); plain's windows spreading (IQR) ≤ {goal:g}%")
    if not r:
        return not_run("flight-overhead", text, expected, "no flight run")
    pname, p = flight_plain(runs, r)
    if not p:
        return not_run("flight-overhead", text, expected, "no plain run to compare with")
    if r.get("rc") != 0:
        return claim("flight-overhead", text, f"the flight run failed (exit {r.get('rc')})", expected, "FAIL")
    if p.get("rc") != 0:
        return claim("flight-overhead", text, f"the plain run ({pname}) failed (exit {p.get('rc')})", expected, "FAIL")
    out = runs["_out"]
    flight = windows_of(read_text(resolve(out, r["log"])))[2:]
    d0, d1 = r.get("dump_start_ns"), r.get("dump_end_ns")
    kept = flight if d0 is None else [w for w in flight if w[0] < d0 or w[0] - w[1] * w[2] * 1e3 > d1]
    plain = windows_of(read_text(resolve(out, p["log"])))[2:]
    details = {"plain": pname, "windows_plain": len(plain), "windows_flight": len(kept),
               "windows_dump": len(flight) - len(kept)}
    if len(plain) < MIN_FLIGHT_WINDOWS or len(kept) < MIN_FLIGHT_WINDOWS:
        return claim("flight-overhead", text, f"too few step windows: plain {len(plain)}, flight {len(kept)}; "
                     f"{MIN_FLIGHT_WINDOWS} needed in each", expected, "FAIL", **details)
    mp, mf = statistics.median(w[2] for w in plain), statistics.median(w[2] for w in kept)
    ap, af = _weighted_mean(plain), _weighted_mean(kept)
    spread = relative_iqr([w[2] for w in plain])
    details.update(median_plain_us=mp, median_flight_us=mf, mean_plain_us=ap, mean_flight_us=af, iqr_plain=spread,
                   iqr_flight=relative_iqr([w[2] for w in kept]))
    where = "the overhead phase's run" if pname.startswith("overhead/") else "a run of this phase"
    parts = [f"plain {mp:.1f} µs median window ({len(plain)} windows, IQR {100 * spread:.1f}% of the median; {where})",
             f"flight {mf:.1f} µs ({len(kept)} windows" +
             (f", the {details['windows_dump']} the dump falls in left out" if details["windows_dump"] else "") +
             f"): {_pct(mf, mp):+.1f}%",
             f"mean step {ap:.1f} → {af:.1f} µs: {_pct(af, ap):+.1f}%"]
    others = _other_saves(r)
    if others:
        parts.append(f"the run's own triggers saved {len(others)} time{'s' if len(others) != 1 else ''}")
    ok = _pct(mf, mp) <= goal and _pct(af, ap) <= goal
    if spread > MAX_FLIGHT_OVERHEAD:
        parts.append(f"inconclusive: plain's windows spread {100 * spread:.1f}%, more than the {goal:g}% to tell")
        ok = False
    return claim("flight-overhead", text, "; ".join(parts), expected, "PASS" if ok else "FAIL", **details)


# ---------------------------------------------------------------------------------------------------- CUDA graphs

# The graphs phase (issue 49): launch_bound --graph (its step one replay of a captured graph of kernels_per_step
# kernels) plain for GRAPH_PLAIN_SECONDS; recorded whole (`--gpu-window all`, the calibration off: its launches
# would fall in the timed steps) for GRAPH_ALL_STEPS steps with one interval per replay (`--cuda-graphs graph`) and
# with every node's records (nodes, the default); and with the defaults for as many steps as the plain run did.
GRAPH_PLAIN_SECONDS = 10
GRAPH_ALL_STEPS = 20000  # ~1.1 s on an H100 (53.5 µs a step), 620,000 kernel rows: a store that finalizes fast
GRAPH_REPORT_EVERY = 1000
GRAPH_RESERVE_S = 4 * 15 + GRAPH_PLAIN_SECONDS * 2  # four runs' start and end, the two long ones
LB_SOURCE = os.path.join(ROOT, "samples", "cuda", "launch_bound.cu")


def _graph_launch_lines():
    """Lines of launch_bound.cu that launch a kernel (`<<<`): where a captured node's stack should pass."""
    return {i for i, line in enumerate(read_text(LB_SOURCE).splitlines(), 1) if "<<<" in line}


def graph_facts(path):
    """What the graph claims need from a store of launch_bound --graph: each replay's records (kernels, copies and
    memsets of one graph launch: same pid and correlation id, graph_id != 0) and nodes, the graph launches, the
    graphs and nodes the resource callbacks wrote, and for each replayed node the lines of its capture stack."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        f = {"meta": dict(con.execute("SELECT key, value FROM meta"))}
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        has_node = {t: "graph_node_id" in _columns(con, t) for t in ("kernels", "memcpys", "memsets")}
        parts = []
        for t in ("kernels", "memcpys", "memsets"):
            if t == "kernels" or has_node[t]:
                node = "graph_node_id" if has_node[t] else "0"
                parts.append(f"SELECT pid, correlation, graph_id, {node} AS node FROM {t} WHERE graph_id != 0")
        records = " UNION ALL ".join(parts)
        per_replay = {}
        for n, distinct in con.execute(f"SELECT count(*), count(DISTINCT node) FROM ({records}) "
                                       f"GROUP BY pid, correlation"):
            key = f"{n}/{distinct}"
            per_replay[key] = per_replay.get(key, 0) + 1
        f["records_per_replay"] = per_replay  # "records/distinct nodes" -> replays
        f["replays"] = sum(per_replay.values())
        f["replay_graph_ids"] = sorted(r[0] for r in con.execute(f"SELECT DISTINCT graph_id FROM ({records})"))
        nodes = [r[0] for r in con.execute(f"SELECT DISTINCT node FROM ({records})")]
        launches = (f"SELECT DISTINCT a.pid, a.correlation FROM api_calls a JOIN strings s ON s.id = a.name "
                    f"WHERE s.value IN ('cudaGraphLaunch', 'cuGraphLaunch')")
        f["graph_launches"] = _count(con, f"SELECT count(*) FROM ({launches})")
        f["launches_without_records"] = _count(
            con, f"SELECT count(*) FROM ({launches}) l WHERE NOT EXISTS (SELECT 1 FROM ({records}) r "
                 f"WHERE r.pid = l.pid AND r.correlation = l.correlation)")
        if "graphs" not in tables:
            f.update(graphs=[], captured_nodes={}, nodes={})
            return f
        f["graphs"] = [list(r) for r in con.execute("SELECT graph_id, kind, source_graph_id, stack != 0 FROM graphs")]
        f["captured_nodes"] = {str(g): n for g, n in con.execute(
            "SELECT n.graph_id, count(*) FROM graph_nodes n JOIN graphs g ON g.pid = n.pid AND g.graph_id = n.graph_id "
            "WHERE g.kind = 1 GROUP BY n.graph_id")}
        row = {nid: (src, stack) for nid, src, stack in con.execute(
            "SELECT node_id, source_node_id, stack FROM graph_nodes")}
        frames = {fid: (os.path.basename(file), line) for fid, file, line in con.execute(
            "SELECT f.id, s.value, f.line FROM frames f JOIN strings s ON s.id = f.file")}
        parent = dict(con.execute("SELECT id, parent FROM stacks"))
        frame_of = dict(con.execute("SELECT id, frame FROM stacks"))
        out = {}
        for nid in nodes:
            hops, cur = 0, nid
            while cur in row and not row[cur][1] and row[cur][0] and hops < 16:  # a copy: its source holds the stack
                cur, hops = row[cur][0], hops + 1
            if cur not in row:
                out[str(nid)] = {"resolved": False}
                continue
            lines, node, depth = [], row[cur][1], 0
            while node and depth < 4096:  # leaf first
                fr = frames.get(frame_of.get(node))
                if fr and fr[0] and fr[1]:
                    lines.append(f"{fr[0]}:{fr[1]}")
                node, depth = parent.get(node, 0), depth + 1
            out[str(nid)] = {"resolved": True, "hops": hops, "lines": lines}
        f["nodes"] = out
        return f
    finally:
        con.close()


def _graph_run(runs, name):
    return runs.get("runs", {}).get("graphs", {}).get(name)


def claim_graph_nodes(runs):
    text = "CUDA graph replays per node (`launch_bound --graph`, `--gpu-window all`): every node of every traced replay"
    expected = ("meta gpu.graph_records = nodes; every graph launch has its replay; each replay N records on N nodes, "
                "N = the sample's kernels_per_step; the captured graph's N nodes written")
    r = _graph_run(runs, "nodes")
    if not r:
        return not_run("graph-nodes", text, expected, "no graphs run")
    f = r.get("graph_facts")
    n = launches_per_step(read_text(resolve(runs["_out"], r["log"]))) if r.get("log") else None
    if r.get("rc") != 0 or not f or not n:
        return claim("graph-nodes", text, f"the recorded run failed (exit {r.get('rc')})" if r.get("rc") != 0 else
                     "no store facts or no kernels_per_step line", expected, "FAIL")
    mode = f["meta"].get("gpu.graph_records", "absent")
    whole = f["records_per_replay"].get(f"{n}/{n}", 0)
    others = {k: v for k, v in f["records_per_replay"].items() if k != f"{n}/{n}"}
    captured = f.get("captured_nodes", {})
    parts = [f"gpu.graph_records {mode}", f"{whole} of {f['replays']} replays with {n} records on {n} nodes",
             f"{f['graph_launches']} graph launches, {f['launches_without_records']} without records",
             "captured graphs' nodes " + (", ".join(f"graph {g}: {c}" for g, c in sorted(captured.items())) or "none")]
    if others:
        parts.append("other replays (records/nodes: replays) " +
                     ", ".join(f"{k}: {v}" for k, v in sorted(others.items())[:4]))
    ok = (mode == "nodes" and f["replays"] > 0 and not others and f["launches_without_records"] == 0 and
          list(captured.values()) == [n])
    return claim("graph-nodes", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 replay_graph_ids=f.get("replay_graph_ids"), graphs=f.get("graphs"))


def claim_graph_capture_stacks(runs):
    launch_lines = sorted(_graph_launch_lines())
    text = "each replayed kernel points at the line that captured it (its node's source node's stack)"
    expected = (f"every node of the replays resolves to a stack through launch_bound.cu at a kernel launch line "
                f"({', '.join(map(str, launch_lines))})")
    r = _graph_run(runs, "nodes")
    f = r.get("graph_facts") if r else None
    if not f or not f.get("nodes"):
        return not_run("graph-capture-stacks", text, expected, "no replayed nodes recorded" if r else "no graphs run")
    wanted = {f"launch_bound.cu:{x}" for x in launch_lines}
    unresolved = sorted(k for k, v in f["nodes"].items() if not v["resolved"])
    no_stack = sorted(k for k, v in f["nodes"].items() if v["resolved"] and not v["lines"])
    elsewhere = sorted(k for k, v in f["nodes"].items() if v["resolved"] and v["lines"] and
                       not wanted.intersection(v["lines"]))
    at = {}
    for v in f["nodes"].values():
        for line in v.get("lines", []):
            if line in wanted:
                at[line] = at.get(line, 0) + 1
                break
    by_line = sorted(at.items(), key=lambda x: int(x[0].rsplit(":", 1)[1]))
    parts = [f"{len(f['nodes'])} replayed nodes: " + ", ".join(f"{c} at {l}" for l, c in by_line)]
    if unresolved:
        parts.append(f"{len(unresolved)} without a graph_nodes row (e.g. {unresolved[0]})")
    if no_stack:
        parts.append(f"{len(no_stack)} whose source has no stack")
    if elsewhere:
        first = f["nodes"][elsewhere[0]]["lines"][:3]
        parts.append(f"{len(elsewhere)} through no launch line (e.g. node {elsewhere[0]}: {', '.join(first)})")
    ok = not unresolved and not no_stack and not elsewhere
    return claim("graph-capture-stacks", text, "; ".join(parts), expected, "PASS" if ok else "FAIL")


def _median_window(runs, r):
    """Median `window:` step (µs) of a run, its first two windows left out (warm-up), or None."""
    wins = windows_of(read_text(resolve(runs["_out"], r["log"])))[2:] if r and r.get("rc") == 0 else []
    return statistics.median(w[2] for w in wins) if len(wins) >= 3 else None


def claim_graph_node_cost(runs):
    goal = 100 * MAX_DEFAULT_WINDOW_OVERHEAD
    text = ("the cost of per-node records of CUDA graph replays (`launch_bound --graph`): per replay against one "
            "interval per replay, and as % of the step")
    expected = (f"stated: nodes − graph per replay (median windows, `--gpu-window all`); the default window with "
                f"per-node records ≤ +{goal:g}% over plain (median window)")
    names = ("plain", "graph", "nodes", "default")
    rs = {k: _graph_run(runs, k) for k in names}
    if not rs["plain"]:
        return not_run("graph-node-cost", text, expected, "no graphs run")
    med = {k: _median_window(runs, rs[k]) for k in names}
    if med["plain"] is None:
        return claim("graph-node-cost", text, "plain launch_bound --graph printed too few windows", expected, "FAIL")
    parts = [f"plain {med['plain']:.2f} µs/step"]
    for k in ("graph", "nodes", "default"):
        parts.append(f"{k} {med[k]:.2f} µs ({_pct(med[k], med['plain']):+.1f}%)" if med[k] is not None else
                     f"{k} not measured (exit {rs[k].get('rc') if rs[k] else 'not run'})")
    if med["graph"] is not None and med["nodes"] is not None:
        cost = med["nodes"] - med["graph"]
        parts.append(f"per-node records cost {cost:.2f} µs a replay over one interval, "
                     f"{100 * cost / med['plain']:.1f}% of the plain step")
    ok = med["default"] is not None and _pct(med["default"], med["plain"]) <= goal
    return claim("graph-node-cost", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 median_window_us=med)


def check(out, stepscope=None):
    with open(os.path.join(out, "runs.json")) as fh:
        runs = json.load(fh)
    runs["_out"] = out
    facts = all_store_facts(runs, out)
    claims = [claim_threads(facts), claim_launch_rows(facts), claim_unique_launch_ids(facts), claim_exits(runs),
              claim_lean(runs, facts), claim_blocking_stacks(facts),
              claim_overhead(runs, "launch_bound"), claim_overhead(runs, "trainer"), claim_memory(runs)]
    claims += claims_samples(runs, stepscope)
    claims += [claim_launch_cost(runs, facts), claim_attach(runs, facts), claim_paused(runs, facts),
               claim_ranks(runs, facts), claim_doctor(runs), claim_flight_dump(runs, flight_store_facts(runs, out)),
               claim_flight_overhead(runs), claim_graph_nodes(runs), claim_graph_capture_stacks(runs),
               claim_graph_node_cost(runs)]
    machine = runs.get("machine", {})
    result = {"machine": machine, "claims": claims,
              "passed": sum(c["verdict"] == "PASS" for c in claims), "total": len(claims)}
    write_atomically(os.path.join(out, "gpu-proof.json"), json.dumps(result, indent=1) + "\n")
    write_atomically(os.path.join(out, "gpu-proof.md"), markdown(result))
    return result


def markdown(result):
    m = result["machine"]
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"# GPU proof: {result['passed']} of {result['total']} claims PASS", "",
             f"{m.get('gpu', 'GPU unknown')}, driver {m.get('driver', '?')}, {m.get('torch', 'torch ?')}, "
             f"{m.get('stepscope', 'stepscope ?')}, {m.get('date', '')} (run took {m.get('run_s', '?')} s)", "",
             "| claim | measured | expected | verdict |", "|---|---|---|---|"]
    for c in result["claims"]:
        lines.append(f"| {esc(c['claim'])} | {esc(c['measured'])} | {esc(c['expected'])} | {c['verdict']} |")
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------- run

class Runner:
    def __init__(self, a):
        self.a = a
        self.out = a.out
        self.t_start = time.monotonic()
        self.runs = {"runs": {}, "overhead": {}, "samples_dir": "samples"}
        self.reserve_s = 0  # seconds of the deadline the phases after this one need (the overhead phase keeps them)
        self.ss = os.path.join(a.build, "cli", "stepscope")
        for d in ("logs", "stores", "tmp"):
            os.makedirs(os.path.join(self.out, d), exist_ok=True)

    def left(self):
        return self.a.deadline_s - (time.monotonic() - self.t_start)

    def say(self, msg):
        print(f"gpu-proof [{time.monotonic() - self.t_start:5.0f} s] {msg}", flush=True)

    def save(self):
        self.runs["machine"]["run_s"] = round(time.monotonic() - self.t_start)
        write_atomically(os.path.join(self.out, "runs.json"), json.dumps(self.runs, indent=1) + "\n")

    def trainer(self, *extra):
        return [self.a.python, TRAINER, "train", "--device", self.a.device, *extra]

    def record(self, db, *opts):
        """`stepscope record` into db (relative to OUT, as runs.json names it)."""
        return [self.ss, "record", *opts, "-o", resolve(self.out, db), "--"]

    def run(self, name, argv, log, timeout, env=None):
        """Runs argv to completion (output to log); returns its record for runs.json."""
        t0 = time.monotonic_ns()
        with open(os.path.join(self.out, log), "w") as f:
            f.write(" ".join(argv) + "\n")
            f.flush()
            try:
                rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=max(timeout, 1),
                                    env={**os.environ, **(env or {})}).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        t1 = time.monotonic_ns()
        self.say(f"{name}: exit {rc} in {(t1 - t0) / 1e9:.1f} s")
        return {"argv": argv, "rc": rc, "log": log, "wall_s": round((t1 - t0) / 1e9, 2), "t0_ns": t0, "t1_ns": t1,
                "limit_s": round(max(timeout, 1), 1)}

    def phase_trainer(self):
        """Memory, lean API, blocking stacks: the trainer (with .item() each step) plain and recorded. No claim
        here is a time, so the four runs go side by side."""
        steps = ["--steps", str(TRAINER_STEPS), "--item"]
        jobs = {"trainer_plain": ("trainer plain", self.trainer(*steps), None),
                "trainer_recorded": ("trainer recorded", self.record("stores/trainer_recorded.db") +
                                     self.trainer(*steps), "stores/trainer_recorded.db")}
        for name, opts in (("trainer_all_lean", ["--gpu-window", "all"]),
                           ("trainer_all_api", ["--gpu-window", "all", "--cuda-api", "all"])):
            jobs[name] = (name, self.record(f"stores/{name}.db", *opts) + self.trainer(*steps), f"stores/{name}.db")

        def one(name):
            what, argv, store = jobs[name]
            rec = self.run(what, argv, f"logs/{name}.log", 180)
            if store:
                rec["store"] = store
            self.runs["runs"][name] = rec
        side_by_side([lambda n=n: one(n) for n in jobs])

    def phase_samples(self):
        env = {"STEPSCOPE_PYTHON": self.a.python}
        self.runs["runs"]["samples"] = self.run("samples (record-samples.sh)", [
            "bash", os.path.join(HERE, "record-samples.sh"), self.a.build, os.path.join(self.out, "samples")],
            "logs/record-samples.log", min(240, self.left()), env)

    def attach_target(self):
        """(name, argv) of the program the attach phase attaches to: launch_bound, whose host-bound step is steady
        (the trainer's windows of 200 steps wandered 1257–2409 µs alone on the H100, no 3% could show), with a
        window line every ~0.2 s; on a CPU rehearsal, where no CUDA sample runs, the trainer."""
        if self.a.device == "cpu":
            return "trainer", self.trainer("--steps", "100000000", "--duration", str(ATTACH_SECONDS),
                                           "--report-every", "200")
        return "launch_bound", [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30",
                                "--steps", str(launch_bound_cap(ATTACH_SECONDS)), "--duration", str(ATTACH_SECONDS),
                                "--report-every", str(ATTACH_REPORT_EVERY)]

    def phase_attach(self):
        """launch_bound runs plain; stepscope attaches 5 s after its first window for 6 s, detaches; it runs on."""
        target, argv = self.attach_target()
        log = f"logs/attach_{target}.log"
        rec = {"log": log, "store": "stores/attach.db", "target": target, "argv": argv}
        with open(os.path.join(self.out, log), "w") as f:
            try:
                p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
            except OSError as e:
                f.write(f"gpu_proof: cannot run {argv[0]}: {e}\n")
                self.runs["runs"]["attach"] = {**rec, "rc": 127}
                return
        if not self.wait_for_line(os.path.join(self.out, log), "window:", p, 60):
            rec["rc"] = p.wait()
            self.runs["runs"]["attach"] = rec
            return
        time.sleep(5)
        a = self.run("attach", [self.ss, "attach", str(p.pid), "-o", os.path.join(self.out, "stores/attach.db"),
                                "--duration", "6"], "logs/attach.log", 60)
        rec.update(attach_rc=a["rc"], attach_start_ns=a["t0_ns"], attach_end_ns=a["t1_ns"], attach_log=a["log"])
        rec["rc"] = self.wait(p, 60)
        self.runs["runs"]["attach"] = rec

    def phase_exits(self):
        """launch_bound recorded with runs that end 0.4-1.2 s into their steps: the exit falls where the collector's
        calibration (~1 s after CUDA started) may be under way. No claim is a time: the exit codes."""
        if self.a.device == "cpu":
            return
        lb = os.path.join(self.a.build, "samples", "cuda", "launch_bound")
        rec = {"runs": [], "durations": [], "stores": []}
        for i, d in enumerate(EXIT_DURATIONS):
            if self.left() < 15 + self.reserve_s:
                break
            db = f"stores/exit-{i}.db"
            r = self.run(f"exit run {d} s", self.record(db) + [lb, "--ops", "30", "--steps", str(launch_bound_cap(d)),
                                                              "--duration", str(d)], f"logs/exit_{i}.log", 30)
            rec["runs"].append(r)
            rec["durations"].append(d)
            rec["stores"].append(db)
        self.runs["runs"]["exits"] = rec

    def phase_graphs(self):
        """launch_bound --graph plain for GRAPH_PLAIN_SECONDS (its step count sizes the default-window run); recorded
        whole with one interval per replay and with every node's records (GRAPH_ALL_STEPS each: the stores, ~620,000
        kernel rows, are read here and removed), the launch-cost calibration off (its launches would fall among the
        timed steps of these short runs); then recorded with the defaults (the store kept)."""
        if self.a.device == "cpu":  # a rehearsal: no CUDA sample to run
            return
        lb = [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30", "--graph",
              "--report-every", str(GRAPH_REPORT_EVERY)]
        rec = {}
        self.runs["runs"]["graphs"] = rec
        whole = ["--gpu-window", "all"]
        plan = [("plain", lb + ["--steps", str(launch_bound_cap(GRAPH_PLAIN_SECONDS)), "--duration",
                                str(GRAPH_PLAIN_SECONDS)], None),
                ("graph", self.record("tmp/graphs_graph.db", *whole, "--cuda-graphs", "graph") + lb +
                 ["--steps", str(GRAPH_ALL_STEPS)], "tmp/graphs_graph.db"),
                ("nodes", self.record("tmp/graphs_nodes.db", *whole) + lb + ["--steps", str(GRAPH_ALL_STEPS)],
                 "tmp/graphs_nodes.db"),
                ("default", None, "stores/graphs_default.db")]
        for name, argv, db in plan:
            if self.left() - self.reserve_s < 30:
                self.say(f"graphs {name}: skipped, {self.left():.0f} s left")
                continue
            if name == "default":
                done = TIMED_STEPS.search(read_text(os.path.join(self.out, rec.get("plain", {}).get("log", "-"))))
                if not done:
                    self.say("graphs default: skipped, the plain run printed no step count")
                    continue
                argv = self.record(db) + lb + ["--steps", done.group(1)]
            env = {"STEPSCOPE_CALIBRATE": "0"} if name in ("graph", "nodes") else None
            r = self.run(f"graphs {name}", argv, f"logs/graphs_{name}.log", min(120, self.left() - self.reserve_s - 5),
                         env)
            path = os.path.join(self.out, db) if db else None
            if path and os.path.exists(path):
                r["graph_facts"] = graph_facts(path)
                if db.startswith("tmp/"):
                    os.remove(path)
                else:
                    r["store"] = db
            rec[name] = r
            self.save()

    def phase_paused(self):
        log = "logs/paused.log"
        db = "stores/paused.db"
        with open(os.path.join(self.out, log), "w") as f:
            # Beside the other side-by-side runs a step is slower: a window line every 50 steps comes soon enough.
            p = subprocess.Popen(self.record(db, "--paused") + self.trainer("--steps", "100000000", "--duration", "14",
                                                                             "--report-every", "50"),
                                 stdout=f, stderr=subprocess.STDOUT)
        rec = {"log": log, "store": "stores/paused.db", "windows": []}
        if self.wait_for_line(os.path.join(self.out, log), "window:", p, 120):
            for _ in range(2):  # the launcher's pid: start/stop act on the command it runs
                time.sleep(2)
                s = self.run("start", [self.ss, "start", str(p.pid)], "logs/paused_start.log", 20)
                time.sleep(2)
                e = self.run("stop", [self.ss, "stop", str(p.pid)], "logs/paused_stop.log", 20)
                rec["windows"].append([s["t0_ns"], e["t1_ns"]])
        rec["rc"] = self.wait(p, 90)
        self.runs["runs"]["paused"] = rec

    def phase_ranks(self):
        stores = ["stores/rank-0.db", "stores/rank-1.db"]
        r = self.run("ranks", self.record("stores/rank-%r.db") + [
            self.a.python, "-m", "torch.distributed.run", "--nproc_per_node", "2", DDP, "--device", self.a.device,
            "--steps", "300"], "logs/ranks.log", 120)
        r["stores"] = stores
        self.runs["runs"]["ranks"] = r

    def phase_doctor(self):
        self.runs["runs"]["doctor"] = self.run("doctor", [self.ss, "doctor", "--python", self.a.python],
                                               "logs/doctor.log", 120)

    def phase_overhead(self):
        """Each workload plain, recorded (default window, all), CUPTI alone and (trainer) torch.profiler. The plain
        run stops after the overhead seconds (2% over: the claim's ≥ s is mean step × steps, a little under the
        loop's wall time); every other mode runs the plain run's step count, torch.profiler a bounded one."""
        s = self.a.overhead_seconds
        cupti = os.path.join(self.a.build, "bench", "gpu_overhead", "libstepscope_cupti_count.so")
        # launch_bound's window lines: flight-overhead compares its windows with plain's
        lb = [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30", "--report-every",
              str(LB_REPORT_EVERY)]
        workloads = {
            "launch_bound": lb + ["--steps", str(launch_bound_cap(s * 1.02)), "--duration", f"{s * 1.02:g}"],
            "trainer": self.trainer("--steps", "100000000", "--duration", str(s * 1.02), "--item"),
        }
        profiler = None  # the trainer's bounded torch.profiler run, once its plain run said how many steps
        if self.a.device == "cpu":  # a rehearsal: no CUDA sample to run
            del workloads["launch_bound"]
        # The goals first (plain and the default window of both), then launch_bound under CUPTI alone (what the
        # launch-cost claim compares with), the peer (torch.profiler), the trainer under CUPTI alone, and last
        # `--gpu-window all`, whose 30 s store takes the longest to finalize: what the deadline cuts is what is
        # only stated.
        order = [("launch_bound", "plain"), ("launch_bound", "default"), ("trainer", "plain"), ("trainer", "default"),
                 ("launch_bound", "cupti-only"), ("trainer", "torch.profiler"), ("trainer", "cupti-only"),
                 ("launch_bound", "all"), ("trainer", "all")]
        for w, m in order:
            if w not in workloads:
                continue
            cmd = workloads[w]
            res = self.runs["overhead"].setdefault(w, {})
            if self.left() - self.reserve_s < s + 20:
                self.say(f"overhead {w} {m}: skipped, {self.left():.0f} s left" +
                         (f", {self.reserve_s:.0f} s of them for the phases after" if self.reserve_s else ""))
                continue
            if m == "torch.profiler" and profiler is None:
                self.say(f"overhead {w} {m}: skipped, the plain run printed no step count to bound it by")
                continue
            argv, env = {"plain": (cmd, None), "default": (self.record(f"tmp/{w}.db") + cmd, None),
                         "all": (self.record(f"tmp/{w}.db", "--gpu-window", "all") + cmd, None),
                         "cupti-only": (cmd, {"CUDA_INJECTION64_PATH": cupti}),
                         "torch.profiler": ((profiler or []) + ["--profiler"], None)}[m]
            # torch.profiler's post-processing after the timed steps takes minutes on a 30 s run (H200: 146 s for
            # 18,625 steps): it runs a bounded step count, under its own time limit, and if it is stopped anyway
            # its timed steps were printed first (the claim reads them).
            limit = self.left() - self.reserve_s - 5 if m != "torch.profiler" else \
                min(self.left() - self.reserve_s - 5, profiler_timeout(int(argv[argv.index("--steps") + 1])))
            rec = self.run(f"overhead {w} {m}", argv, f"logs/overhead_{w}_{m.replace('.', '_')}.log", limit, env)
            if m == "torch.profiler":
                rec["bounded_steps"] = int(argv[argv.index("--steps") + 1])
            db = os.path.join(self.out, "tmp", f"{w}.db")
            if os.path.exists(db):
                rec["facts"] = store_facts(db)  # 30 s of full tracing is too big to keep
                rec["facts"]["steps"] = []
                os.remove(db)
            text = read_text(os.path.join(self.out, rec["log"]))
            t = step_times(text)
            done = TIMED_STEPS.search(text)
            steps = int(done.group(1)) if done else int(re.search(r"--steps (\d+)", " ".join(argv)).group(1))
            rec["timed_s"] = round(t[1] * steps / 1e6, 1) if t else 0
            res[m] = rec
            self.save()
            if m == "plain" and done:  # the other modes do the plain run's steps
                n = int(done.group(1))
                if w == "launch_bound":
                    workloads[w] = lb + ["--steps", str(n)]
                else:
                    workloads[w] = self.trainer("--steps", str(n), "--item")
                    profiler = self.trainer("--steps", str(profiler_steps(n, s * 1.02)), "--item")

    def flight_target(self):
        """(name, argv) of the program the flight phase records: launch_bound with a window line every ~0.2 s, as the
        attach phase's; on a CPU rehearsal the trainer."""
        if self.a.device == "cpu":
            return "trainer", self.trainer("--steps", "100000000", "--duration", str(FLIGHT_SECONDS),
                                           "--report-every", "200")
        return "launch_bound", [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30",
                                "--steps", str(launch_bound_cap(FLIGHT_SECONDS)), "--duration", str(FLIGHT_SECONDS),
                                "--report-every", str(LB_REPORT_EVERY)]

    def phase_flight(self):
        """launch_bound under `record --flight 30s`; `stepscope dump` of record's pid 10 s after its first window; then
        the plain run flight-overhead compares with: the overhead phase's where it printed windows, else one here."""
        target, argv = self.flight_target()
        if self.left() < FLIGHT_SECONDS + 15:
            self.say(f"flight: skipped, {self.left():.0f} s left")
            return
        log = f"logs/flight_{target}.log"
        cmd = self.record("stores/flight.db", "--flight", FLIGHT_WINDOW) + argv  # saves: stores/flight-<time>-<why>.db
        rec = {"argv": cmd, "log": log, "target": target}
        self.runs["runs"]["flight"] = rec
        started = time.time()
        end = time.monotonic() + FLIGHT_SECONDS + FLIGHT_RUN_SLACK_S
        t0 = time.monotonic_ns()
        with open(os.path.join(self.out, log), "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            try:
                p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
            except OSError as e:
                f.write(f"gpu_proof: cannot run {cmd[0]}: {e}\n")
                rec["rc"] = 127
                return
        if self.wait_for_line(os.path.join(self.out, log), "window:", p, min(60, end - time.monotonic())):
            time.sleep(FLIGHT_DUMP_AFTER_S)
            d = self.run("flight dump", [self.ss, "dump", str(p.pid), "--wait", str(FLIGHT_DUMP_WAIT_S)],
                         "logs/flight_dump.log", min(FLIGHT_DUMP_TIMEOUT_S, end - time.monotonic()))
            rec.update(dump_rc=d["rc"], dump_start_ns=d["t0_ns"], dump_end_ns=d["t1_ns"], dump_s=d["wall_s"],
                       dump_log=d["log"])
            printed = [l.strip() for l in read_text(os.path.join(self.out, d["log"])).splitlines()[1:]
                       if l.strip().endswith(".db")]
            if printed:
                rec["dump_store"] = self.relative(printed[-1])
        rec["rc"] = self.wait(p, max(1, end - time.monotonic()))
        t1 = time.monotonic_ns()
        rec.update(t0_ns=t0, t1_ns=t1, wall_s=round((t1 - t0) / 1e9, 2))
        stores = os.path.join(self.out, "stores")
        rec["saves"] = sorted(f"stores/{n}" for n in os.listdir(stores) if n.startswith("flight-") and n.endswith(".db")
                              and os.path.getmtime(os.path.join(stores, n)) >= started - 1)
        self.say(f"flight: exit {rec['rc']} in {rec['wall_s']:.1f} s; dump exit {rec.get('dump_rc', '-')}, "
                 f"{len(rec['saves'])} saves")
        plain = self.runs["overhead"].get(target, {}).get("plain")
        if plain and plain.get("rc") == 0 and \
                len(windows_of(read_text(os.path.join(self.out, plain["log"])))) >= MIN_FLIGHT_WINDOWS + 2:
            rec["plain"] = f"overhead/{target}/plain"
        elif self.left() < FLIGHT_SECONDS + 10:
            self.say(f"flight plain: skipped, {self.left():.0f} s left")
        else:
            self.runs["runs"]["flight_plain"] = self.run("flight plain", argv, f"logs/flight_plain_{target}.log",
                                                         FLIGHT_SECONDS + 20)
            rec["plain"] = "flight_plain"

    def relative(self, path):
        """path relative to OUT when it is inside OUT (as runs.json names stores), else as it is."""
        rel = os.path.relpath(os.path.abspath(path), self.out)
        return path if rel.startswith("..") else rel

    @staticmethod
    def wait(p, timeout):
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            try:
                return p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                return p.wait()

    @staticmethod
    def wait_for_line(path, prefix, p, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end and p.poll() is None:
            if any(l.startswith(prefix) for l in read_text(path).splitlines()):
                return True
            time.sleep(0.2)
        return False


# What a phase needs of the deadline when it comes after the overhead phase, which otherwise runs until the deadline.
PHASE_RESERVE_S = {"flight": FLIGHT_RESERVE_S}


def reserve_after(phases, i):
    """Seconds of the deadline the phases after phases[i] need (a+b: side by side, both counted)."""
    return sum(PHASE_RESERVE_S.get(x, 0) for later in phases[i + 1:] for x in later.split("+"))


def side_by_side(jobs):
    """Runs the callables on threads of their own and waits for all (runs whose claims are not times)."""
    threads = [threading.Thread(target=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def machine_facts(a):
    def out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    gpu = out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).split("\n")[0]
    name, _, driver = gpu.partition(", ")
    return {"gpu": name or "unknown GPU", "driver": driver or "?",
            "torch": "torch " + out([a.python, "-c", "import torch; print(torch.__version__)"]),
            "stepscope": out([os.path.join(a.build, "cli", "stepscope"), "--version"]),
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--python", default=sys.executable)
    r.add_argument("--overhead-seconds", type=float, default=MIN_OVERHEAD_RUN_S)
    r.add_argument("--deadline-s", type=float, default=510, help="stop starting runs after this (default 510)")
    r.add_argument("--phases", default="doctor+trainer+paused+ranks,samples,attach,exits,graphs,overhead,flight",
                   help="in order; a+b side by side (default: doctor+trainer+paused+ranks,samples,attach,exits,"
                   "graphs,overhead,flight)")
    r.add_argument("--device", default="cuda", help="cpu: a rehearsal of the trainer phases on a machine without a "
                   "GPU (the orchestration only: no GPU claim can pass)")
    c = sub.add_parser("check")
    c.add_argument("--out", required=True)
    c.add_argument("--stepscope", default=None, help="analyzes sample stores that have no NAME.json")
    a = p.parse_args(argv)
    if a.cmd == "check":
        if not os.path.exists(os.path.join(a.out, "runs.json")):
            print(f"gpu_proof: {a.out}/runs.json: no such file (run `gpu_proof.py run` first)", file=sys.stderr)
            return 2
        result = check(a.out, a.stepscope)
        sys.stdout.write(markdown(result))
        return 0 if result["passed"] == result["total"] else 1
    if a.device == "cpu" and a.phases == r.get_default("phases"):
        a.phases = "doctor+trainer+paused+ranks,attach,overhead,flight"
    if a.device != "cpu" and not gpu_present():
        print("gpu_proof: no CUDA GPU on this machine (no /dev/nvidia0, no 'nvidia-smi -L' listing)", file=sys.stderr)
        return 3
    a.build, a.out = os.path.abspath(a.build), os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    runner = Runner(a)
    runner.runs["machine"] = machine_facts(a)
    runner.say(f"{runner.runs['machine']['gpu']}, {runner.runs['machine']['torch']}, "
               f"{runner.runs['machine']['stepscope']}")
    phases = a.phases.split(",")
    for i, phase in enumerate(phases):  # a+b: phases side by side (no time is claimed of them)
        runner.reserve_s = reserve_after(phases, i)
        if runner.left() < 10:
            runner.say(f"{phase}: skipped, out of time")
            continue
        side_by_side([getattr(runner, f"phase_{p}") for p in phase.split("+")])
        runner.save()
    shutil.rmtree(os.path.join(a.out, "tmp"), ignore_errors=True)
    runner.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
