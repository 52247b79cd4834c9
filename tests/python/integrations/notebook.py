"""docs/integrations.md's notebook use, run headless: a notebook whose cells record a loop with stepscope.profile()
and show the result is executed by nbclient in a fresh ipykernel; prints what the cells displayed."""
import json
import sys

import nbformat
from nbclient import NotebookClient

db = sys.argv[1]
cells = [
    "import time, stepscope\n"
    "def loop(steps, wait_ms):\n"
    "    for _ in range(steps):\n"
    "        stepscope.step()\n"
    "        with stepscope.data_wait():\n"
    "            time.sleep(wait_ms / 1e3)\n"
    "        end = time.thread_time_ns() + 4_000_000\n"
    "        while time.thread_time_ns() < end:\n"
    "            pass",
    f"with stepscope.profile({db!r}) as prof:\n"
    "    loop(20, 12)",
    "prof",
    "[(f.rule, f.severity) for f in prof.findings], len(prof.steps)",
]
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
NotebookClient(nb, timeout=120, kernel_name="python3").execute()
shown = nb.cells[2].outputs[0]["data"]
print("html", "text/html" in shown, "<iframe srcdoc=" in shown.get("text/html", ""),
      "stepscope" in shown.get("text/plain", ""))
print("last", nb.cells[3].outputs[0]["data"]["text/plain"])
