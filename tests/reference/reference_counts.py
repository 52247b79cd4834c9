#!/usr/bin/env python3
"""Reference values for the importer tests, computed from the trace files without any stepscope code.

For every trace under the shared traces folder (Kineto / Chrome JSON, plain or .gz, and Nsight Systems SQLite
exports, plain or .gz) prints one TSV row:

  file  kernels  memcpys  memsets  gpu_busy_ns  steps  step_data_wait_ns

* kernels / memcpys / memsets: complete ("ph": "X") events of the GPU categories of each dialect:
  kernel|Kernel, gpu_memcpy|Memcpy, gpu_memset|Memset; in the nsys-converted dialect (cat "cuda") an event
  with a launch grid is a kernel, else its name says memcpy or memset. SQLite: rows of
  CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET.
* gpu_busy_ns: length of the union of all those intervals (all devices, all streams), in ns.
* steps: "ProfilerStep#N" complete events on the host (not gpu_user_annotation, not python_function).
* step_data_wait_ns: per step (in start order), the length of the union of host
  "enumerate(DataLoader)#..." events, clipped to the step; comma separated, "-" when there are no steps.

Times: "ts"/"dur" are microseconds; they are read as exact decimals (a double cannot hold ns at epoch-sized
µs values) and rounded half away from zero to integer ns; the end is start + round(dur). The nsys-converted
dialect carries exact "start_ns"/"end_ns" in args, which win when present.

Usage: reference_counts.py TRACES_DIR > expected.tsv
"""
import decimal
import gzip
import json
import os
import sqlite3
import sys
import tempfile

decimal.getcontext().prec = 40
_THOUSAND = decimal.Decimal(1000)


def to_ns(us):
    if us is None:
        return 0
    d = decimal.Decimal(us) * _THOUSAND if not isinstance(us, decimal.Decimal) else us * _THOUSAND
    return int(d.quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


def union_length(intervals):
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def open_bytes(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def from_json(data):
    doc = json.loads(data, parse_float=decimal.Decimal, parse_int=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kernels = memcpys = memsets = 0
    gpu = []
    steps = []
    waits = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        name = e.get("name", "")
        args = e.get("args") or {}
        start = to_ns(e.get("ts"))
        end = start + to_ns(e.get("dur", 0))
        if "start_ns" in args and "end_ns" in args:
            start, end = int(args["start_ns"]), int(args["end_ns"])
        kind = None
        if cat in ("kernel", "Kernel"):
            kind = "k"
        elif cat in ("gpu_memcpy", "Memcpy"):
            kind = "c"
        elif cat in ("gpu_memset", "Memset"):
            kind = "s"
        elif cat == "cuda":
            if "grid" in args:
                kind = "k"
            elif "emcpy" in name:
                kind = "c"
            elif "emset" in name:
                kind = "s"
            else:
                kind = "k"
        if kind:
            kernels += kind == "k"
            memcpys += kind == "c"
            memsets += kind == "s"
            gpu.append((start, end))
            continue
        if cat in ("gpu_user_annotation", "python_function"):
            continue
        if name.startswith("ProfilerStep#"):
            steps.append((start, end))
        elif name.startswith("enumerate(DataLoader)#"):
            waits.append((start, end))
    return kernels, memcpys, memsets, gpu, steps, waits


def from_sqlite(data):
    with tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False) as tmp:
        tmp.write(data)
        name = tmp.name
    try:
        db = sqlite3.connect(name)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        counts = []
        gpu = []
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if t in tables:
                rows = db.execute(f"SELECT start, end FROM {t}").fetchall()
                counts.append(len(rows))
                gpu.extend(rows)
            else:
                counts.append(0)
        db.close()
    finally:
        os.unlink(name)
    return counts[0], counts[1], counts[2], gpu, [], []


def row(path, rel):
    data = open_bytes(path)
    if data[:16] == b"SQLite format 3\x00":
        k, c, s, gpu, steps, waits = from_sqlite(data)
    else:
        k, c, s, gpu, steps, waits = from_json(data)
    steps.sort()
    per_step = []
    for s0, s1 in steps:
        clipped = [(max(a, s0), min(b, s1)) for a, b in waits if b > s0 and a < s1]
        per_step.append(str(union_length(clipped)))
    return [rel, str(k), str(c), str(s), str(union_length(gpu)), str(len(steps)),
            ",".join(per_step) if per_step else "-"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    rows = []
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith((".json", ".json.gz", ".sqlite", ".sqlite.gz")):
                path = os.path.join(folder, f)
                rows.append(row(path, os.path.relpath(path, root)))
    rows.sort()
    print("\t".join(["file", "kernels", "memcpys", "memsets", "gpu_busy_ns", "steps", "step_data_wait_ns"]))
    for r in rows:
        print("\t".join(r))


if __name__ == "__main__":
    main()
