"""`stepscope mcp`: a Model Context Protocol server over stdio, so an assistant can read a profile.

    pip install 'stepscope[mcp]'      # the official MCP Python SDK (`mcp` on PyPI), 1.x or 2.x
    stepscope mcp                     # what an MCP client runs (stdio); also: python -m stepscope.mcp_server

Tools (docs/integrations.md): open a store or trace, its findings with evidence, its steps and slow-step
explanations, a diff of two runs, the top kernels and host functions, a read-only SQL query on a store, and a
rule's explanation from docs/rules.md. The C++ binaries stay the engine: every figure comes from `stepscope
analyze --json` / `stepscope diff --format json` (docs/analysis-json.md), never recomputed here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time

from ._session import RecordingError, find_cli

_MAX_ROWS = 200
_cache = {}  # (path, mtime, size) -> the analysis JSON


def _cli():
    return find_cli()


def _analysis(path):
    path = os.path.abspath(os.path.expanduser(path))
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _cache:
        r = subprocess.run([_cli(), "analyze", path, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            raise ValueError(r.stderr.strip() or f"stepscope analyze {path} failed (exit {r.returncode})")
        _cache[key] = json.loads(r.stdout)
    return _cache[key]


def _pick(d, keys):
    return {k: d[k] for k in keys if k in d}


# ---- the tools (plain functions: the SDK reads their signatures and docstrings) ----------------------------

def open_trace(path: str) -> dict:
    """Open a stepscope store (.db) or a trace stepscope imports (Kineto/Chrome JSON, Nsight Systems SQLite) and
    summarize it: steps and where they came from, median step, GPU busy and data-wait shares, and the findings
    (rule, severity, estimated saving per step). Call this first; the other tools take the same path."""
    a = _analysis(path)
    s = a.get("summary", {})
    return {
        "path": os.path.abspath(path),
        "summary": _pick(s, ["steps", "step_source", "step_confidence", "has_gpu", "framework", "kernels",
                             "host_step_median_us", "gpu_step_median_us", "host_runs_ahead", "gpu_busy_share",
                             "data_wait_share", "input_idle_share", "step_time_us", "gpu_window",
                             "gpu_traced_steps", "python_hooks", "steps_advice"]),
        "findings": [_pick(f, ["rule", "severity", "est_savings_us_per_step", "share", "summary"])
                     for f in a.get("findings", [])],
        "slow_steps": a.get("step_outliers", {}).get("slow_count", 0),
    }


def list_findings(path: str, rule: str = "") -> dict:
    """The findings of a store or trace, largest estimated saving first, each with its evidence (the kernels,
    calls, waits and stacks the rule saw), the affected steps, the suggestion and the what-if replay of its cure.
    rule: only this rule (e.g. "input-bound")."""
    out = []
    for f in _analysis(path).get("findings", []):
        if rule and f.get("rule") != rule:
            continue
        g = dict(f)
        g.pop("ranges", None)  # time ranges: long, and what the steps already say
        out.append(g)
    return {"findings": out}


def steps(path: str, first: int = 0, count: int = 50, slow_only: bool = False) -> dict:
    """Per-step breakdown (duration, GPU busy, data wait, launch/sync/host/other idle in µs, the bound) and the
    slow steps, each with the explanation of what grew against the median step. first/count: a slice of the
    steps; slow_only: the slow steps only."""
    a = _analysis(path)
    outliers = a.get("step_outliers", {})
    gpu_time = bool(outliers.get("gpu_time"))  # the host runs ahead: steps and slow steps in the GPU's time
    result = {"median_us": outliers.get("median_us"), "threshold_us": outliers.get("threshold_us"),
              "slow_count": outliers.get("slow_count", 0), "slow": outliers.get("slow", []), "gpu_time": gpu_time}
    if not slow_only:
        rows = a.get("gpu_steps", []) if gpu_time else a.get("steps", [])
        result["total_steps"] = len(rows)
        result["steps"] = rows[max(0, first):max(0, first) + max(0, min(count, 500))]
    return result


def diff_runs(base: str, new: str) -> dict:
    """Compare two runs (stores or traces) step by step: step time and each breakdown part, their distributions
    and the verdict per metric (regression, improvement, unchanged), as `stepscope diff --format json`."""
    paths = [os.path.abspath(os.path.expanduser(p)) for p in (base, new)]
    r = subprocess.run([_cli(), "diff", *paths, "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode not in (0, 1):  # 1: a regression, which is an answer
        raise ValueError(r.stderr.strip() or f"stepscope diff failed (exit {r.returncode})")
    return json.loads(r.stdout)


def top(path: str, what: str = "kernels", limit: int = 20) -> dict:
    """The top GPU kernels by total time (what="kernels": count, total/mean/min/max µs), or the host functions the
    training thread ran while the GPU waited for it — the steps themselves without a GPU (what="functions":
    samples, self and inclusive time in µs)."""
    a = _analysis(path)
    if what == "kernels":
        rows = a.get("top_kernels", [])
    elif what == "functions":
        rows = a.get("idle_host_top", [])
    else:
        raise ValueError('what: "kernels" or "functions"')
    return {what: rows[:max(0, limit)]}


_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_ALLOWED |= {getattr(sqlite3, "SQLITE_RECURSIVE", -1)}


def _authorize(action, *_):
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


_ROWS_KEEP_S = 86400  # rows exports unused this long are removed when the next one is made


def _rows_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "stepscope", "rows")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _rows_of(path):
    """The file to query for `path`: itself, or for a packed store (schema 5 and later: kernels, API calls, samples,
    stacks and, since 6, ranges in compressed blocks) its rows, exported once per version of the file (path, inode,
    size, mtime) into the user's cache (~/.cache/stepscope/rows, 0700; exports unused for a day are removed)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = con.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{path}: {e}") from None
    finally:
        con.close()
    if version < 5:
        return path
    st = os.stat(path)
    key = hashlib.sha256(f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:32]
    d = _rows_dir()
    rows = os.path.join(d, key + ".db")
    if os.path.exists(rows):
        os.utime(rows)
        return rows
    now = time.time()
    for name in os.listdir(d):
        f = os.path.join(d, name)
        try:
            if now - os.stat(f).st_mtime > _ROWS_KEEP_S:
                os.remove(f)
        except OSError:
            pass
    try:
        r = subprocess.run([_cli(), "export", path, "--format", "sqlite", "-o", rows], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise ValueError(f"{path}: exporting its rows took over 600 s") from None
    if r.returncode != 0:
        raise ValueError(r.stderr.strip() or f"{path}: cannot read its rows")
    return rows


def query(path: str, sql: str, limit: int = _MAX_ROWS) -> dict:
    """Run one read-only SQL query (SELECT / WITH ... SELECT) on a stepscope store; its tables are in
    docs/schema.md (samples, stacks, frames, kernels, memcpys, api_calls, ranges, steps, data_waits, findings,
    meta, strings, ...; a packed store is read as its rows). Anything that would write or attach is refused.
    Returns the columns and at most `limit` rows (200 at most)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    con = sqlite3.connect(f"file:{_rows_of(path)}?mode=ro", uri=True)
    try:
        con.set_authorizer(_authorize)  # mode=ro refuses writes; this refuses ATTACH, PRAGMA writes and the rest
        try:
            cur = con.execute(sql)
        except sqlite3.DatabaseError as e:
            if "not authorized" in str(e):
                raise ValueError("refused: only read-only queries (SELECT) may run on a store") from None
            raise ValueError(f"query failed: {e}") from None
        columns = [d[0] for d in cur.description or []]
        rows = cur.fetchmany(max(0, min(limit, _MAX_ROWS)) + 1)
    finally:
        con.close()
    truncated = len(rows) > min(limit, _MAX_ROWS)
    return {"columns": columns, "rows": [list(r) for r in rows[:min(limit, _MAX_ROWS)]], "truncated": truncated}


def _rules_md():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("STEPSCOPE_DOCS", ""), os.path.join(here, "..", "..", "docs"),
                  os.path.join(sys.prefix, "share", "doc", "stepscope")]
    try:
        candidates.append(os.path.join(os.path.dirname(_cli()), "..", "share", "doc", "stepscope"))
    except Exception:
        pass
    for folder in candidates:
        p = os.path.join(folder, "rules.md") if folder else ""
        if p and os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                return f.read()
    raise ValueError("docs/rules.md was not found (set STEPSCOPE_DOCS to stepscope's docs folder)")


def explain_rule(rule: str) -> str:
    """How stepscope decides a finding and estimates its saving: the section of docs/rules.md for a rule id
    (input-bound, launch-overhead, host-compute, small-gemm-loop, sync-stall, pageable-memcpy, no-tensor-cores,
    straggler, exposed-comm) with its thresholds and evidence."""
    text = _rules_md()
    sections = re.split(r"(?m)^(?=#{2,3} )", text)
    for s in sections:
        head = s.split("\n", 1)[0]
        if re.search(r"`" + re.escape(rule) + r"`", head):
            return s.strip()
    names = sorted(set(re.findall(r"(?m)^#{2,3} .*?`([a-z-]+)`", text)))
    raise ValueError(f"no rule {rule!r} in docs/rules.md (rules: {', '.join(names)})")


TOOLS = [open_trace, list_findings, steps, diff_runs, top, query, explain_rule]


def _reported(fn, tool_error):
    """The tool, its ValueErrors (bad input, a refused query) and RecordingErrors (no stepscope executable)
    raised as the SDK's ToolError: the SDK passes that message to the client, where any other exception reads only
    "Error executing tool"."""

    @functools.wraps(fn)
    def tool(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, RecordingError) as e:  # RecordingError: no stepscope executable found, and why
            raise tool_error(str(e)) from None

    return tool


def make_server():
    try:
        from mcp.server.mcpserver import MCPServer as Server  # SDK 2.x
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        from mcp.server.fastmcp import FastMCP as Server  # SDK 1.x
        from mcp.server.fastmcp.exceptions import ToolError
    server = Server("stepscope", instructions="stepscope: read training-step profiles (stores and traces). "
                                              "Start with open_trace(path).")
    for fn in TOOLS:
        server.tool()(_reported(fn, ToolError))
    return server


def main():
    try:
        server = make_server()
    except ImportError:
        print(f"stepscope mcp: needs the MCP Python SDK, which {sys.executable} cannot import: pip install "
              f"'stepscope[mcp]' (or pip install mcp) there, or point STEPSCOPE_PYTHON at a Python that has it",
              file=sys.stderr)
        return 2
    server.run()  # stdio
    return 0


if __name__ == "__main__":
    sys.exit(main())
