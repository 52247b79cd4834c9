"""Claims on what recording costs: the overhead runs (mean step against plain), the trainer's peak RSS, the launch-cost
calibration."""
import re

from .common import TIMED_STEPS, _pct, claim, launches_per_step, not_run, read_text, resolve, step_times

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
