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


PROFILE_SPAN = re.compile(r"^profile-span: enter_ns=(\d+) started_ns=(\d+) stop_ns=(\d+) stopped_ns=(\d+) steps=(\d+)",
                          re.M)
PROFILE_TRACE = re.compile(r"^profile-trace: (\d+) kernels (\d+) step events (\d+) events", re.M)
LENT_LINE = "GPU tracing pauses while it runs"


def claim_neighbour(runs):
    """torch.profiler in a recorded trainer (issue 50 item 7): its own trace has the span's kernels; stepscope's has
    kernels before and after the span and none inside it, says so once, and the store counts the lend."""
    text = "a good neighbour: torch.profiler (CPU + CUDA) on 60 steps of a trainer under `record --gpu-window all`"
    expected = ("exit 0; torch.profiler's trace has kernels; stepscope's store has kernels before and after its span, "
                "none started inside it; one stderr line; meta cupti.lent '1 time', while tracing 1")
    r = runs.get("runs", {}).get("neighbour")
    if not r:
        return not_run("neighbour", text, expected, "no neighbour run")
    log = read_text(resolve(runs["_out"], r["log"]))
    span, trace = PROFILE_SPAN.search(log), PROFILE_TRACE.search(log)
    parts, ok = [f"exit {r.get('rc')}"], r.get("rc") == 0
    if not span or not trace:
        return claim("neighbour", text, "; ".join(parts + ["no profile-span/profile-trace line"]), expected, "FAIL")
    started, stop = int(span.group(2)), int(span.group(3))
    user_kernels = int(trace.group(1))
    ok = ok and user_kernels > 0
    parts.append(f"torch.profiler: {user_kernels} kernels, {trace.group(2)} step events")
    path = resolve(runs["_out"], r.get("store", ""))
    if not os.path.exists(path):
        return claim("neighbour", text, "; ".join(parts + ["no store"]), expected, "FAIL")
    con = store_rows(path)
    try:
        before, inside, after = con.execute(
            "SELECT coalesce(sum(start_ns < ?), 0), coalesce(sum(start_ns >= ? AND start_ns < ?), 0), "
            "coalesce(sum(start_ns >= ?), 0) FROM kernels", (started, started, stop, stop)).fetchone()
        meta = dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()
    lent, held = meta.get("cupti.lent", ""), meta.get("cupti.lent_while_tracing", "")
    lines = log.count(LENT_LINE)
    ok = ok and before > 0 and inside == 0 and after > 0 and lent.startswith("torch.profiler: 1 time,") and \
        held == "1" and lines == 1
    parts.append(f"stepscope: {before} kernels before, {inside} inside, {after} after; cupti.lent '{lent}', while "
                 f"tracing {held or '?'}; {lines} line(s)")
    if meta.get("cupti.subscriber"):
        parts.append(f"cupti.subscriber '{meta['cupti.subscriber']}'")
    if meta.get("cupti.foreign_buffers"):
        parts.append(f"{meta['cupti.foreign_buffers']} foreign buffers left alone")
    return claim("neighbour", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 before=before, inside=inside, after=after, user_kernels=user_kernels)
