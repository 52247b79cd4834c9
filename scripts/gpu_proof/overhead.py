"""Claims on what recording costs: the overhead runs (mean step against plain), the trainer's peak RSS, the launch-cost
calibration."""
import re
import statistics

from .common import (TIMED_STEPS, _pct, claim, launches_per_step, not_run, read_text, resolve, step_times,
                     windows_of)

MAX_DEFAULT_WINDOW_OVERHEAD = 0.03  # whole run, mean step time over plain
MAX_PEAK_RSS_GROWTH_MB = 100.0
MAX_LAUNCH_COST_ERROR = 0.25
MIN_OVERHEAD_RUN_S = 30.0
TRAINER_STEPS = 600

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


MAX_LEFT_AFTER_CLOSE = 0.01  # what a closed window may leave, at least: the method's own spread counts beside it


def toggled_intervals(wins, windows, trim_ns, first_skip=2):
    """Window lines (end_ns, steps, mean_us) by interval: [closed before window 1, open 1, closed 1, open 2, …], each
    the means of the lines that end more than trim_ns after the interval began and before it ended; the first
    `first_skip` lines of the run are warm-up. A window is (open from, open until[, its start began, its stop
    ended]): the switching commands' own time belongs to neither side."""
    wins = wins[first_skip:]
    bounds, t = [], None
    for w in windows:
        on, off = w[0], w[1]
        start_began, stop_ended = (w[2], w[3]) if len(w) >= 4 else (on, off)
        bounds += [(t, start_began), (on, off)]
        t = stop_ended
    bounds.append((t, None))
    out = []
    for a, b in bounds:
        out.append([m for end, _, m in wins if (a is None or end > a + trim_ns) and (b is None or end <= b)])
    return out


def claim_toggled_overhead(runs):
    from .plan import TOGGLE_TRIM_S
    text = ("what recording costs inside one process: launch_bound under `record --paused`, recording windows at "
            "record's defaults opened (`stepscope start`) and closed (`stepscope stop`) in turn; each window's median "
            "step against the closed intervals beside it, and the closed intervals after a window against the first")
    expected = (f"open ≤ +{100 * MAX_DEFAULT_WINDOW_OVERHEAD:g}% (median over windows); after a close within the "
                f"closed intervals' own spread (at least ±{100 * MAX_LEFT_AFTER_CLOSE:g}%)")
    r = runs.get("runs", {}).get("toggle")
    if not r:
        return not_run("overhead-toggled", text, expected, "no toggle run")
    wins = windows_of(read_text(resolve(runs["_out"], r["log"]))) if r.get("log") else []
    opened = [w for w in r.get("windows", []) if w[2] == 0 and w[3] == 0]
    if r.get("rc") != 0 or len(opened) < 2 or len(opened) != len(r.get("windows", [])):
        return claim("overhead-toggled", text, f"target exit {r.get('rc')}, {len(opened)} of "
                     f"{len(r.get('windows', []))} windows opened and closed", expected, "FAIL")
    parts = toggled_intervals(wins, [(w[0], w[1], *w[4:6]) for w in opened], int(TOGGLE_TRIM_S * 1e9))
    closed = [statistics.median(p) if len(p) >= 3 else None for p in parts[0::2]]
    open_ = [statistics.median(p) if len(p) >= 3 else None for p in parts[1::2]]
    costs = []
    for i, m in enumerate(open_):
        side = [c for c in (closed[i], closed[i + 1]) if c]
        if m and side:
            costs.append(m / statistics.mean(side) - 1)
    # The method's own spread: each closed interval against its neighbours (an A/A of the same process).
    aa = []
    for i in range(1, len(closed) - 1):
        if closed[i] and closed[i - 1] and closed[i + 1]:
            aa.append(abs(closed[i] / statistics.mean([closed[i - 1], closed[i + 1]]) - 1))
    left = [c / closed[0] - 1 for c in closed[1:] if c] if closed[0] else []
    if len(costs) < 2 or not left:
        return claim("overhead-toggled", text, f"too few window lines: {len(costs)} windows measured, closed "
                     f"intervals {[round(c, 1) if c else None for c in closed]}", expected, "FAIL")
    cost, after = statistics.median(costs), statistics.median(left)
    spread = max(aa) if aa else 0.0
    measured = (f"{len(costs)} windows: {100 * cost:+.1f}% (median; each {', '.join(f'{100 * c:+.1f}' for c in costs)}"
                f"%); closed before the first {closed[0]:.1f} µs/step, after a close {100 * after:+.1f}% (median of "
                f"{len(left)}); closed intervals against their neighbours ±{100 * spread:.1f}% at most")
    ok = cost <= MAX_DEFAULT_WINDOW_OVERHEAD and abs(after) <= max(spread, MAX_LEFT_AFTER_CLOSE)
    return claim("overhead-toggled", text, measured, expected, "PASS" if ok else "FAIL", window_costs=costs,
                 closed_us=closed, open_us=open_, left_after=left, aa=aa)
