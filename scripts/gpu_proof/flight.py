"""Claims on the flight recorder: `stepscope dump` saves the window on demand, and its always-on cost against plain."""
import os
import sqlite3
import statistics

from .common import _pct, claim, not_run, read_text, relative_iqr, resolve, windows_of
from .stores import store_facts

FLIGHT_WINDOW = "30s"
MAX_FLIGHT_OVERHEAD = 0.01  # median window and mean step over plain's: the goal for always-on; also the
#                             most plain's windows may spread (IQR / median) for the comparison to tell
MIN_FLIGHT_WINDOWS = 5  # of each run, after the warm-up windows and those the dump falls in


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
