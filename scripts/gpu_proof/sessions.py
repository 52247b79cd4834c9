"""Claims on stepscope's ways of running a program: exits as plain, attach/detach, `record --paused` with start/stop,
ranks, `stepscope doctor`."""
import os
import re
import statistics

from .common import claim, not_run, read_text, relative_iqr, resolve, store_rows, windows_of

MAX_DETACH_SLOWDOWN = 0.03  # |median window after the detach / median before - 1|; also the most the windows
#                             before may spread (IQR / median) for the comparison to tell
MIN_ATTACH_WINDOWS = 3  # on each side of the attach
EXIT_DURATIONS = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]  # the exits phase's launch_bound --duration


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


PROFILE_SPAN = re.compile(r"^profile-span: enter_ns=(\d+) started_ns=(\d+) stop_ns=(\d+) stopped_ns=(\d+) steps=(\d+) "
                          r"from=(\d+)", re.M)
PROFILE_TRACE = re.compile(r"^profile-trace: (\d+) kernels (\d+) step events (\d+) events", re.M)
STEPS_LINE = re.compile(r"^steps: timed (\d+) total (\d+)", re.M)
LENT_LINE = "GPU tracing pauses while it runs"
NEIGHBOUR_RATE_TOLERANCE = 0.2  # stepscope's kernels a step after the span against before it, and the user's trace's
#                                 against ours before it: within 20% (every step of the trainer launches the same)


def _kernels_around(path, started, stop, run):
    """A store's kernels that start before `started`, inside [started, stop), after it up to the run's end, and
    past that end (another clock would put them there); and its meta."""
    end = int(run.get("t1_ns") or 2 ** 62)
    con = store_rows(path)
    try:
        counts = con.execute(
            "SELECT coalesce(sum(start_ns < ?), 0), coalesce(sum(start_ns >= ? AND start_ns < ?), 0), "
            "coalesce(sum(start_ns >= ? AND start_ns < ?), 0), coalesce(sum(start_ns >= ?), 0) FROM kernels",
            (started, started, stop, stop, end, end)).fetchone()
        meta = dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()
    return (*counts, meta)


def claim_neighbour(runs):
    """torch.profiler in a recorded trainer (issue 50 item 7): its own trace has the span's kernels; stepscope's has
    as many kernels a step before and after the span (on the run's clock) and none inside it, says so once, and
    the store counts the lend."""
    text = ("a good neighbour: torch.profiler (CPU + CUDA) on 60 steps of a trainer under `record --gpu-window all` "
            "(and at the default windows)")
    expected = (f"exit 0; torch.profiler's trace: the span's kernels (within {100 * NEIGHBOUR_RATE_TOLERANCE:g}% of "
                f"ours a step before it); stepscope's store: none started inside the span, as many a step after it "
                f"as before (±{100 * NEIGHBOUR_RATE_TOLERANCE:g}%), none past the run's end; one stderr line; meta "
                f"cupti.lent '1 time', while tracing 1; at the default windows the user's trace as whole, none of ours "
                f"inside or past the end")
    r = runs.get("runs", {}).get("neighbour")
    if not r:
        return not_run("neighbour", text, expected, "no neighbour run")
    log = read_text(resolve(runs["_out"], r["log"]))
    span, trace, steps = PROFILE_SPAN.search(log), PROFILE_TRACE.search(log), STEPS_LINE.search(log)
    parts, ok = [f"exit {r.get('rc')}"], r.get("rc") == 0
    if not span or not trace or not steps:
        return claim("neighbour", text, "; ".join(parts + ["no profile-span/profile-trace/steps line"]), expected,
                     "FAIL")
    started, stop, span_steps, first = int(span.group(2)), int(span.group(3)), int(span.group(5)), int(span.group(6))
    timed, total = int(steps.group(1)), int(steps.group(2))
    steps_before, steps_after = total - timed + first, timed - first - span_steps
    user_kernels = int(trace.group(1))
    path = resolve(runs["_out"], r.get("store", ""))
    if not os.path.exists(path) or steps_before <= 0 or steps_after <= 0:
        return claim("neighbour", text, "; ".join(parts + ["no store" if not os.path.exists(path) else
                                                           f"steps {steps_before} before, {steps_after} after"]),
                     expected, "FAIL")
    before, inside, after, beyond, meta = _kernels_around(path, started, stop, r)
    rate_before, rate_after = before / steps_before, after / steps_after
    user_rate = user_kernels / span_steps
    near = lambda a, b: b > 0 and abs(a / b - 1) <= NEIGHBOUR_RATE_TOLERANCE  # noqa: E731
    lent, held = meta.get("cupti.lent", ""), meta.get("cupti.lent_while_tracing", "")
    lines = log.count(LENT_LINE)
    ok = ok and near(user_rate, rate_before) and inside == 0 and beyond == 0 and near(rate_after, rate_before) and \
        lent.startswith("torch.profiler: 1 time,") and held == "1" and lines == 1
    parts.append(f"torch.profiler: {user_kernels} kernels in {span_steps} steps ({user_rate:.1f} a step), "
                 f"{trace.group(2)} step events")
    parts.append(f"stepscope: {rate_before:.1f} kernels a step before ({before} in {steps_before}), {inside} inside, "
                 f"{rate_after:.1f} after ({after} in {steps_after}), {beyond} past the run's end; cupti.lent "
                 f"'{lent}', while tracing {held or '?'}; {lines} line(s)")
    if meta.get("cupti.subscriber"):
        parts.append(f"cupti.subscriber '{meta['cupti.subscriber']}'")
    w = runs.get("runs", {}).get("neighbour_windows")
    if w:
        # At record's default windows the lend finds a window open, off or detached: the user's trace whole, none
        # of ours inside the span or past the run's end.
        wlog = read_text(resolve(runs["_out"], w["log"]))
        wspan, wtrace = PROFILE_SPAN.search(wlog), PROFILE_TRACE.search(wlog)
        wpath = resolve(runs["_out"], w.get("store", ""))
        if not wspan or not wtrace or not os.path.exists(wpath):
            ok = False
            parts.append(f"default windows: exit {w.get('rc')}, no profile lines or store")
        else:
            _, winside, _, wbeyond, _ = _kernels_around(wpath, int(wspan.group(2)), int(wspan.group(3)), w)
            wrate = int(wtrace.group(1)) / int(wspan.group(5))
            ok = ok and w.get("rc") == 0 and near(wrate, rate_before) and winside == 0 and wbeyond == 0
            parts.append(f"default windows: exit {w.get('rc')}, torch.profiler {wrate:.1f} kernels a step, stepscope "
                         f"{winside} inside, {wbeyond} past the end")
    if meta.get("cupti.foreign_buffers"):
        parts.append(f"{meta['cupti.foreign_buffers']} foreign buffers left alone")
    return claim("neighbour", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 before=before, inside=inside, after=after, beyond=beyond, user_kernels=user_kernels)
