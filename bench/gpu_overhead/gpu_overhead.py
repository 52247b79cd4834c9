#!/usr/bin/env python3
"""bench/gpu_overhead: what tracing the GPU costs a launch-bound program, stepscope beside its floor and its peer.

Workloads: the launch_bound sample (--ops 30: 31 launches per step) and, when the Python of the venv has a
torch that sees the GPU, torch_workloads.py `chain` (an eager chain of 30 small ops) and `train` (a small MLP
trained with Adam). Each runs
  plain                        nothing attached
  cupti-only                   CUDA_INJECTION64_PATH=libstepscope_cupti_count.so: the activity kinds stepscope
                               enables, records counted and dropped (the floor of any CUPTI tracer)
  stepscope                    `stepscope record` with its defaults (GPU windows)
  stepscope --gpu-window all   every step traced
  stepscope --cuda-api all     the full CUDA API trace
  torch.profiler               (PyTorch workloads) the workload under torch.profiler, CPU + CUDA activities
interleaved over --rounds rounds (the order rotates each round), and prints per workload the step median of
each mode and its % per step and µs per launch over the same round's plain run: median [min-max] across
rounds. A stepscope option the installed stepscope rejects is reported on its row, not run.

  bench/gpu_overhead/gpu_overhead.py [--build DIR] [--rounds N] [--out DIR] [--workloads LIST]

Paths (each also from the environment): --stepscope (STEPSCOPE), --launch-bound (STEPSCOPE_LAUNCH_BOUND),
--cupti-lib (STEPSCOPE_CUPTI_COUNT_LIB), --python (STEPSCOPE_PYTHON, else $STEPSCOPE_PYTHON_VENV/bin/python,
else ~/.cache/stepscope/venv/bin/python); the first three default to DIR/cli/stepscope,
DIR/samples/cuda/launch_bound and DIR/bench/gpu_overhead/libstepscope_cupti_count.so, DIR = --build (default
build, as scripts/record-samples.sh).
Exit codes: 0 every run done; 1 some run failed (its log is named); 2 usage or a missing program; 3 no GPU.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3
STEP_RE = re.compile(r"^time: [^:]*: step median ([0-9.]+) us", re.M)

# (mode, extra `stepscope record` options): None = not under stepscope.
STEPSCOPE_MODES = [
    ("stepscope", []),
    ("stepscope --gpu-window all", ["--gpu-window", "all"]),
    ("stepscope --cuda-api all", ["--cuda-api", "all"]),
]


def gpu_present():
    """The same test as scripts/record-samples.sh and the samples' ctest: /dev/nvidia0 or an nvidia-smi listing."""
    if os.path.exists("/dev/nvidia0"):
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return re.search(r"^GPU [0-9]", out, re.M) is not None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (default: build)")
    p.add_argument("--stepscope", default=os.environ.get("STEPSCOPE"))
    p.add_argument("--launch-bound", default=os.environ.get("STEPSCOPE_LAUNCH_BOUND"))
    p.add_argument("--cupti-lib", default=os.environ.get("STEPSCOPE_CUPTI_COUNT_LIB"))
    venv = os.environ.get("STEPSCOPE_PYTHON_VENV", os.path.expanduser("~/.cache/stepscope/venv"))
    p.add_argument("--python", default=os.environ.get("STEPSCOPE_PYTHON", os.path.join(venv, "bin", "python")))
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--out", default=None, help="logs and results.json (default: BUILD/gpu_overhead)")
    p.add_argument("--workloads", default="launch_bound,chain,train", help="comma-separated subset")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run (default 300)")
    a = p.parse_args(argv)
    a.workloads = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in a.workloads if w not in ("launch_bound", "chain", "train")]
    if unknown or not a.workloads:
        p.error(f"--workloads: unknown {','.join(unknown) or '(empty)'}; choose from launch_bound,chain,train")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    a.stepscope = a.stepscope or os.path.join(a.build, "cli", "stepscope")
    a.launch_bound = a.launch_bound or os.path.join(a.build, "samples", "cuda", "launch_bound")
    a.cupti_lib = a.cupti_lib or os.path.join(a.build, "bench", "gpu_overhead", "libstepscope_cupti_count.so")
    a.out = a.out or os.path.join(a.build, "gpu_overhead")
    return a


def torch_sees_gpu(python):
    if not os.access(python, os.X_OK):
        return False, f"no Python at {python}"
    r = subprocess.run([python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                       capture_output=True, text=True)
    return r.returncode == 0, f"torch with {python} does not see the GPU" if r.returncode else ""


def stepscope_rejects(stepscope, options, out):
    """The first error line when this stepscope refuses `record OPTIONS` (tried on /bin/true), else None."""
    db = os.path.join(out, "probe.db")
    r = subprocess.run([stepscope, "record", *options, "-o", db, "--", "true"], capture_output=True, text=True)
    if os.path.exists(db):
        os.remove(db)
    if r.returncode == 0:
        return None
    lines = [l for l in (r.stderr + r.stdout).splitlines() if l.strip()]
    return f"rejected by this stepscope (exit {r.returncode}): {lines[0] if lines else 'no message'}"


def command_for(workload, mode, a):
    """argv and extra environment of one run."""
    if workload == "launch_bound":
        cmd = [a.launch_bound, "--ops", "30", "--steps", "3000"]
    else:
        cmd = [a.python, os.path.join(HERE, "torch_workloads.py"), workload, "--device", "cuda"]
        if mode == "torch.profiler":
            cmd.append("--profiler")
    env = {}
    if mode == "cupti-only":
        env["CUDA_INJECTION64_PATH"] = a.cupti_lib
    for name, options in STEPSCOPE_MODES:
        if mode == name:
            cmd = [a.stepscope, "record", *options, "-o", os.path.join(a.out, "run.db"), "--", *cmd]
    return cmd, env


def run_once(workload, mode, a, round_no):
    cmd, env = command_for(workload, mode, a)
    log = os.path.join(a.out, f"{workload}.{mode.replace(' ', '_').replace('-', '')}.r{round_no}.log")
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=a.timeout)
        rc, text = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timed out after {a.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + text)
    db = os.path.join(a.out, "run.db")
    if os.path.exists(db):
        os.remove(db)  # 3000 fully traced steps make tens of MB; the figures are in the log
    res = {"rc": rc, "log": log, "wall_s": time.monotonic() - t0}
    m = STEP_RE.search(text)
    if m:
        res["step_us"] = float(m.group(1))
    m = re.search(r"kernels_per_step=(\d+)", text)
    if m:
        res["launches_per_step"] = float(m.group(1))
    m = re.search(r"^steps: timed \d+ total (\d+)", text, re.M)
    total = int(m.group(1)) if m else None
    m = re.search(r"^cupti_count: records (\d+) kernels (\d+) dropped (\d+)", text, re.M)
    if m:
        res["cupti_records"], res["cupti_kernels"], res["cupti_dropped"] = map(int, m.groups())
        if total:  # measured launches per step of a PyTorch workload (warm-up steps included)
            res["launches_per_step"] = res["cupti_kernels"] / total
    return res


def spread(values, fmt):
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if not gpu_present():
        print("gpu_overhead: no CUDA GPU on this machine (no /dev/nvidia0, no 'nvidia-smi -L' listing): "
              "nothing measured", file=sys.stderr)
        return EXIT_NO_GPU
    needed = [a.stepscope, a.cupti_lib] + ([a.launch_bound] if "launch_bound" in a.workloads else [])
    for f in needed:
        if not os.path.exists(f):
            print(f"gpu_overhead: {f} is missing: build first (cmake --build {a.build} --target stepscope "
                  f"launch_bound stepscope_cupti_count) or name it (--help)", file=sys.stderr)
            return EXIT_USAGE
    os.makedirs(a.out, exist_ok=True)

    workloads = list(a.workloads)
    torch_ok, why = torch_sees_gpu(a.python)
    if not torch_ok and any(w != "launch_bound" for w in workloads):
        print(f"gpu_overhead: {why}: skipping the PyTorch workloads", file=sys.stderr)
        workloads = [w for w in workloads if w == "launch_bound"]
    if not workloads:
        return EXIT_USAGE

    rejected = {}
    for name, options in STEPSCOPE_MODES:
        if options:
            why = stepscope_rejects(a.stepscope, options, a.out)
            if why:
                rejected[name] = why

    modes = {w: ["plain", "cupti-only"] + [m for m, _ in STEPSCOPE_MODES if m not in rejected] +
             (["torch.profiler"] if w != "launch_bound" else []) for w in workloads}
    results = {w: {m: [] for m in modes[w]} for w in workloads}
    status = EXIT_OK
    print(f"gpu_overhead: {a.rounds} rounds of {', '.join(workloads)}; logs in {a.out}", flush=True)
    for r in range(a.rounds):
        for w in workloads:
            order = modes[w][r % len(modes[w]):] + modes[w][:r % len(modes[w])]
            for m in order:
                res = run_once(w, m, a, r)
                results[w][m].append(res)
                if res["rc"] != 0 or "step_us" not in res:
                    print(f"gpu_overhead: {w} / {m} round {r}: exit {res['rc']}"
                          f"{'' if 'step_us' in res else ', no step time'} (log {res['log']})", file=sys.stderr)
                    status = EXIT_RUN_FAILED
        print(f"gpu_overhead: round {r + 1}/{a.rounds} done", flush=True)

    for w in workloads:
        lps = [x["launches_per_step"] for runs in results[w].values() for x in runs if "launches_per_step" in x]
        launches = statistics.median(lps) if lps else None
        plain = [x.get("step_us") for x in results[w]["plain"]]
        print(f"\n{w}: {a.rounds} rounds; launches per step "
              f"{'%.1f' % launches if launches else 'unknown'}"
              f"{' (CUPTI kernel records / steps)' if w != 'launch_bound' else ' (the sample: kernels_per_step)'}; "
              f"median [min–max] across rounds")
        print(f"{'mode':<28} {'step us':>24} {'% per step over plain':>26} {'us per launch over plain':>28}")
        for m in modes[w]:
            steps, pct, per_launch = [], [], []
            for i, x in enumerate(results[w][m]):
                if "step_us" not in x:
                    continue
                steps.append(x["step_us"])
                p = plain[i] if i < len(plain) else None
                if p and m != "plain":
                    pct.append(100.0 * (x["step_us"] / p - 1.0))
                    if launches:
                        per_launch.append((x["step_us"] - p) / launches)
            print(f"{m:<28} {spread(steps, '{:.1f}'):>24} {spread(pct, '{:+.1f}%'):>26} "
                  f"{spread(per_launch, '{:+.2f}'):>28}")
        for m, why in rejected.items():
            print(f"{m:<28} {why}")
        cupti = [x for x in results[w]["cupti-only"] if "cupti_records" in x]
        if cupti:
            print(f"cupti-only counted {cupti[-1]['cupti_records']} records ({cupti[-1]['cupti_kernels']} kernels, "
                  f"{cupti[-1]['cupti_dropped']} dropped) in its last run")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"rounds": a.rounds, "rejected": rejected, "results": results}, f, indent=1)
    print(f"\nLogs and results.json: {a.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
