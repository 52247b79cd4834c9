"""The command line: `gpu_proof.py run|check` (scripts/gpu_proof.py calls main)."""
import argparse
import os
import shutil
import subprocess
import sys
import time

from . import __doc__ as PROOF_DOC
from .common import gpu_present
from .overhead import MIN_OVERHEAD_RUN_S
from .plan import FLIGHT_RESERVE_S
from .report import check, markdown
from .runner import Runner, side_by_side

# What a phase needs of the deadline when it comes after the overhead phase, which otherwise runs until the deadline.
PHASE_RESERVE_S = {"flight": FLIGHT_RESERVE_S}


def reserve_after(phases, i):
    """Seconds of the deadline the phases after phases[i] need (a+b: side by side, both counted)."""
    return sum(PHASE_RESERVE_S.get(x, 0) for later in phases[i + 1:] for x in later.split("+"))


def machine_facts(a):
    def out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    gpu = out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).split("\n")[0]
    name, _, driver = gpu.partition(", ")
    return {"gpu": name or "unknown GPU", "driver": driver or "?",
            "torch": "torch " + out([a.python, "-c", "import torch; print(torch.__version__)"]),
            "stepscope": out([os.path.join(a.build, "cli", "stepscope"), "--version"]),
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}


def main(argv=None):
    p = argparse.ArgumentParser(description=PROOF_DOC.split("\n\n")[0], epilog=PROOF_DOC.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--python", default=sys.executable)
    r.add_argument("--overhead-seconds", type=float, default=MIN_OVERHEAD_RUN_S)
    r.add_argument("--deadline-s", type=float, default=510, help="stop starting runs after this (default 510)")
    r.add_argument("--phases", default="doctor+trainer+paused+ranks+neighbour,samples,attach,exits,graphs,toggle,overhead,flight",
                   help="in order; a+b side by side (default: doctor+trainer+paused+ranks,samples,attach,exits,"
                   "graphs,toggle,overhead,flight)")
    r.add_argument("--device", default="cuda", help="cpu: a rehearsal of the trainer phases on a machine without a "
                   "GPU (the orchestration only: no GPU claim can pass)")
    c = sub.add_parser("check")
    c.add_argument("--out", required=True)
    c.add_argument("--stepscope", default=None, help="analyzes sample stores that have no NAME.json")
    a = p.parse_args(argv)
    if a.cmd == "check":
        if not os.path.exists(os.path.join(a.out, "runs.json")):
            print(f"gpu_proof: {a.out}/runs.json: no such file (run `gpu_proof.py run` first)", file=sys.stderr)
            return 2
        result = check(a.out, a.stepscope)
        sys.stdout.write(markdown(result))
        return 0 if result["passed"] == result["total"] else 1
    if a.device == "cpu" and a.phases == r.get_default("phases"):
        a.phases = "doctor+trainer+paused+ranks+neighbour,attach,toggle,overhead,flight"
    if a.device != "cpu" and not gpu_present():
        print("gpu_proof: no CUDA GPU on this machine (no /dev/nvidia0, no 'nvidia-smi -L' listing)", file=sys.stderr)
        return 3
    a.build, a.out = os.path.abspath(a.build), os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    runner = Runner(a)
    runner.runs["machine"] = machine_facts(a)
    runner.say(f"{runner.runs['machine']['gpu']}, {runner.runs['machine']['torch']}, "
               f"{runner.runs['machine']['stepscope']}")
    phases = a.phases.split(",")
    for i, phase in enumerate(phases):  # a+b: phases side by side (no time is claimed of them)
        runner.reserve_s = reserve_after(phases, i)
        if runner.left() < 10:
            runner.say(f"{phase}: skipped, out of time")
            continue
        side_by_side([getattr(runner, f"phase_{p}") for p in phase.split("+")])
        runner.save()
    shutil.rmtree(os.path.join(a.out, "tmp"), ignore_errors=True)
    runner.save()
    return 0
