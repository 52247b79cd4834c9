"""Claims on what the stores hold: API rows on their thread, every window's launches, unique launch ids, lean API
tracing, stacks at blocking calls."""
import os

from .common import TRAINER, claim, not_run, read_text

MAX_API_ROWS_PER_KERNEL = 3.0
MAX_STORE_BYTES_PER_KERNEL = 64.0  # issue 53: a kernel with its launch, packed (schema 5)
ITEM_MARK = "# sync: .item()"


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
