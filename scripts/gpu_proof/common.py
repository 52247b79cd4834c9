"""What the GPU proof's modules share: the repository's paths, the programs' timing and window lines,
samples/variants.txt, a claim's record, and SQLite and file helpers."""
import hashlib
import os
import re
import sqlite3
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/
ROOT = os.path.dirname(HERE)
TRAINER = os.path.join(ROOT, "bench", "gpu_overhead", "torch_workloads.py")
DDP = os.path.join(ROOT, "samples", "cpu", "python_ddp_gloo.py")
VARIANTS = os.path.join(ROOT, "samples", "variants.txt")
sys.path.insert(0, os.path.dirname(TRAINER))
from gpu_overhead import gpu_present  # noqa: E402  (the one test of "a GPU is here", as the bench's)

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


# The stepscope binary `check` was given: it turns a packed store (schema 5 and later) into rows SQL reads.
STEPSCOPE = [None]


def store_rows(path):
    """A read-only connection to a store's rows. A packed store (schema 5 and later: kernels, API calls, samples,
    stacks and, since 6, ranges in compressed blocks) is exported as rows once (`stepscope export --format sqlite`)
    into the system's temporary folder, not beside it: the proof's output folder keeps only what it recorded."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    if con.execute("PRAGMA user_version").fetchone()[0] < 5:
        return con
    con.close()
    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    folder = os.path.join(tempfile.gettempdir(), f"stepscope-proof-rows-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    rows = os.path.join(folder, key[:32] + ".db")
    if not os.path.exists(rows):
        tool = STEPSCOPE[0] or os.environ.get("STEPSCOPE_BIN") or shutil.which("stepscope")
        if not tool:
            raise RuntimeError(f"{path}: a packed store (schema 5 or later); reading it needs stepscope (check --stepscope)")
        subprocess.run([tool, "export", path, "--format", "sqlite", "-o", rows], check=True, capture_output=True)
    return sqlite3.connect(f"file:{rows}?mode=ro", uri=True)


def _count(con, sql):
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0


def _columns(con, table):
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}



def resolve(out, p):
    return p if os.path.isabs(p) else os.path.join(out, p)



def claim(cid, text, measured, expected, verdict, **details):
    return {"id": cid, "claim": text, "measured": measured, "expected": expected, "verdict": verdict,
            "details": details}


def not_run(cid, text, expected, why):
    return claim(cid, text, f"not run: {why}", expected, "NOT RUN")



def _pct(a, b):
    return 100.0 * (a / b - 1.0)


TIMED_STEPS = re.compile(r"^steps: timed (\d+)", re.M)


def launches_per_step(text):
    m = re.search(r"kernels_per_step=(\d+)", text)
    return int(m.group(1)) if m else None



def windows_of(text):
    """The `window:` lines of launch_bound or the trainer: (end_ns, steps, mean_us)."""
    return [(int(a), int(b), float(c)) for a, b, c in
            re.findall(r"^window: end_ns=(\d+) steps=(\d+) mean_us=([0-9.]+)", text, re.M)]


def relative_iqr(values):
    """(q3 - q1) / median: how much windows of one steady phase spread."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / q2



def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
