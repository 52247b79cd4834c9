"""Recording windows of this process, driven from Python: `stepscope.start()` / `stop()` / `profile()` and the
trainer callbacks (stepscope.integrations) use them. docs/integrations.md says how to use them.

A window is opened the way the process allows:
- under `stepscope record --paused`: a window of that recording (`start` over the collector's control channel, as
  `stepscope start PID` sends it); the launcher writes its store when the program ends;
- a window already open (under `stepscope record`, or `stepscope attach` recording now): nothing to open, the
  marks go into that recording;
- otherwise in-process: the collector library is loaded into this process (the one `stepscope attach` would
  inject), its control channel started, and `stepscope attach <this pid> -o STORE` run as a child process; with
  the collector already listening it injects nothing and only opens the window; `stop` closes it, and the attach
  process merges the window into the store and exits. Then `stepscope analyze STORE --json` gives the analysis.
The analysis is the CLI's: nothing of it is computed here.
"""

from __future__ import annotations

import atexit
import ctypes
import html
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

__all__ = ["RecordingError", "Window", "Analysis", "Profile", "start", "stop", "profile", "find_cli"]

_LIB_NAME = "libstepscope_collector.so"


class RecordingError(RuntimeError):
    """A window could not be opened or closed, or its store not written or analyzed; the message says why."""


# ---- where the CLI and the collector are -------------------------------------------------------------------

def find_cli(explicit=None):
    """The `stepscope` executable: `explicit`, $STEPSCOPE_CLI, beside this environment's Python (a wheel puts it
    in the scripts folder, which need not be on PATH), then PATH."""
    candidates = [explicit, os.environ.get("STEPSCOPE_CLI")]
    for where in (sysconfig.get_path("scripts"), os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable)):
        if where:
            candidates.append(os.path.join(where, "stepscope"))
    candidates.append(shutil.which("stepscope"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise RecordingError("the stepscope executable was not found (`pip install .` at the root of stepscope's "
                         "repository puts it in this environment; or put it on PATH, or set STEPSCOPE_CLI)")


def _loaded_collector():
    """The path of the collector library when it is mapped into this process (LD_PRELOAD, attach), else None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].rstrip("\n").endswith("/" + _LIB_NAME):
                    return fields[5].rstrip("\n")
    except OSError:
        pass
    return None


def _collector_for(cli):
    """The collector library that goes with `cli`, found as the CLI finds it ($STEPSCOPE_COLLECTOR_LIB, then
    bin/../lib, the build tree's collector/ beside cli/, the same folder)."""
    env = os.environ.get("STEPSCOPE_COLLECTOR_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.realpath(cli))
    for c in (os.path.join(here, "..", "lib", _LIB_NAME), os.path.join(here, "..", "collector", _LIB_NAME),
              os.path.join(here, _LIB_NAME)):
        if os.path.isfile(c):
            return os.path.realpath(c)
    raise RecordingError(f"the collector library {_LIB_NAME} was not found beside {cli} (set STEPSCOPE_COLLECTOR_LIB)")


# ---- the collector's control channel in this process (collector/src/control/control_protocol.h) -------------

def _socket_path():
    return f"/tmp/stepscope-{os.geteuid()}/{os.getpid()}.sock"


def _request(command, options=None, timeout=60.0):
    """One request to this process's collector; its reply line, or None when nobody listens."""
    text = command + "\n" + "".join(f"{k}={v}\n" for k, v in (options or {}).items()) + "\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(_socket_path())
        except OSError:
            return None
        s.sendall(text.encode())
        reply = b""
        while b"\n" not in reply:
            chunk = s.recv(512)
            if not chunk:
                break
            reply += chunk
    finally:
        s.close()
    return reply.decode(errors="replace").split("\n", 1)[0]


def _status():
    """'recording', 'dormant', or None (no collector listening in this process)."""
    reply = _request("status", timeout=10.0)
    if reply is None or not reply.startswith("ok "):
        return None
    return "recording" if reply.split()[1] == "recording" else "dormant"


def _launcher_store():
    """The store a `stepscope record` launcher writes at the program's end when this process runs under one (its
    collector preloaded), else None; and whether it runs --paused (windows opened by `start`)."""
    parts = os.environ.get("STEPSCOPE_PARTS_DIR", "")
    if not parts or _loaded_collector() is None:
        return None, False
    store = parts[: -len(".parts")] if parts.endswith(".parts") else parts
    return store, os.environ.get("STEPSCOPE_PAUSED", "") not in ("", "0")


def _rebind_markers(lib_path):
    """The marker API (stepscope.step(), ...) was imported before the collector was loaded: point it there."""
    for name in (__package__, "stepscope", "_stepscope"):
        module = sys.modules.get(name or "")
        if module is not None and hasattr(module, "_rebind"):
            module._collector_path = lib_path
            module._rebind()


def _wait_for_hooks(timeout=1.0):
    """The collector installs its Python hooks (DataLoader waits, optimizer steps) with a pending call, which the
    main thread runs at its next bytecode: give it the chance before the caller's code runs. Off the main thread
    there is nothing to wait for here (the main thread runs it when it next runs Python): a start() from a worker
    thread waited out the whole second."""
    if threading.current_thread() is not threading.main_thread():
        return False
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        hooks = sys.modules.get("_stepscope._autohook")
        if hooks is not None and getattr(hooks, "_installed", False):
            return True
        time.sleep(0.002)
    return False


def cannot_record(cli=None):
    """Why a window could not open in this process (no stepscope executable, no collector beside it), else None;
    under `stepscope record` or `attach` nothing is needed."""
    try:
        if _status() == "recording" or _launcher_store()[0]:
            return None
        if _loaded_collector() is None:
            _collector_for(_explicit_cli(cli) or find_cli())
        elif cli:
            _explicit_cli(cli)
    except RecordingError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - a check that fails is no reason to stop a training run
        return f"{type(e).__name__}: {e}"
    return None


def _explicit_cli(cli):
    """cli= as given: a path, or a name on PATH ("stepscope"); None when not given."""
    if not cli:
        return None
    found = cli if os.sep in cli else shutil.which(cli)
    if not found or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        raise RecordingError(f"cli={cli}: no such executable (the stepscope command; or leave cli out and let it "
                             f"be found)")
    return os.path.abspath(found)


# ---- one window --------------------------------------------------------------------------------------------

class Window:
    """One recording window of this process. open(), then close() returns the Analysis of the store written (None
    when the store is someone else's to write: `record`, `record --paused`, `attach`).

    output: the store (in-process windows); cpu_hz, wall, no_gpu, gpu_window, step_func, data_wait_func: as
    `stepscope attach`'s options; cli: the stepscope executable (default: find_cli()).

    close() first ends the window's open `stepscope.step()` step (source api) at step_end: a time.monotonic_ns()
    time, "close" (the default: at the close; not in a recording that goes on, mode "external"), or None (no
    mark: the caller ended it). A mark with none before it makes no step, so a window without api marks gets
    none. Only the process that opened the window closes it: in a child forked inside it, close() does nothing
    and returns None."""

    def __init__(self, output, cpu_hz=None, wall=False, no_gpu=False, gpu_window=None, step_func=None,
                 data_wait_func=None, cli=None, analyze=True):
        self.output = os.path.abspath(output)
        self.options = {"cpu_hz": cpu_hz, "wall": wall, "no_gpu": no_gpu, "gpu_window": gpu_window,
                        "step_func": step_func, "data_wait_func": data_wait_func}
        self.cli = cli
        self.analyze = analyze
        self.mode = None  # "in-process", "paused", "external"
        self.pid = None   # the process that opened the window
        self.step_end = "close"
        self.samples = None
        self.attach_output = ""
        self.replaced = False  # the store took the place of a file of that name (attach's summary says so)
        self.make_folder = False  # the trainer callbacks: the store's folder is made when an in-process window opens
        self._attach = None
        self._attach_log = None

    @property
    def is_open(self):
        return self.mode is not None and self.pid == os.getpid()

    def _attach_command(self, cli):
        o = self.options
        # attach expands %p, %h, %r and %% in -o: the store is written where this window looks for it.
        cmd = [cli, "attach", str(os.getpid()), "-o", self.output.replace("%", "%%")]
        if o["cpu_hz"]:
            cmd += ["--cpu-hz", str(int(o["cpu_hz"]))]
        if o["wall"]:
            cmd.append("--wall")
        if o["no_gpu"]:
            cmd.append("--no-gpu")
        if o["gpu_window"]:
            cmd += ["--gpu-window", str(o["gpu_window"])]
        if o["step_func"]:
            cmd += ["--step-func", o["step_func"]]
        if o["data_wait_func"]:
            cmd += ["--data-wait-func", o["data_wait_func"]]
        return cmd

    def open(self):
        if self.is_open:
            return self
        self.pid = os.getpid()
        status = _status()
        store, paused = _launcher_store()
        if status == "recording" or (store and not paused):
            # record, attach, or a window opened by hand: that recording takes the marks and writes the store
            self.mode, self.output = "external", store or ""
            return self
        if paused and status == "dormant":
            reply = _request("start")
            if reply is None or not reply.startswith("ok"):
                raise RecordingError(f"stepscope record --paused: the window did not open: {reply}")
            self.mode, self.output = "paused", store
            _wait_for_hooks()
            return self
        self._open_in_process()
        return self

    def _open_in_process(self):
        cli = _explicit_cli(self.cli) or find_cli()
        self.cli = cli
        lib_path = _loaded_collector()
        if lib_path is None:
            lib_path = _collector_for(cli)
            lib = ctypes.CDLL(lib_path)  # its constructor starts nothing without STEPSCOPE_PARTS_DIR
        else:
            lib = ctypes.CDLL(lib_path, mode=getattr(os, "RTLD_NOLOAD", 4))
        if _status() is None:
            entry = lib.stepscope_collector_attach
            entry.restype = ctypes.c_long
            entry.argtypes = [ctypes.c_char_p]
            why = entry(b"")
            if why:
                raise RecordingError("the collector cannot listen in this process: " +
                                     ctypes.string_at(why).decode(errors="replace"))
        _rebind_markers(lib_path)
        folder = os.path.dirname(self.output)
        if not os.path.isdir(folder) and self.make_folder:
            os.makedirs(folder, exist_ok=True)  # a trainer's output_dir, made only when a store goes there
        if not os.path.isdir(folder):
            raise RecordingError(f"{self.output}: the folder {folder} does not exist")
        self._attach_log = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, STEPSCOPE_COLLECTOR_LIB=lib_path)
        self._attach = subprocess.Popen(self._attach_command(cli), stdin=subprocess.DEVNULL,
                                        stdout=self._attach_log, stderr=subprocess.STDOUT, env=env)
        until = time.monotonic() + 60
        while _status() != "recording":
            if self._attach.poll() is not None:
                raise RecordingError(f"stepscope attach {os.getpid()} failed: {self._attach_text()}")
            if time.monotonic() > until:
                self._attach.kill()
                self._attach.wait()
                raise RecordingError(f"stepscope attach {os.getpid()} did not open a window in 60 s: "
                                     f"{self._attach_text()}")
            time.sleep(0.005)
        self.mode = "in-process"
        _open_windows.add(self)
        _wait_for_hooks()

    def _attach_text(self):
        if self._attach_log is None:
            return ""
        self._attach_log.seek(0)
        return self._attach_log.read().strip()

    def close(self):
        """Closes the window; the Analysis of the store it wrote (in-process), else None."""
        mode, self.mode = self.mode, None
        if self.pid != os.getpid():
            _open_windows.discard(self)
            return None  # a child forked inside the window: the window and its store are the parent's
        if mode is not None and self.step_end is not None:
            from . import step as mark_step, step_at as mark_step_at

            if self.step_end != "close":
                mark_step_at(self.step_end, "api")
            elif mode != "external":  # a recording that goes on: the program's next mark ends the step
                mark_step("api")
        if mode == "paused":
            reply = _request("stop") or ""
            self.samples = _samples_in(reply)
            return None
        if mode != "in-process":
            return None
        _open_windows.discard(self)
        reply = _request("stop") or ""
        self.samples = _samples_in(reply)
        try:
            rc = self._attach.wait(timeout=600)
        except subprocess.TimeoutExpired:
            self._attach.kill()
            self._attach.wait()
            rc = -1
        text = self._attach_text()
        self._attach_log.close()
        self._attach_log, self._attach = None, None
        self.attach_output = "\n".join(l for l in text.splitlines() if "not recorded: --children" not in l)
        self.replaced = "; replaced the file that was there)" in self.attach_output
        _show_warnings(self.attach_output)
        if rc != 0 or not os.path.exists(self.output):
            raise RecordingError(f"stepscope attach did not write {self.output} (exit {rc}): {text}")
        if not self.analyze:
            return None
        return Analysis.load(self.output, cli=self.cli)


_open_windows = set()
_warned = set()


def _show_warnings(text):
    """What the recorder warned of (no CUDA driver: CPU data only; no CUPTI) goes to stderr, as `stepscope record`
    prints it, once a process: the attach runs as a child whose output is otherwise kept, and a GPU user got a
    CPU-only analysis without a word."""
    for line in text.splitlines():
        if line.startswith("stepscope: warning:") and line not in _warned:
            _warned.add(line)
            print(line, file=sys.stderr, flush=True)


@atexit.register
def _close_at_exit():
    """A program that ends with a window open (an exception past the trainer's end hook, no stop()) still gets
    its store, written before it exits; the analysis is left to `stepscope analyze`."""
    for window in list(_open_windows):
        window.analyze = False
        try:
            window.close()
        except RecordingError as e:
            print(f"stepscope: {e}", file=sys.stderr)
        else:
            if window.pid != os.getpid() or not os.path.exists(window.output):
                continue  # a child forked inside the window leaves it alone
            print(f"stepscope: {window.output}: written at exit (the window was still open); "
                  f"`stepscope analyze {window.output}` reads it", file=sys.stderr, flush=True)


def _samples_in(reply):
    for word in reply.split():
        if word.startswith("samples="):
            return int(word[len("samples="):])
    return None


# ---- the analysis ------------------------------------------------------------------------------------------

class Record(dict):
    """A JSON object of the analysis whose keys also read as attributes (finding.rule, step.dur_us)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _records(items):
    return [Record(x) for x in items or []]


class Analysis:
    """`stepscope analyze STORE --json` (the stepscope.analysis/1 object, docs/analysis-json.md), with the parts
    people look at first: summary, steps, findings. In a notebook it shows the HTML report."""

    def __init__(self, path, data, cli):
        self.path = path
        self.data = data
        self.cli = cli
        self.summary = Record(data.get("summary", {}))
        self.steps = _records(data.get("steps"))
        self.findings = _records(data.get("findings"))

    @classmethod
    def load(cls, path, cli=None):
        cli = cli or find_cli()
        r = subprocess.run([cli, "analyze", path, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            raise RecordingError(r.stderr.strip() or f"stepscope analyze {path} failed (exit {r.returncode})")
        return cls(path, json.loads(r.stdout), cli)

    def _report(self, fmt):
        r = subprocess.run([self.cli, "report", "-f", fmt, self.path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RecordingError(r.stderr.strip() or f"stepscope report -f {fmt} {self.path} failed")
        return r.stdout

    def html(self):
        """The self-contained HTML report (`stepscope report -f html`)."""
        return self._report("html")

    def metrics(self):
        """The flat per-run summary (`stepscope report -f metrics`): {name: number}, as mlflow.log_metrics and
        TensorBoard's add_scalar take them."""
        return json.loads(self._report("metrics"))

    def one_line(self):
        """One line: the steps, their median, and each finding with its estimated saving."""
        s = self.summary
        median_ms = float(s.get("host_step_median_us", 0)) / 1e3
        head = f"{int(s.get('steps', 0))} steps ({s.get('step_source', 'none')}), median {median_ms:.1f} ms"
        steps = int(s.get("steps", 0))

        def saving(f):
            # est_savings_us_per_step is per step the finding affects: "52.0 ms/step" over a 44.4 ms median read
            # as a saving larger than the step when it affected one of two.
            # Not "of M": a GPU rule counts only the steps the GPU was traced in (--gpu-window).
            ms = float(f.get("est_savings_us_per_step", 0)) / 1e3
            affected = len(f.get("steps") or [])
            where = f" on {affected} step{'s' if affected != 1 else ''}" if 0 < affected < steps else ""
            return f"~{ms:.1f} ms/step{where}"

        if steps == 0:
            # Not "no findings", which reads as a clean window: nothing marked a step in it.
            advice = s.get("steps_advice") or ""
            found = "no steps in the window, so no per-step findings" + (f" ({advice})" if advice else "")
        elif not self.findings:
            found = "no findings"
        else:
            found = "; ".join(f"{f.get('rule')} ({f.get('severity')}, {saving(f)})" for f in self.findings)
        # A first step left out as warm-up (a window of two or three steps whose first is much the longest) is in
        # no finding: beside "no findings" it is said, so that the window is not read as clean.
        warm = [str(st.get("index")) for st in self.steps if st.get("warmup")]
        if warm and not self.findings:
            found += f" (step {', '.join(warm)} left out as warm-up: `stepscope analyze {self.path}` shows it)"
        return f"{head}: {found} -> {self.path}"

    def __repr__(self):
        return f"<stepscope.Analysis {self.one_line()}>"

    def _repr_html_(self):
        # The report is a whole page with its own styles: an iframe keeps them off the notebook's.
        page = html.escape(self.html(), quote=True)
        return (f'<div><b>stepscope</b>: {html.escape(self.one_line())}</div>'
                f'<iframe srcdoc="{page}" style="width:100%;height:640px;border:1px solid #ccc"></iframe>')


# ---- stepscope.start() / stop() / profile() ----------------------------------------------------------------

_current = None


def _default_output():
    """stepscope-DATE-TIME.db; with -rankN in a job of several ranks (their windows open the same second)."""
    name = time.strftime("stepscope-%Y%m%d-%H%M%S")
    rank = os.environ.get("RANK")
    if rank is not None and int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
        name += f"-rank{rank}"
    return os.path.abspath(name + ".db")


def _refuse_nested(caller):
    """Windows do not nest: one opened in-process by this process is open (under `stepscope record` or `attach`
    a window joins that recording instead, and the marks go there)."""
    for window in _open_windows:
        if window.is_open:
            raise RecordingError(f"{caller}: a window is already open in this process, writing {window.output} "
                                 f"(close it first: windows do not nest)")


def _say_joined(window, asked):
    """A window that joined a recording already running (`stepscope record`, `attach`) writes no store of its
    own: said once, where `profile("run.db")` under `record` went into record's store without a word."""
    if window.mode != "external" or asked is None:
        return
    where = f"`stepscope record` writes {window.output} when the program ends" if window.output else \
        "the running `stepscope attach` writes its store"
    print(f"stepscope: {os.path.abspath(asked)} is not written: this process is being recorded, and its steps go "
          f"into that recording ({where})", file=sys.stderr, flush=True)


def start(output=None, **options):
    """Starts recording this process: `stepscope.stop()` ends it and returns the analysis. output: the store
    (default stepscope-DATE-TIME.db here); options: see Window."""
    global _current
    if _current is not None and _current.is_open:
        raise RecordingError("stepscope.start(): already recording (call stepscope.stop() first)")
    _refuse_nested("stepscope.start()")
    _current = Window(output or _default_output(), **options).open()
    _say_joined(_current, output)
    return _current


def stop():
    """Ends the recording stepscope.start() began: its Analysis (None when the store is written by a `stepscope
    record` launcher at the program's end, and in a child forked inside the window, which leaves it alone)."""
    global _current
    window, _current = _current, None
    if window is None:
        raise RecordingError("stepscope.stop(): nothing was started")
    return window.close()


class Profile:
    """`with stepscope.profile("run.db") as prof: ...` records the block; afterwards `prof.findings`,
    `prof.steps`, `prof.summary` are the analysis's, and a notebook shows `prof` as the HTML report."""

    def __init__(self, output=None, **options):
        self.window = Window(output or _default_output(), **options)
        self.asked = output  # the store asked for by name (said when a running recording takes the window)
        self.analysis = None

    def __enter__(self):
        _refuse_nested("stepscope.profile()")
        self.window.open()
        _say_joined(self.window, self.asked)
        return self

    def __exit__(self, *exc):
        self.analysis = self.window.close()
        return False

    @property
    def path(self):
        return self.window.output

    def __getattr__(self, name):
        if name in ("summary", "steps", "findings", "data", "html", "metrics", "one_line"):
            if self.__dict__.get("analysis") is None:
                raise AttributeError(f"{name}: no analysis (the block has not ended, or the store is written by "
                                     f"`stepscope record` when the program ends)")
            return getattr(self.analysis, name)
        raise AttributeError(name)

    def __repr__(self):
        return repr(self.analysis) if self.analysis is not None else f"<stepscope.Profile {self.path}>"

    def _repr_html_(self):
        return self.analysis._repr_html_() if self.analysis is not None else html.escape(repr(self))


def profile(output=None, **options):
    """A context manager that records its block in this process; see Profile."""
    return Profile(output, **options)
