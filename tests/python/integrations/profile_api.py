"""stepscope.profile() / start() / stop() in a plain script (no framework): a loop that marks its steps and waits
for input in a with stepscope.data_wait() block. Prints what the returned analyses hold."""
import json
import sys
import time

import stepscope

slow_db, fast_db = sys.argv[1], sys.argv[2]


def work(ms):
    end = time.thread_time_ns() + int(ms * 1e6)
    x = 0
    while time.thread_time_ns() < end:
        x += 1
    return x


def loop(steps, wait_ms):
    for _ in range(steps + 1):  # the last mark closes the last step
        stepscope.step()
        if wait_ms:
            with stepscope.data_wait():
                time.sleep(wait_ms / 1e3)
        work(4)


with stepscope.profile(slow_db) as prof:
    loop(20, 12)
print("profile", len(prof.steps), prof.summary.step_source, json.dumps([[f.rule, f.severity] for f in prof.findings]))
html = prof._repr_html_()
print("html", html.startswith("<div><b>stepscope</b>"), "<iframe srcdoc=" in html, len(html))
print("metrics", json.dumps(prof.metrics()))
print("line", prof.one_line())

stepscope.start(fast_db)
loop(10, 0)
analysis = stepscope.stop()
print("start_stop", len(analysis.steps), analysis.summary.step_source, json.dumps([f.rule for f in analysis.findings]))
print("repr", repr(analysis))
