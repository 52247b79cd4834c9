"""`run`: the phases that record the claims' programs, each writing its part of OUT/runs.json."""
import json
import os
import re
import signal
import subprocess
import threading
import time

from . import plan
from .common import (DDP, HERE, STEPSCOPE, TIMED_STEPS, TRAINER, read_text, resolve, step_times, windows_of,
                     write_atomically)
from .flight import FLIGHT_WINDOW, MIN_FLIGHT_WINDOWS
from .graphs import graph_facts
from .overhead import TRAINER_STEPS
from .sessions import EXIT_DURATIONS
from .stores import store_facts


class Runner:
    def __init__(self, a):
        self.a = a
        self.out = a.out
        self.t_start = time.monotonic()
        self.runs = {"runs": {}, "overhead": {}, "samples_dir": "samples"}
        self.reserve_s = 0  # seconds of the deadline the phases after this one need (the overhead phase keeps them)
        self.ss = os.path.join(a.build, "cli", "stepscope")
        STEPSCOPE[0] = self.ss  # the stores the run reads as it goes are packed: read through its export
        for d in ("logs", "stores", "tmp"):
            os.makedirs(os.path.join(self.out, d), exist_ok=True)

    def left(self):
        return self.a.deadline_s - (time.monotonic() - self.t_start)

    def say(self, msg):
        print(f"gpu-proof [{time.monotonic() - self.t_start:5.0f} s] {msg}", flush=True)

    def save(self):
        self.runs["machine"]["run_s"] = round(time.monotonic() - self.t_start)
        write_atomically(os.path.join(self.out, "runs.json"), json.dumps(self.runs, indent=1) + "\n")

    def trainer(self, *extra):
        return [self.a.python, TRAINER, "train", "--device", self.a.device, *extra]

    def record(self, db, *opts):
        """`stepscope record` into db (relative to OUT, as runs.json names it)."""
        return [self.ss, "record", *opts, "-o", resolve(self.out, db), "--"]

    def spawn(self, cmd, log, rec):
        """Starts cmd in the background, its command line and output in log; None (rec["rc"] 127) when it cannot."""
        with open(os.path.join(self.out, log), "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            try:
                return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
            except OSError as e:
                f.write(f"gpu_proof: cannot run {cmd[0]}: {e}\n")
                rec["rc"] = 127
                return None

    def run(self, name, argv, log, timeout, env=None):
        """Runs argv to completion (output to log); returns its record for runs.json."""
        t0 = time.monotonic_ns()
        with open(os.path.join(self.out, log), "w") as f:
            f.write(" ".join(argv) + "\n")
            f.flush()
            try:
                rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=max(timeout, 1),
                                    env={**os.environ, **(env or {})}).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        t1 = time.monotonic_ns()
        self.say(f"{name}: exit {rc} in {(t1 - t0) / 1e9:.1f} s")
        return {"argv": argv, "rc": rc, "log": log, "wall_s": round((t1 - t0) / 1e9, 2), "t0_ns": t0, "t1_ns": t1,
                "limit_s": round(max(timeout, 1), 1)}

    def phase_trainer(self):
        """Memory, lean API, blocking stacks: the trainer (with .item() each step) plain and recorded. No claim
        here is a time, so the four runs go side by side."""
        steps = ["--steps", str(TRAINER_STEPS), "--item"]
        jobs = {"trainer_plain": ("trainer plain", self.trainer(*steps), None),
                "trainer_recorded": ("trainer recorded", self.record("stores/trainer_recorded.db") +
                                     self.trainer(*steps), "stores/trainer_recorded.db")}
        for name, opts in (("trainer_all_lean", ["--gpu-window", "all"]),
                           ("trainer_all_api", ["--gpu-window", "all", "--cuda-api", "all"])):
            jobs[name] = (name, self.record(f"stores/{name}.db", *opts) + self.trainer(*steps), f"stores/{name}.db")

        def one(name):
            what, argv, store = jobs[name]
            rec = self.run(what, argv, f"logs/{name}.log", 180)
            if store:
                rec["store"] = store
            self.runs["runs"][name] = rec
        side_by_side([lambda n=n: one(n) for n in jobs])

    def phase_samples(self):
        env = {"STEPSCOPE_PYTHON": self.a.python}
        self.runs["runs"]["samples"] = self.run("samples (record-samples.sh)", [
            "bash", os.path.join(HERE, "record-samples.sh"), self.a.build, os.path.join(self.out, "samples")],
            "logs/record-samples.log", min(240, self.left()), env)

    def windowed_target(self, seconds, report_every):
        """(name, argv) of a program that runs `seconds` with window lines: launch_bound, a line every
        `report_every` steps; on a CPU rehearsal, where no CUDA sample runs, the trainer (a line every 200)."""
        if self.a.device == "cpu":
            return "trainer", self.trainer("--steps", "100000000", "--duration", str(seconds), "--report-every", "200")
        return "launch_bound", [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30",
                                "--steps", str(plan.launch_bound_cap(seconds)), "--duration", str(seconds),
                                "--report-every", str(report_every)]

    def attach_target(self):
        """(name, argv) of the program the attach phase attaches to: launch_bound, whose host-bound step is steady
        (the trainer's windows of 200 steps wandered 1257–2409 µs alone on the H100, no 3% could show), with a
        window line every ~0.2 s; on a CPU rehearsal, where no CUDA sample runs, the trainer."""
        return self.windowed_target(plan.ATTACH_SECONDS, plan.ATTACH_REPORT_EVERY)

    def phase_attach(self):
        """launch_bound runs plain; stepscope attaches 5 s after its first window for 6 s, detaches; it runs on."""
        target, argv = self.attach_target()
        log = f"logs/attach_{target}.log"
        rec = {"log": log, "store": "stores/attach.db", "target": target, "argv": argv}
        with open(os.path.join(self.out, log), "w") as f:
            try:
                p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
            except OSError as e:
                f.write(f"gpu_proof: cannot run {argv[0]}: {e}\n")
                self.runs["runs"]["attach"] = {**rec, "rc": 127}
                return
        if not self.wait_for_line(os.path.join(self.out, log), "window:", p, 60):
            rec["rc"] = p.wait()
            self.runs["runs"]["attach"] = rec
            return
        time.sleep(5)
        a = self.run("attach", [self.ss, "attach", str(p.pid), "-o", os.path.join(self.out, "stores/attach.db"),
                                "--duration", "6"], "logs/attach.log", 60)
        rec.update(attach_rc=a["rc"], attach_start_ns=a["t0_ns"], attach_end_ns=a["t1_ns"], attach_log=a["log"])
        rec["rc"] = self.wait(p, 60)
        self.runs["runs"]["attach"] = rec

    def phase_exits(self):
        """launch_bound recorded with runs that end 0.4-1.2 s into their steps: the exit falls where the collector's
        calibration (~1 s after CUDA started) may be under way. No claim is a time: the exit codes."""
        if self.a.device == "cpu":
            return
        lb = os.path.join(self.a.build, "samples", "cuda", "launch_bound")
        rec = {"runs": [], "durations": [], "stores": []}
        for i, d in enumerate(EXIT_DURATIONS):
            if self.left() < 15 + self.reserve_s:
                break
            db = f"stores/exit-{i}.db"
            r = self.run(f"exit run {d} s", self.record(db) + [lb, "--ops", "30", "--steps",
                                                              str(plan.launch_bound_cap(d)), "--duration", str(d)],
                         f"logs/exit_{i}.log", 30)
            rec["runs"].append(r)
            rec["durations"].append(d)
            rec["stores"].append(db)
        self.runs["runs"]["exits"] = rec

    def phase_graphs(self):
        """launch_bound --graph plain for GRAPH_PLAIN_SECONDS (its step count sizes the default-window run); recorded
        whole with one interval per replay and with every node's records (GRAPH_ALL_STEPS each: the stores, ~620,000
        kernel rows, are read here and removed), the launch-cost calibration off (its launches would fall among the
        timed steps of these short runs); then recorded with the defaults (the store kept)."""
        if self.a.device == "cpu":  # a rehearsal: no CUDA sample to run
            return
        lb = [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30", "--graph",
              "--report-every", str(plan.GRAPH_REPORT_EVERY)]
        rec = {}
        self.runs["runs"]["graphs"] = rec
        whole = ["--gpu-window", "all"]
        order = [("plain", lb + ["--steps", str(plan.launch_bound_cap(plan.GRAPH_PLAIN_SECONDS)), "--duration",
                                str(plan.GRAPH_PLAIN_SECONDS)], None),
                ("graph", self.record("tmp/graphs_graph.db", *whole, "--cuda-graphs", "graph") + lb +
                 ["--steps", str(plan.GRAPH_ALL_STEPS)], "tmp/graphs_graph.db"),
                ("nodes", self.record("tmp/graphs_nodes.db", *whole) + lb + ["--steps", str(plan.GRAPH_ALL_STEPS)],
                 "tmp/graphs_nodes.db"),
                ("default", None, "stores/graphs_default.db")]
        for name, argv, db in order:
            if self.left() - self.reserve_s < 30:
                self.say(f"graphs {name}: skipped, {self.left():.0f} s left")
                continue
            if name == "default":
                done = TIMED_STEPS.search(read_text(os.path.join(self.out, rec.get("plain", {}).get("log", "-"))))
                if not done:
                    self.say("graphs default: skipped, the plain run printed no step count")
                    continue
                argv = self.record(db) + lb + ["--steps", done.group(1)]
            env = {"STEPSCOPE_CALIBRATE": "0"} if name in ("graph", "nodes") else None
            r = self.run(f"graphs {name}", argv, f"logs/graphs_{name}.log", min(120, self.left() - self.reserve_s - 5),
                         env)
            path = os.path.join(self.out, db) if db else None
            if path and os.path.exists(path):
                r["graph_facts"] = graph_facts(path)
                if db.startswith("tmp/"):
                    os.remove(path)
                else:
                    r["store"] = db
            rec[name] = r
            self.save()

    def phase_paused(self):
        log = "logs/paused.log"
        db = "stores/paused.db"
        with open(os.path.join(self.out, log), "w") as f:
            # Beside the other side-by-side runs a step is slower: a window line every 50 steps comes soon enough.
            p = subprocess.Popen(self.record(db, "--paused") + self.trainer("--steps", "100000000", "--duration", "14",
                                                                             "--report-every", "50"),
                                 stdout=f, stderr=subprocess.STDOUT)
        rec = {"log": log, "store": "stores/paused.db", "windows": []}
        if self.wait_for_line(os.path.join(self.out, log), "window:", p, 120):
            for _ in range(2):  # the launcher's pid: start/stop act on the command it runs
                time.sleep(2)
                s = self.run("start", [self.ss, "start", str(p.pid)], "logs/paused_start.log", 20)
                time.sleep(2)
                e = self.run("stop", [self.ss, "stop", str(p.pid)], "logs/paused_stop.log", 20)
                rec["windows"].append([s["t0_ns"], e["t1_ns"]])
        rec["rc"] = self.wait(p, 90)
        self.runs["runs"]["paused"] = rec

    def phase_ranks(self):
        stores = ["stores/rank-0.db", "stores/rank-1.db"]
        r = self.run("ranks", self.record("stores/rank-%r.db") + [
            self.a.python, "-m", "torch.distributed.run", "--nproc_per_node", "2", DDP, "--device", self.a.device,
            "--steps", "300"], "logs/ranks.log", 120)
        r["stores"] = stores
        self.runs["runs"]["ranks"] = r

    def phase_neighbour(self):
        """The trainer under `record --gpu-window all`, torch.profiler (CPU + CUDA) on its steps NEIGHBOUR_SPAN: both
        traces whole (issue 50 item 7). Side by side with the first phases: no time is claimed of it."""
        a, b = plan.NEIGHBOUR_SPAN
        for name, opts in (("neighbour", ["--gpu-window", "all"]), ("neighbour_windows", [])):
            # The second at record's default windows: the lend may find a window open, off, or detached.
            r = self.run(name, self.record(f"stores/{name}.db", *opts) + self.trainer(
                "--steps", str(plan.NEIGHBOUR_STEPS), "--item", "--profile-steps", f"{a}:{b}", "--profile-out",
                resolve(self.out, f"tmp/{name}-kineto.json")), f"logs/{name}.log", 180)
            r["store"] = f"stores/{name}.db"
            self.runs["runs"][name] = r

    def phase_doctor(self):
        self.runs["runs"]["doctor"] = self.run("doctor", [self.ss, "doctor", "--python", self.a.python],
                                               "logs/doctor.log", 120)

    def phase_overhead(self):
        """Each workload plain, recorded (default window, all), CUPTI alone and (trainer) torch.profiler. The plain
        run stops after the overhead seconds (2% over: the claim's ≥ s is mean step × steps, a little under the
        loop's wall time); every other mode runs the plain run's step count, torch.profiler a bounded one."""
        s = self.a.overhead_seconds
        cupti = os.path.join(self.a.build, "bench", "gpu_overhead", "libstepscope_cupti_count.so")
        # launch_bound's window lines: flight-overhead compares its windows with plain's
        lb = [os.path.join(self.a.build, "samples", "cuda", "launch_bound"), "--ops", "30", "--report-every",
              str(plan.LB_REPORT_EVERY)]
        workloads = {
            "launch_bound": lb + ["--steps", str(plan.launch_bound_cap(s * 1.02)), "--duration", f"{s * 1.02:g}"],
            "trainer": self.trainer("--steps", "100000000", "--duration", str(s * 1.02), "--item"),
        }
        profiler = None  # the trainer's bounded torch.profiler run, once its plain run said how many steps
        if self.a.device == "cpu":  # a rehearsal: no CUDA sample to run
            del workloads["launch_bound"]
        # The goals first (plain and the default window of both), then launch_bound under CUPTI alone (what the
        # launch-cost claim compares with), the peer (torch.profiler), the trainer under CUPTI alone, and last
        # `--gpu-window all`, whose 30 s store takes the longest to finalize: what the deadline cuts is what is
        # only stated.
        order = [("launch_bound", "plain"), ("launch_bound", "default"), ("trainer", "plain"), ("trainer", "default"),
                 ("launch_bound", "cupti-only"), ("trainer", "torch.profiler"), ("trainer", "cupti-only"),
                 ("launch_bound", "all"), ("trainer", "all")]
        for w, m in order:
            if w not in workloads:
                continue
            cmd = workloads[w]
            res = self.runs["overhead"].setdefault(w, {})
            if self.left() - self.reserve_s < s + 20:
                self.say(f"overhead {w} {m}: skipped, {self.left():.0f} s left" +
                         (f", {self.reserve_s:.0f} s of them for the phases after" if self.reserve_s else ""))
                continue
            if m == "torch.profiler" and profiler is None:
                self.say(f"overhead {w} {m}: skipped, the plain run printed no step count to bound it by")
                continue
            argv, env = {"plain": (cmd, None), "default": (self.record(f"tmp/{w}.db") + cmd, None),
                         "all": (self.record(f"tmp/{w}.db", "--gpu-window", "all") + cmd, None),
                         "cupti-only": (cmd, {"CUDA_INJECTION64_PATH": cupti}),
                         "torch.profiler": ((profiler or []) + ["--profiler"], None)}[m]
            # torch.profiler's post-processing after the timed steps takes minutes on a 30 s run (H200: 146 s for
            # 18,625 steps): it runs a bounded step count, under its own time limit, and if it is stopped anyway
            # its timed steps were printed first (the claim reads them).
            limit = self.left() - self.reserve_s - 5 if m != "torch.profiler" else \
                min(self.left() - self.reserve_s - 5, plan.profiler_timeout(int(argv[argv.index("--steps") + 1])))
            rec = self.run(f"overhead {w} {m}", argv, f"logs/overhead_{w}_{m.replace('.', '_')}.log", limit, env)
            if m == "torch.profiler":
                rec["bounded_steps"] = int(argv[argv.index("--steps") + 1])
            db = os.path.join(self.out, "tmp", f"{w}.db")
            if os.path.exists(db):
                rec["facts"] = store_facts(db)  # 30 s of full tracing is too big to keep
                rec["facts"]["steps"] = []
                os.remove(db)
            text = read_text(os.path.join(self.out, rec["log"]))
            t = step_times(text)
            done = TIMED_STEPS.search(text)
            steps = int(done.group(1)) if done else int(re.search(r"--steps (\d+)", " ".join(argv)).group(1))
            rec["timed_s"] = round(t[1] * steps / 1e6, 1) if t else 0
            res[m] = rec
            self.save()
            if m == "plain" and done:  # the other modes do the plain run's steps
                n = int(done.group(1))
                if w == "launch_bound":
                    workloads[w] = lb + ["--steps", str(n)]
                else:
                    workloads[w] = self.trainer("--steps", str(n), "--item")
                    profiler = self.trainer("--steps", str(plan.profiler_steps(n, s * 1.02)), "--item")

    def phase_toggle(self):
        """launch_bound under `record --paused` for TOGGLE_SECONDS: closed for TOGGLE_OFF_S, then a recording window
        at record's defaults (`stepscope start`/`stop`) open for TOGGLE_ON_S, in turn. The cost of recording and what
        a closed window leaves, inside one process (the toggled-overhead claim)."""
        target, argv = self.windowed_target(plan.TOGGLE_SECONDS, plan.LB_REPORT_EVERY)
        if self.left() - self.reserve_s < plan.TOGGLE_SECONDS + 30:
            self.say(f"toggle: skipped, {self.left():.0f} s left")
            return
        log = f"logs/toggle_{target}.log"
        db = "stores/toggle.db"
        rec = {"log": log, "store": db, "target": target, "windows": []}
        self.runs["runs"]["toggle"] = rec
        cmd = self.record(db, "--paused") + argv
        end = time.monotonic() + plan.TOGGLE_SECONDS  # the program's --duration ends its steps before this
        p = self.spawn(cmd, log, rec)
        if not p:
            return
        if self.wait_for_line(os.path.join(self.out, log), "window:", p, 60):
            # Another window only while a whole cycle, its switches (as long as the last ones took) and a closed
            # interval after it of at least the trim and a second of window lines still fit.
            switching = 1.0
            while time.monotonic() + plan.TOGGLE_OFF_S + plan.TOGGLE_ON_S + switching + plan.TOGGLE_TRIM_S + 1.0 < end \
                    and p.poll() is None:
                time.sleep(plan.TOGGLE_OFF_S)
                s = self.run("toggle start", [self.ss, "start", str(p.pid)], "logs/toggle_start.log", 20)
                time.sleep(plan.TOGGLE_ON_S)
                e = self.run("toggle stop", [self.ss, "stop", str(p.pid)], "logs/toggle_stop.log", 20)
                # open from start's end to stop's begin; closed before start began and after stop ended
                rec["windows"].append([s["t1_ns"], e["t0_ns"], s["rc"], e["rc"], s["t0_ns"], e["t1_ns"]])
                switching = (s["t1_ns"] - s["t0_ns"] + e["t1_ns"] - e["t0_ns"]) / 1e9
        rec["rc"] = self.wait(p, plan.TOGGLE_SECONDS + 30)
        self.say(f"toggle: exit {rec['rc']}, {len(rec['windows'])} windows")

    def flight_target(self):
        """(name, argv) of the program the flight phase records: launch_bound with a window line every ~0.2 s, as the
        attach phase's; on a CPU rehearsal the trainer."""
        return self.windowed_target(plan.FLIGHT_SECONDS, plan.LB_REPORT_EVERY)

    def phase_flight(self):
        """launch_bound under `record --flight 30s`; `stepscope dump` of record's pid 10 s after its first window; then
        the plain run flight-overhead compares with: the overhead phase's where it printed windows, else one here."""
        target, argv = self.flight_target()
        if self.left() < plan.FLIGHT_SECONDS + 15:
            self.say(f"flight: skipped, {self.left():.0f} s left")
            return
        log = f"logs/flight_{target}.log"
        cmd = self.record("stores/flight.db", "--flight", FLIGHT_WINDOW) + argv  # saves: stores/flight-<time>-<why>.db
        rec = {"argv": cmd, "log": log, "target": target}
        self.runs["runs"]["flight"] = rec
        started = time.time()
        end = time.monotonic() + plan.FLIGHT_SECONDS + plan.FLIGHT_RUN_SLACK_S
        t0 = time.monotonic_ns()
        p = self.spawn(cmd, log, rec)
        if not p:
            return
        if self.wait_for_line(os.path.join(self.out, log), "window:", p, min(60, end - time.monotonic())):
            time.sleep(plan.FLIGHT_DUMP_AFTER_S)
            d = self.run("flight dump", [self.ss, "dump", str(p.pid), "--wait", str(plan.FLIGHT_DUMP_WAIT_S)],
                         "logs/flight_dump.log", min(plan.FLIGHT_DUMP_TIMEOUT_S, end - time.monotonic()))
            rec.update(dump_rc=d["rc"], dump_start_ns=d["t0_ns"], dump_end_ns=d["t1_ns"], dump_s=d["wall_s"],
                       dump_log=d["log"])
            printed = [l.strip() for l in read_text(os.path.join(self.out, d["log"])).splitlines()[1:]
                       if l.strip().endswith(".db")]
            if printed:
                rec["dump_store"] = self.relative(printed[-1])
        rec["rc"] = self.wait(p, max(1, end - time.monotonic()))
        t1 = time.monotonic_ns()
        rec.update(t0_ns=t0, t1_ns=t1, wall_s=round((t1 - t0) / 1e9, 2))
        stores = os.path.join(self.out, "stores")
        rec["saves"] = sorted(f"stores/{n}" for n in os.listdir(stores) if n.startswith("flight-") and n.endswith(".db")
                              and os.path.getmtime(os.path.join(stores, n)) >= started - 1)
        self.say(f"flight: exit {rec['rc']} in {rec['wall_s']:.1f} s; dump exit {rec.get('dump_rc', '-')}, "
                 f"{len(rec['saves'])} saves")
        plain = self.runs["overhead"].get(target, {}).get("plain")
        if plain and plain.get("rc") == 0 and \
                len(windows_of(read_text(os.path.join(self.out, plain["log"])))) >= MIN_FLIGHT_WINDOWS + 2:
            rec["plain"] = f"overhead/{target}/plain"
        elif self.left() < plan.FLIGHT_SECONDS + 10:
            self.say(f"flight plain: skipped, {self.left():.0f} s left")
        else:
            self.runs["runs"]["flight_plain"] = self.run("flight plain", argv, f"logs/flight_plain_{target}.log",
                                                         plan.FLIGHT_SECONDS + 20)
            rec["plain"] = "flight_plain"

    def relative(self, path):
        """path relative to OUT when it is inside OUT (as runs.json names stores), else as it is."""
        rel = os.path.relpath(os.path.abspath(path), self.out)
        return path if rel.startswith("..") else rel

    @staticmethod
    def wait(p, timeout):
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            try:
                return p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                return p.wait()

    @staticmethod
    def wait_for_line(path, prefix, p, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end and p.poll() is None:
            if any(l.startswith(prefix) for l in read_text(path).splitlines()):
                return True
            time.sleep(0.2)
        return False


def side_by_side(jobs):
    """Runs the callables on threads of their own and waits for all (runs whose claims are not times)."""
    threads = [threading.Thread(target=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
