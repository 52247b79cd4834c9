"""What `check` reads from the stores the runs name: counts, thread checks, blocking-call stacks, steps, GPU windows
and their launches, meta."""
import os
import sqlite3

from .common import _columns, _count, read_variants, resolve, store_rows

GPU_TABLES = ("kernels", "api_calls", "syncs", "memcpys", "memsets", "packed_kernels", "packed_api_calls")


def gpu_trace_bytes(path):
    """Bytes of the GPU trace's tables and their indexes in the store as written (SQLite's dbstat; packed or rows),
    or None where dbstat is missing: the CPU samples' stack trie is no cost of API tracing."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {n: t for n, t in con.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')")}
        return sum(size for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
                   if tables.get(name) in GPU_TABLES)
    except sqlite3.Error:
        return None
    finally:
        con.close()


def store_facts(path):
    """What the claims need from one store: counts, thread checks, blocking-call stacks, steps, windows, meta."""
    con = store_rows(path)
    try:
        f = {"path": path, "bytes": os.path.getsize(path)}
        f["meta"] = dict(con.execute("SELECT key, value FROM meta"))
        f["kernels"] = _count(con, "SELECT count(*) FROM kernels")
        f["api_rows"] = _count(con, "SELECT count(*) FROM api_calls")
        f["sync_rows"] = _count(con, "SELECT count(*) FROM syncs")
        f["samples"] = _count(con, "SELECT count(*) FROM samples")
        f["gpu_bytes"] = gpu_trace_bytes(path)
        threads = set(con.execute("SELECT pid, tid FROM threads"))
        sampled = set(con.execute("SELECT DISTINCT pid, tid FROM samples"))
        # CUDA rows on their OS thread: the (pid, tid) of every API and sync row is a thread the samples know.
        checked = not_in_threads = unsampled = 0
        examples = []
        for table in ("api_calls", "syncs"):
            for pid, tid, n in con.execute(f"SELECT pid, tid, count(*) FROM {table} GROUP BY pid, tid"):
                checked += n
                bad = False
                if (pid, tid) not in threads:
                    not_in_threads += n
                    bad = True
                elif (pid, tid) not in sampled:
                    unsampled += n
                    bad = True
                if bad and len(examples) < 4:
                    examples.append(f"{table} pid {pid} tid {tid}: {n} rows")
        f["thread_rows_checked"] = checked
        f["thread_rows_not_in_threads"] = not_in_threads
        f["thread_rows_unsampled"] = unsampled
        f["thread_examples"] = examples
        f["steps"] = [list(r) for r in con.execute("SELECT start_ns, end_ns FROM steps ORDER BY start_ns")]
        f["gpu_windows"] = ([list(r) for r in con.execute("SELECT start_ns, end_ns FROM gpu_windows ORDER BY 1")]
                            if "gpu_windows" in {r[0] for r in con.execute(
                                "SELECT name FROM sqlite_master WHERE type='table'")} else [])
        f["kernel_span"] = list(con.execute("SELECT min(start_ns), max(end_ns) FROM kernels").fetchone())
        f["blocking"] = _blocking_stacks(con)
        f["window_launches"] = _window_launches(con, f["gpu_windows"])
        f["shared_launch_ids"] = shared_launch_ids(con)
        return f
    finally:
        con.close()


def shared_launch_ids(con):
    """Kernels (CUDA-graph replays aside) whose (pid, correlation id) another kernel has too."""
    not_graph = " AND graph_id = 0" if "graph_id" in _columns(con, "kernels") else ""
    return _count(con, f"SELECT coalesce(sum(n), 0) FROM (SELECT count(*) AS n FROM kernels WHERE correlation != 0"
                       f"{not_graph} GROUP BY pid, correlation HAVING n > 1)")


def _blocking_stacks(con):
    """API rows with a stack (captured at blocking calls): how many, and their innermost Python file:line."""
    if "stack" not in _columns(con, "api_calls"):
        return {"rows_with_stack": 0, "python_lines": {}, "without_python": 0, "column": False}
    frames = {}
    for fid, kind, file, line in con.execute(
            "SELECT f.id, f.kind, s.value, f.line FROM frames f JOIN strings s ON s.id = f.file"):
        frames[fid] = (kind, file, line)
    parent = dict(con.execute("SELECT id, parent FROM stacks"))
    frame_of = dict(con.execute("SELECT id, frame FROM stacks"))
    innermost_python = {}
    lines, without = {}, 0
    rows = 0
    for stack, n in con.execute("SELECT stack, count(*) FROM api_calls WHERE stack != 0 GROUP BY stack"):
        rows += n
        if stack not in innermost_python:
            found, node, hops = None, stack, 0
            while node and hops < 4096:  # leaf first: the first Python frame met is the innermost
                fr = frames.get(frame_of.get(node))
                if fr and fr[0] == 1:
                    found = f"{os.path.basename(fr[1])}:{fr[2]}"
                    break
                node, hops = parent.get(node, 0), hops + 1
            innermost_python[stack] = found
        where = innermost_python[stack]
        if where:
            lines[where] = lines.get(where, 0) + n
        else:
            without += n
    return {"rows_with_stack": rows, "python_lines": lines, "without_python": without, "column": True}


# A window's kernels: those that start inside it or up to this long after it closed (the GPU runs behind the host:
# ~20 ms on launch_bound), and before the next window opens. A kernel between two windows, launched while CUPTI
# re-attached and before the next window opened (the fifth GPU proof's `paused` store: 2 kernels 3 s after
# window 2, 0.5 ms before window 3), belongs to neither.
WINDOW_GPU_LAG_NS = 1_000_000_000


def _window_launches(con, windows):
    """Per GPU window (the whole run when there are none): [kernels not replayed from a CUDA graph, those of them
    whose launch API row — same process and correlation id, made inside the window — is in the store]."""
    not_graph = " AND k.graph_id = 0" if "graph_id" in _columns(con, "kernels") else ""
    spans = windows or [[None, None]]
    out = []
    for i, (ws, we) in enumerate(spans):
        if ws is None:
            k_where, a_where = "1", "1"
        else:
            nxt = spans[i + 1][0] if i + 1 < len(spans) else None
            until = int(we) + WINDOW_GPU_LAG_NS if nxt is None else min(int(we) + WINDOW_GPU_LAG_NS, int(nxt))
            k_where = f"k.start_ns >= {int(ws)} AND k.start_ns < {until}"
            a_where = f"a.start_ns BETWEEN {int(ws)} AND {int(we)}"
        n, joined = con.execute(
            f"SELECT count(*), coalesce(sum(EXISTS(SELECT 1 FROM api_calls a WHERE a.correlation = k.correlation "
            f"AND a.pid = k.pid AND {a_where})), 0) FROM kernels k WHERE {k_where}{not_graph}").fetchone()
        out.append([n, joined])
    return out


def all_store_facts(runs, out):
    """Facts of every store the runs name: kept stores are read now, deleted ones were read by `run`."""
    facts = {}
    for name, r in iter_runs(runs):
        if r.get("facts"):
            facts[name] = r["facts"]
        elif r.get("store") and os.path.exists(resolve(out, r["store"])):
            facts[name] = store_facts(resolve(out, r["store"]))
        for i, s in enumerate(r.get("stores", [])):
            if os.path.exists(resolve(out, s)):
                facts[f"{name}[{i}]"] = store_facts(resolve(out, s))
    samples_dir = resolve(out, runs.get("samples_dir", "samples"))
    for v in read_variants():
        db = os.path.join(samples_dir, v["name"] + ".db")
        if os.path.exists(db):
            facts[f"samples/{v['name']}"] = store_facts(db)
    return facts


def iter_runs(runs):
    for name, r in runs.get("runs", {}).items():
        yield name, r
    for w, modes in runs.get("overhead", {}).items():
        for m, r in modes.items():
            yield f"overhead/{w}/{m}", r
