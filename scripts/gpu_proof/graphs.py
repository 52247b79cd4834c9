"""Claims on CUDA graph replays (issue 49): every node of every replay recorded, each node's capture stack, the cost of
per-node records."""
import os
import statistics

from .common import (ROOT, _columns, _count, _pct, claim, launches_per_step, not_run, read_text, resolve, store_rows,
                     windows_of)
from .overhead import MAX_DEFAULT_WINDOW_OVERHEAD

LB_SOURCE = os.path.join(ROOT, "samples", "cuda", "launch_bound.cu")


def _graph_launch_lines():
    """Lines of launch_bound.cu that launch a kernel (`<<<`): where a captured node's stack should pass."""
    return {i for i, line in enumerate(read_text(LB_SOURCE).splitlines(), 1) if "<<<" in line}


def graph_facts(path):
    """What the graph claims need from a store of launch_bound --graph: each replay's records (kernels, copies and
    memsets of one graph launch: same pid and correlation id, graph_id != 0) and nodes, the graph launches, the
    graphs and nodes the resource callbacks wrote, and for each replayed node the lines of its capture stack."""
    con = store_rows(path)
    try:
        f = {"meta": dict(con.execute("SELECT key, value FROM meta"))}
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        has_node = {t: "graph_node_id" in _columns(con, t) for t in ("kernels", "memcpys", "memsets")}
        parts = []
        for t in ("kernels", "memcpys", "memsets"):
            if t == "kernels" or has_node[t]:
                node = "graph_node_id" if has_node[t] else "0"
                parts.append(f"SELECT pid, correlation, graph_id, {node} AS node FROM {t} WHERE graph_id != 0")
        # One temporary table with an index: the launches' join below scanned the whole union for each launch
        # (20,000 launches × 620,000 records in the H200 proof of 2026-11-30: it never finished).
        con.execute("CREATE TEMP TABLE replay_records AS " + " UNION ALL ".join(parts))
        con.execute("CREATE INDEX temp.replay_records_launch ON replay_records (pid, correlation)")
        records = "SELECT pid, correlation, graph_id, node FROM replay_records"
        per_replay = {}
        for n, distinct in con.execute(f"SELECT count(*), count(DISTINCT node) FROM ({records}) "
                                       f"GROUP BY pid, correlation"):
            key = f"{n}/{distinct}"
            per_replay[key] = per_replay.get(key, 0) + 1
        f["records_per_replay"] = per_replay  # "records/distinct nodes" -> replays
        f["replays"] = sum(per_replay.values())
        f["replay_graph_ids"] = sorted(r[0] for r in con.execute(f"SELECT DISTINCT graph_id FROM ({records})"))
        nodes = [r[0] for r in con.execute(f"SELECT DISTINCT node FROM ({records})")]
        launches = (f"SELECT DISTINCT a.pid, a.correlation FROM api_calls a JOIN strings s ON s.id = a.name "
                    f"WHERE s.value IN ('cudaGraphLaunch', 'cuGraphLaunch')")
        f["graph_launches"] = _count(con, f"SELECT count(*) FROM ({launches})")
        f["launches_without_records"] = _count(
            con, f"SELECT count(*) FROM ({launches}) l WHERE NOT EXISTS (SELECT 1 FROM replay_records r "
                 f"WHERE r.pid = l.pid AND r.correlation = l.correlation)")
        if "graphs" not in tables:
            f.update(graphs=[], captured_nodes={}, nodes={})
            return f
        f["graphs"] = [list(r) for r in con.execute("SELECT graph_id, kind, source_graph_id, stack != 0 FROM graphs")]
        f["captured_nodes"] = {str(g): n for g, n in con.execute(
            "SELECT n.graph_id, count(*) FROM graph_nodes n JOIN graphs g ON g.pid = n.pid AND g.graph_id = n.graph_id "
            "WHERE g.kind = 1 GROUP BY n.graph_id")}
        row = {nid: (src, stack) for nid, src, stack in con.execute(
            "SELECT node_id, source_node_id, stack FROM graph_nodes")}
        frames = {fid: (os.path.basename(file), line) for fid, file, line in con.execute(
            "SELECT f.id, s.value, f.line FROM frames f JOIN strings s ON s.id = f.file")}
        parent = dict(con.execute("SELECT id, parent FROM stacks"))
        frame_of = dict(con.execute("SELECT id, frame FROM stacks"))
        out = {}
        for nid in nodes:
            hops, cur = 0, nid
            while cur in row and not row[cur][1] and row[cur][0] and hops < 16:  # a copy: its source holds the stack
                cur, hops = row[cur][0], hops + 1
            if cur not in row:
                out[str(nid)] = {"resolved": False}
                continue
            lines, node, depth = [], row[cur][1], 0
            while node and depth < 4096:  # leaf first
                fr = frames.get(frame_of.get(node))
                if fr and fr[0] and fr[1]:
                    lines.append(f"{fr[0]}:{fr[1]}")
                node, depth = parent.get(node, 0), depth + 1
            out[str(nid)] = {"resolved": True, "hops": hops, "lines": lines}
        f["nodes"] = out
        return f
    finally:
        con.close()


def _graph_run(runs, name):
    return runs.get("runs", {}).get("graphs", {}).get(name)


def claim_graph_nodes(runs):
    text = "CUDA graph replays per node (`launch_bound --graph`, `--gpu-window all`): every node of every traced replay"
    expected = ("meta gpu.graph_records = nodes; every graph launch has its replay; each replay N records on N nodes, "
                "N = the sample's kernels_per_step; the captured graph's N nodes written")
    r = _graph_run(runs, "nodes")
    if not r:
        return not_run("graph-nodes", text, expected, "no graphs run")
    f = r.get("graph_facts")
    n = launches_per_step(read_text(resolve(runs["_out"], r["log"]))) if r.get("log") else None
    if r.get("rc") != 0 or not f or not n:
        return claim("graph-nodes", text, f"the recorded run failed (exit {r.get('rc')})" if r.get("rc") != 0 else
                     "no store facts or no kernels_per_step line", expected, "FAIL")
    mode = f["meta"].get("gpu.graph_records", "absent")
    whole = f["records_per_replay"].get(f"{n}/{n}", 0)
    others = {k: v for k, v in f["records_per_replay"].items() if k != f"{n}/{n}"}
    captured = f.get("captured_nodes", {})
    parts = [f"gpu.graph_records {mode}", f"{whole} of {f['replays']} replays with {n} records on {n} nodes",
             f"{f['graph_launches']} graph launches, {f['launches_without_records']} without records",
             "captured graphs' nodes " + (", ".join(f"graph {g}: {c}" for g, c in sorted(captured.items())) or "none")]
    if others:
        parts.append("other replays (records/nodes: replays) " +
                     ", ".join(f"{k}: {v}" for k, v in sorted(others.items())[:4]))
    ok = (mode == "nodes" and f["replays"] > 0 and not others and f["launches_without_records"] == 0 and
          list(captured.values()) == [n])
    return claim("graph-nodes", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 replay_graph_ids=f.get("replay_graph_ids"), graphs=f.get("graphs"))


def claim_graph_capture_stacks(runs):
    launch_lines = sorted(_graph_launch_lines())
    text = "each replayed kernel points at the line that captured it (its node's source node's stack)"
    expected = (f"every node of the replays resolves to a stack through launch_bound.cu at a kernel launch line "
                f"({', '.join(map(str, launch_lines))})")
    r = _graph_run(runs, "nodes")
    f = r.get("graph_facts") if r else None
    if not f or not f.get("nodes"):
        return not_run("graph-capture-stacks", text, expected, "no replayed nodes recorded" if r else "no graphs run")
    wanted = {f"launch_bound.cu:{x}" for x in launch_lines}
    unresolved = sorted(k for k, v in f["nodes"].items() if not v["resolved"])
    no_stack = sorted(k for k, v in f["nodes"].items() if v["resolved"] and not v["lines"])
    elsewhere = sorted(k for k, v in f["nodes"].items() if v["resolved"] and v["lines"] and
                       not wanted.intersection(v["lines"]))
    at = {}
    for v in f["nodes"].values():
        for line in v.get("lines", []):
            if line in wanted:
                at[line] = at.get(line, 0) + 1
                break
    by_line = sorted(at.items(), key=lambda x: int(x[0].rsplit(":", 1)[1]))
    parts = [f"{len(f['nodes'])} replayed nodes: " + ", ".join(f"{c} at {l}" for l, c in by_line)]
    if unresolved:
        parts.append(f"{len(unresolved)} without a graph_nodes row (e.g. {unresolved[0]})")
    if no_stack:
        parts.append(f"{len(no_stack)} whose source has no stack")
    if elsewhere:
        first = f["nodes"][elsewhere[0]]["lines"][:3]
        parts.append(f"{len(elsewhere)} through no launch line (e.g. node {elsewhere[0]}: {', '.join(first)})")
    ok = not unresolved and not no_stack and not elsewhere
    return claim("graph-capture-stacks", text, "; ".join(parts), expected, "PASS" if ok else "FAIL")


def _median_window(runs, r):
    """Median `window:` step (µs) of a run, its first two windows left out (warm-up), or None."""
    wins = windows_of(read_text(resolve(runs["_out"], r["log"])))[2:] if r and r.get("rc") == 0 else []
    return statistics.median(w[2] for w in wins) if len(wins) >= 3 else None


def claim_graph_node_cost(runs):
    goal = 100 * MAX_DEFAULT_WINDOW_OVERHEAD
    text = ("the cost of per-node records of CUDA graph replays (`launch_bound --graph`): per replay against one "
            "interval per replay, and as % of the step")
    expected = (f"stated: nodes − graph per replay (median windows, `--gpu-window all`); the default window with "
                f"per-node records ≤ +{goal:g}% over plain (median window)")
    names = ("plain", "graph", "nodes", "default")
    rs = {k: _graph_run(runs, k) for k in names}
    if not rs["plain"]:
        return not_run("graph-node-cost", text, expected, "no graphs run")
    med = {k: _median_window(runs, rs[k]) for k in names}
    if med["plain"] is None:
        return claim("graph-node-cost", text, "plain launch_bound --graph printed too few windows", expected, "FAIL")
    parts = [f"plain {med['plain']:.2f} µs/step"]
    for k in ("graph", "nodes", "default"):
        parts.append(f"{k} {med[k]:.2f} µs ({_pct(med[k], med['plain']):+.1f}%)" if med[k] is not None else
                     f"{k} not measured (exit {rs[k].get('rc') if rs[k] else 'not run'})")
    if med["graph"] is not None and med["nodes"] is not None:
        cost = med["nodes"] - med["graph"]
        parts.append(f"per-node records cost {cost:.2f} µs a replay over one interval, "
                     f"{100 * cost / med['plain']:.1f}% of the plain step")
    ok = med["default"] is not None and _pct(med["default"], med["plain"]) <= goal
    return claim("graph-node-cost", text, "; ".join(parts), expected, "PASS" if ok else "FAIL",
                 median_window_us=med)
