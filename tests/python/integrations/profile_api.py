"""stepscope.profile() / start() / stop() in a plain script (no framework): a loop that marks its steps and waits
for input in a with stepscope.data_wait() block. Prints what the returned analyses hold; what a window inside a
window gives; and how a child forked inside a window that exits normally ends (it leaves the window alone)."""
import json
import os
import sys
import tempfile
import time

import stepscope
from stepscope._session import RecordingError

slow_db, fast_db = sys.argv[1], sys.argv[2]
inner_db = os.path.join(os.path.dirname(slow_db), "inner.db")


def work(ms):
    end = time.thread_time_ns() + int(ms * 1e6)
    x = 0
    while time.thread_time_ns() < end:
        x += 1
    return x


def loop(steps, wait_ms):
    for _ in range(steps):  # a mark where each step starts: the window's close ends the last one
        stepscope.step()
        if wait_ms:
            with stepscope.data_wait():
                time.sleep(wait_ms / 1e3)
        work(4)


def nested(how):
    """A window opened inside the open one: refused, in one line."""
    try:
        if how == "profile":
            with stepscope.profile(inner_db) as inner:
                pass
            return f"opened, path {inner.path!r}, analysis {inner.analysis!r}"
        stepscope.start(inner_db)
        return f"opened, stop() gave {stepscope.stop()!r}"
    except RecordingError as e:
        return f"RecordingError: {e}"


def fork_and_exit():
    """A child forked inside the window exits with sys.exit(0): its exit code and everything it wrote."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        return f"{os.waitstatus_to_exitcode(status)} {out.read().decode()!r}"


with stepscope.profile(slow_db) as prof:
    # Before the first mark: outside every step.
    print("nested_profile", nested("profile"))
    print("nested_start", nested("start"))
    print("fork_profile", fork_and_exit())
    loop(20, 12)
print("profile", len(prof.steps), prof.summary.step_source, json.dumps([[f.rule, f.severity] for f in prof.findings]))
print("inner", os.path.exists(inner_db))
html = prof._repr_html_()
print("html", html.startswith("<div><b>stepscope</b>"), "<iframe srcdoc=" in html, len(html))
print("metrics", json.dumps(prof.metrics()))
print("line", prof.one_line())

stepscope.start(fast_db)
print("fork_start", fork_and_exit())
loop(10, 0)
analysis = stepscope.stop()
print("start_stop", len(analysis.steps), analysis.summary.step_source, json.dumps([f.rule for f in analysis.findings]))
print("repr", repr(analysis))

# The one-line form of an analysis: a saving per affected step says on how many of the steps; a first step left out
# as warm-up is said, so that "no findings" is not read as a clean window.
from stepscope._session import Analysis, cannot_record  # noqa: E402
from stepscope.integrations import StepWindows  # noqa: E402

summary = {"steps": 2, "step_source": "api", "host_step_median_us": 44400}
partial = Analysis("w.db", {"summary": summary, "steps": [{"index": 0}, {"index": 1}],
                            "findings": [{"rule": "input-bound", "severity": "high",
                                          "est_savings_us_per_step": 51962, "steps": [0]}]}, cli="stepscope")
print("one_line_partial", partial.one_line())
warm = Analysis("w.db", {"summary": summary, "steps": [{"index": 0, "warmup": True}, {"index": 1}],
                         "findings": []}, cli="stepscope")
print("one_line_warm", warm.one_line())
try:
    StepWindows("a:b")
except ValueError as e:
    print("steps_error", e)
# Mistyped windows and options are one ValueError naming them, when the callback is made (steps=100 was a
# TypeError "'int' object is not subscriptable"; cpu_hz="fast" failed at the first window, hours in).
from stepscope.integrations import _record_options  # noqa: E402

for name, make in (("int", lambda: StepWindows(100)), ("short", lambda: StepWindows((5,))),
                   ("every", lambda: StepWindows(every=10)), ("hz", lambda: _record_options({"cpu_hz": "fast"})),
                   ("length", lambda: StepWindows("5:9", length=4)), ("length_alone", lambda: StepWindows(length=4))):
    try:
        make()
        print("bad_" + name, "accepted")
    except ValueError as e:
        print("bad_" + name, e)
empty = Analysis("w.db", {"summary": {"steps": 0, "step_source": "none", "host_step_median_us": 0,
                                      "steps_advice": "mark steps with stepscope.step()"}, "steps": [],
                          "findings": []}, cli="stepscope")
print("one_line_empty", empty.one_line())
print("cannot_record", cannot_record("/nonexistent/stepscope"))
# cli= as a name on PATH is found there; a window that cannot open inside a trainer's callback is said, never raised.
os.environ["PATH"] = os.path.dirname(os.environ["STEPSCOPE_CLI"]) + os.pathsep + os.environ.get("PATH", "")
print("cannot_record_name", cannot_record("stepscope"))
from stepscope.integrations import _Recorder  # noqa: E402

said = []
rec = _Recorder(os.path.join(os.path.dirname(slow_db), "never.db"), StepWindows("1:3"), said.append,
                {"cpu_hz": "x"})
for i in range(4):
    rec.before_step(i)
    rec.after_step()
rec.end()
print("recorder_said", said)
