#!/usr/bin/env python3
"""bench/store_size: bytes a store spends per CPU sample and per kernel (issue 53: <= 40 B a sample, <= 64 B a
kernel with its launch, every table, index and string counted), packed (schema 5) beside the same rows
(schema 4, `stepscope export --format sqlite`).

  store_size.py --stepscope build/cli/stepscope recordings   # the real GPU recordings of ../shared, re-packed
  store_size.py --stepscope build/cli/stepscope record --minutes 10 [--python venv/bin/python]
                                                     # a CPU trainer recorded at the defaults for 10 minutes

  store_size.py --stepscope build/cli/stepscope merge [--iterations 2e10 8e10]
                                                     # the merge's memory against the run's length

`recordings` re-writes each H100 recording of ../shared/recordings (and the H200 graph-nodes fixture) through
`stepscope import` (which packs) and reports bytes per kernel (GPU stores) or per sample (CPU-only ones).
`record` runs samples/cpu/python_torch_train.py --workers 2 under `stepscope record` (1 kHz, defaults) for the
minutes given and reports the store's bytes per sample, the tables' shares, and the finalize time (the trainer's
last step to record's exit: the collector's last pass, the merge, the packing). `merge` records
samples/cpu/hot_loop (two threads, 4 kHz) for each iteration count given and prints `stepscope record`'s own peak
RSS beside the samples it merged: flat when the merge streams, growing with the samples when it holds them.
"""
import argparse
import glob
import lzma
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def table_bytes(path):
    """Bytes per table, each index counted with its table (SQLite's dbstat)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        owner = {n: t for n, t in con.execute("SELECT name, tbl_name FROM sqlite_master")}
        out = {}
        for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            t = owner.get(name, name)
            out[t] = out.get(t, 0) + size
        return out
    finally:
        con.close()


def counts(stepscope, path):
    """kernels, API calls, samples, stack nodes of a store, read through stepscope (packed or rows)."""
    rows = path + ".rows"
    subprocess.run([stepscope, "export", path, "--format", "sqlite", "-o", rows], check=True, capture_output=True)
    con = sqlite3.connect(rows)
    n = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("kernels", "api_calls", "samples", "stacks")}
    con.close()
    return n, rows


def report(name, stepscope, packed):
    n, rows = counts(stepscope, packed)
    pb, rb = os.path.getsize(packed), os.path.getsize(rows)
    unit, per = ("kernel", n["kernels"]) if n["kernels"] else ("sample", n["samples"])
    print(f"{name:34} {n['kernels']:>8} {n['api_calls']:>8} {n['samples']:>8} {n['stacks']:>8} {rb / 1e6:>9.2f} "
          f"{pb / 1e6:>9.2f} {rb / max(1, per):>8.1f} {pb / max(1, per):>8.1f}  B/{unit}")
    return n, pb, rb


def header():
    print(f"{'store':34} {'kernels':>8} {'api':>8} {'samples':>8} {'stacks':>8} {'rows MB':>9} {'packed MB':>9} "
          f"{'rows B':>8} {'packed B':>8}")


def recordings(a):
    stores = sorted(glob.glob(os.path.join(SHARED, "recordings", "*", "*.db.xz")))
    stores.append(os.path.join(ROOT, "tests", "gpu_proof", "data", "h200-2026-11-30", "launch_bound-graph-nodes-192.db.xz"))
    header()
    with tempfile.TemporaryDirectory() as tmp:
        for xz in stores:
            if not os.path.exists(xz):
                continue
            name = os.path.basename(xz)[:-len(".db.xz")]
            src = os.path.join(tmp, name + ".src.db")
            with lzma.open(xz) as f, open(src, "wb") as g:
                g.write(f.read())
            packed = os.path.join(tmp, name + ".db")
            subprocess.run([a.stepscope, "import", src, "-o", packed], check=True, capture_output=True)
            report(name, a.stepscope, packed)
    print("goal: <= 64 B a kernel (with its launch), <= 40 B a sample; each figure is the whole file over the count")


def peak_rss_kb(p):
    """`p`'s peak RSS (VmHWM), read every 20 ms until it exits."""
    kb = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        kb = max(kb, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    return kb


def merge(a):
    hot = os.path.join(os.path.dirname(os.path.dirname(a.stepscope)), "samples", "cpu", "hot_loop")
    print(f"{'iterations':>12} {'samples':>9} {'store MB':>9} {'record peak RSS MB':>19}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.iterations:
            out = os.path.join(tmp, "run.db")
            p = subprocess.Popen([a.stepscope, "record", "--no-gpu", "--cpu-hz", "4000", "-o", out, "--", hot,
                                  "--threads", "2", "--iterations", str(int(float(n)))],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            kb = peak_rss_kb(p)
            err = p.stderr.read()
            if p.returncode != 0:
                sys.exit(f"store_size: record failed ({p.returncode}): {err.strip()[-2000:]}")
            samples = int(re.search(r"stepscope: (\d+) samples", err).group(1))
            print(f"{int(float(n)):>12} {samples:>9} {os.path.getsize(out) / 1e6:>9.2f} {kb / 1024:>19.1f}")


def record(a):
    trainer = os.path.join(ROOT, "samples", "cpu", "python_torch_train.py")
    with tempfile.TemporaryDirectory() as tmp:
        out, log = os.path.join(tmp, "run.db"), os.path.join(tmp, "steps.txt")
        cmd = [a.stepscope, "record", "-o", out, "--", a.python, trainer, "--workers", str(a.workers),
               "--steps", "100000000", "--duration", str(a.minutes * 60), "--step-log", log]
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        launcher_kb = peak_rss_kb(p)  # `stepscope record`'s own: the merge's memory
        done = time.monotonic_ns()
        err = p.stderr.read()
        if p.returncode != 0:
            sys.exit(f"store_size: record failed ({p.returncode}): {err.strip()[-2000:]}")
        last_step = int(open(log).read().split()[-1])
        header()
        n, pb, rb = report(f"python_torch_train {a.minutes:g} min", a.stepscope, out)
        sizes = table_bytes(out)
        print(f"recorded {time.time() - t0:.0f} s; finalize (last step to record's exit) {(done - last_step) / 1e9:.1f} s; "
              f"{pb / 1e6 * 60 / a.minutes:.1f} MB an hour of recording at this rate; `stepscope record`'s peak RSS "
              f"{launcher_kb / 1024:.0f} MB (the last read before its exit)")
        print("bytes by table (indexes with their table), packed store:")
        for t, b in sorted(sizes.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {t:24} {b:>10} B  {b / max(1, n['samples']):7.2f} B/sample")
        print(f"goal: <= 40 B a sample (whole file): {pb / max(1, n['samples']):.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stepscope", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("recordings")
    m = sub.add_parser("merge")
    m.add_argument("--iterations", nargs="+", default=["2e10", "8e10"])
    r = sub.add_parser("record")
    r.add_argument("--minutes", type=float, default=10)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--python", default=os.path.expanduser("~/.cache/stepscope/venv/bin/python"))
    a = ap.parse_args()
    a.stepscope = os.path.abspath(a.stepscope)
    {"recordings": recordings, "record": record, "merge": merge}[a.cmd](a)


if __name__ == "__main__":
    main()
