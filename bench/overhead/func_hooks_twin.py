"""What --step-func / --data-wait-func cost a loop of one-line calls (issue 47's loop: step_fn(2000) calling one()
2,000 times, plus next_batch() a step), measured against a twin: two copies of samples/cpu/python_call_loop.py
run at once on the same core, both under `stepscope record` at 1 kHz, one with the hooks and one without; each
logs its own thread CPU time per step. This VM's pace moves by 2-3x within seconds, in CPU time too, so runs
one after another cannot resolve a few percent; two processes sharing one core see the same host at the same
moments (their ratio held within 0.5% while both moved from 238 to 374 us a step). An A/A row (no hooks in
either) gives the method's own spread.

    python3 bench/overhead/func_hooks_twin.py --stepscope build-test/cli/stepscope [--seconds 8] [--rounds 3]
        [--python PY ...]   (default: Debian's python3, pyenv's 3.9/3.10/3.12/3.13 and sid's 3.14 where present)

Prints one row per interpreter and hook set: the median over rounds of (hooked CPU per step / twin's) - 1, and
the collector's own estimate of a hooked call (meta python.hook_ns_per_step_call / _wait_call). The goal: <= 5%.
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "..", "..", "samples", "cpu", "python_call_loop.py")
HOOKS = {
    "none (A/A)": [],
    "--step-func": ["--step-func", r"^__main__\.step_fn$"],
    "--step-func + --data-wait-func": ["--step-func", r"^__main__\.step_fn$", "--data-wait-func",
                                       r"^__main__\.next_batch$"],
}


def pythons():
    found = ["/usr/bin/python3"]
    for minor in ("3.9", "3.10", "3.12", "3.13"):
        found += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{minor}.*/bin/python3")))[-1:]
    sid = os.path.expanduser("~/.cache/stepscope/cpython-sid/usr/bin/python3.14")
    return found + ([sid] if os.path.exists(sid) else [])


def cpu_per_step(log, skip=0.25):
    lines = [tuple(map(int, l.split())) for l in open(log)]
    lines = lines[int(len(lines) * skip):]  # start-up and the hooks' install
    return statistics.median((b[1] - a[1]) / 20 for a, b in zip(lines, lines[1:]))


def meta(stepscope, db, key):
    out = subprocess.run([stepscope, "info", db], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(key + " = "):
            return line.split(" = ", 1)[1].strip()
    return "-"


def run_pair(stepscope, python, hooks, seconds, tmp):
    procs, logs, dbs = [], [], []
    for name, extra in (("hooked", hooks), ("twin", [])):
        log, db = os.path.join(tmp, f"{name}.txt"), os.path.join(tmp, f"{name}.db")
        cmd = ["taskset", "-c", "0", stepscope, "record", "--no-gpu", "--cpu-hz", "1000", "-o", db] + extra + [
            "--", python, LOOP, "--seconds", str(seconds), "--log", log]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        logs.append(log)
        dbs.append(db)
    for p in procs:
        p.wait()
    return cpu_per_step(logs[0]) / cpu_per_step(logs[1]) - 1, dbs[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stepscope", required=True)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", action="append")
    a = ap.parse_args()
    print(f"{'python':8} {'hooks':32} {'hooked/twin - 1 (median; rounds)':42} {'hooked call, ns (step/wait)':28}")
    with tempfile.TemporaryDirectory() as tmp:
        for python in a.python or pythons():
            version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                     capture_output=True, text=True).stdout.strip()
            for label, hooks in HOOKS.items():
                rounds, db = [], None
                for _ in range(a.rounds):
                    r, db = run_pair(a.stepscope, python, hooks, a.seconds, tmp)
                    rounds.append(r)
                cost = "-" if not hooks else (meta(a.stepscope, db, "python.hook_ns_per_step_call") + " / " +
                                              meta(a.stepscope, db, "python.hook_ns_per_wait_call"))
                each = ", ".join(f"{100 * r:+.1f}" for r in rounds)
                print(f"{version:8} {label:32} {100 * statistics.median(rounds):+6.1f}%  ({each}){'':8} {cost}",
                      flush=True)
    print("goal (issue 47): <= 5% on this loop, on every CPython 3.9-3.14")


if __name__ == "__main__":
    sys.exit(main())
