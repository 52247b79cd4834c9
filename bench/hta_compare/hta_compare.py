#!/usr/bin/env python3
"""stepscope's HTA breakdowns beside Holistic Trace Analysis itself, on the same Kineto traces.

  bench/hta_compare/hta_compare.py --stepscope build/cli/stepscope [--traces ../shared/traces] [--hta-python PY]

For each Kineto JSON trace it runs HTA 0.5 (`holistictraceanalysis` from PyPI, in the venv of --hta-python,
default $STEPSCOPE_HTA_PYTHON or ~/.cache/stepscope/hta-venv/bin/python) and `stepscope analyze --json`, and
prints one table row per figure: the kernel-type breakdown (HTA's get_gpu_kernel_breakdown, memory kernels left
out as HTA's default does), the CUDA kernel launch statistics (get_cuda_kernel_launch_stats: count and the means
of CPU duration, GPU duration and launch delay), the queue length per stream (get_queue_length_summary: events,
mean, max) and the GPU user-annotation breakdown (get_gpu_user_annotation_breakdown: total per name).
`--json OUT` also writes every figure. Exit 0 when every figure is within 1% (or 0.05 µs / one queue entry),
1 otherwise, 2 on usage errors, 3 when HTA cannot be imported.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# HTA side: run inside the HTA venv (this file again with --hta-side).
HTA_SIDE = r'''
import json, os, sys, logging, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
path = sys.argv[1]
d, f = os.path.split(path)
# The whole trace, as stepscope: HTA by default leaves out the last profiler step and what follows it.
t = TraceAnalysis(trace_files={0: f}, trace_dir=d, include_last_profiler_step=True)
out = {}
try:
    types, _ = t.get_gpu_kernel_breakdown(visualize=False)
    out["kernel_types"] = {r["kernel_type"]: float(r["sum"]) for _, r in types.iterrows()}
except Exception as e:  # a trace without GPU kernels
    out["kernel_types_error"] = repr(e)[:200]
try:
    ls = t.get_cuda_kernel_launch_stats(visualize=False)[0]
    out["launch"] = {"count": int(len(ls)),
                     "cpu_duration_mean": float(ls["cpu_duration"].mean()) if len(ls) else 0.0,
                     "gpu_duration_mean": float(ls["gpu_duration"].mean()) if len(ls) else 0.0,
                     "launch_delay_mean": float(ls["launch_delay"].mean()) if len(ls) else 0.0}
except Exception as e:
    out["launch_error"] = repr(e)[:200]
try:
    q = t.get_queue_length_summary(ranks=[0])
    if q is not None:
        out["queues"] = {str(int(idx[1])): {"count": float(r[("queue_length", "count")]),
                                             "mean": float(r[("queue_length", "mean")]),
                                             "max": float(r[("queue_length", "max")])} for idx, r in q.iterrows()}
except Exception as e:
    out["queues_error"] = repr(e)[:200]
try:
    a = t.get_gpu_user_annotation_breakdown(visualize=False, num_kernels=1000)
    if a is not None:
        out["annotations"] = {r["name"]: float(r["sum (us)"]) for _, r in a.iterrows()}
except Exception as e:
    out["annotations_error"] = repr(e)[:200]
print(json.dumps(out))
'''


def kineto_traces(root):
    for sub in ("kineto", "hta", "tracelens", "param"):
        d = os.path.join(root, sub)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".json.gz") or f.endswith(".json"):
                yield os.path.join(d, f)


def run_hta(py, path, tmp):
    # HTA reads plain or gzipped JSON by name; give it a file of its own in a folder of its own.
    rundir = tempfile.mkdtemp(dir=tmp)
    dst = os.path.join(rundir, os.path.basename(path))
    os.symlink(os.path.abspath(path), dst)
    # HTA rounds ns-resolution timestamps to whole µs (start up, end down); stepscope keeps the ns. Compared with
    # the rounding off, so that the definitions are the same.
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
    r = subprocess.run([py, "-c", HTA_SIDE, dst], capture_output=True, text=True, timeout=900, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_stepscope(ss, path):
    r = subprocess.run([ss, "analyze", "--json", path], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[:200]}
    return json.loads(r.stdout).get("gpu_breakdowns", {})


def close(a, b, rel=0.01, absolute=0.05):
    return abs(a - b) <= max(absolute, rel * max(abs(a), abs(b)))


GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def trace_facts(path):
    """What explains HTA's kernel-type figures where they differ: GPU work whose launch call is not in the trace
    (HTA leaves it out), non-GPU events with a stream argument (HTA counts them as GPU work)."""
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        d = json.load(f)
    ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
    launched = {e["args"]["correlation"] for e in ev
                if e.get("cat") not in GPU_CATS and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]
    orphans = [e for e in gpu if e.get("args", {}).get("correlation") not in launched]
    streamed = [e for e in ev if e.get("cat") not in GPU_CATS and "stream" in e.get("args", {})]
    return {"orphans": len(orphans), "orphan_us": sum(e.get("dur", 0) for e in orphans), "streamed": len(streamed),
            "fractional": any(isinstance(e.get("ts"), float) and not float(e["ts"]).is_integer() for e in gpu[:200])}


def compare(name, hta, ss, rows, facts):
    def row(figure, h, s, ok=None, note=""):
        if ok is None:
            ok = (h or 0) == 0 and (s or 0) == 0 or h is not None and s is not None and close(h, s)
        rows.append((name, figure, h, s, ok, note if not ok else ""))

    types = hta.get("kernel_types")
    if types is not None:
        mine = {k["type"]: k["us"] for k in ss.get("kernel_types", [])}
        why = []
        if facts["orphans"]:
            why.append(f"HTA leaves out {facts['orphans']} GPU events ({facts['orphan_us'] / 1000:.1f} ms) whose "
                       "launch is not in the trace")
        if facts["streamed"]:
            why.append(f"HTA counts {facts['streamed']} CPU event(s) with a stream argument as GPU work")
        if facts["fractional"]:
            why.append("HTA truncates each stretch to whole µs")
        for k in sorted(set(types) | set(mine)):
            row(f"kernel type {k} (µs)", types.get(k), mine.get(k), note="; ".join(why))
    launch = hta.get("launch")
    if launch is not None:
        mine = ss.get("launch_stats", {})
        row("launches joined", launch["count"], mine.get("count"))
        if launch["count"]:
            for f in ("cpu_duration", "gpu_duration", "launch_delay"):
                row(f"launch {f} mean (µs)", launch[f + "_mean"], mine.get(f, {}).get("mean_us"))
    queues = hta.get("queues")
    if queues is not None:
        mine = {str(q["stream"]): q for q in ss.get("queues", [])}
        for stream, q in sorted(queues.items(), key=lambda x: int(x[0])):
            m = mine.get(stream, {})
            row(f"stream {stream} queue events", q["count"], m.get("events"))
            row(f"stream {stream} queue mean", q["mean"], m.get("mean"), None if m else False)
            row(f"stream {stream} queue max", q["max"], m.get("max"))
    annos = hta.get("annotations")
    if annos is not None:
        mine = {a["name"]: a["sum_us"] for a in ss.get("annotations", [])}
        for n in sorted(set(annos) | set(mine), key=lambda n: -(annos.get(n) or 0))[:12]:
            row(f"annotation {n[:40]} (µs)", annos.get(n), mine.get(n))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stepscope", default=os.environ.get("STEPSCOPE", os.path.join(ROOT, "build", "cli", "stepscope")))
    p.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces"))
    p.add_argument("--hta-python", default=os.environ.get("STEPSCOPE_HTA_PYTHON", os.path.expanduser(
        "~/.cache/stepscope/hta-venv/bin/python")))
    p.add_argument("--only", default="", help="a substring of the trace paths to run")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    if not os.path.isfile(a.stepscope):
        print(f"hta_compare: {a.stepscope}: no such program (build stepscope first)", file=sys.stderr)
        return 2
    if subprocess.run([a.hta_python, "-c", "import hta"], capture_output=True).returncode != 0:
        print(f"hta_compare: {a.hta_python} cannot import hta: python -m venv ~/.cache/stepscope/hta-venv && "
              "~/.cache/stepscope/hta-venv/bin/pip install HolisticTraceAnalysis", file=sys.stderr)
        return 3
    rows, figures = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in kineto_traces(a.traces):
            if a.only and a.only not in path:
                continue
            name = os.path.relpath(path, a.traces)
            hta, ss = run_hta(a.hta_python, path, tmp), run_stepscope(a.stepscope, path)
            figures[name] = {"hta": hta, "stepscope": ss}
            if "error" in hta or "error" in ss:
                rows.append((name, "run", hta.get("error", "ok"), ss.get("error", "ok"), False, ""))
                continue
            compare(name, hta, ss, rows, trace_facts(path))
    fmt = lambda v: "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    print("| trace | figure | HTA 0.5 | stepscope | agree |")
    print("|---|---|---|---|---|")
    for name, fig, h, s, ok, note in rows:
        print(f"| {name} | {fig} | {fmt(h)} | {fmt(s)} | {'yes' if ok else '**no**' + (': ' + note if note else '')} |")
    bad = sum(1 for r in rows if not r[4])
    print(f"\n{len(rows) - bad} of {len(rows)} figures agree (within 1%, 0.05 µs or one queue entry)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
