#!/usr/bin/env python3
"""Reference values for the multi-rank analysis, computed from the raw Kineto JSON without any stepscope code.

For the ranks of one job (one trace per rank, "distributedInfo.rank" names the rank) prints TSV:

  rank  step_ns  compute_ns  comm_ns  exposed_comm_ns  waited_ns  caused_ns

and then one line per job figure:  # straggler RANK  saving_ns N  critical_exposed_ns N

Definitions (the same words as docs/multi-rank.md, computed independently):
* the step: the host "ProfilerStep#N" complete event (traces here hold one step per rank);
* GPU work: "ph": "X" events of category kernel, gpu_memcpy, gpu_memset, clipped to the step;
  communication: kernels whose name contains "nccl" (any case); compute: all other GPU work;
* compute_ns / comm_ns: length of the union of each; exposed_comm_ns: comm union minus compute union;
* collectives are matched across ranks by kind (all-reduce, all-gather, reduce-scatter, all-to-all, send/recv,
  broadcast, reduce) and order within the step; the shortest kernel of a matched collective belongs to the last
  rank to arrive; waited_ns: per rank, sum of (own duration - shortest); caused_ns: for the last rank, sum of
  (second shortest - shortest);
* straggler: the rank with the largest caused_ns; saving: its caused_ns;
* critical_exposed_ns: over matched collectives, the last rank's kernel time not covered by its compute union.

Times: "ts"/"dur" in microseconds, read as exact decimals and rounded half up to integer ns.

Usage: multirank_reference.py TRACE... > multirank_expected.tsv
"""
import decimal
import gzip
import json
import sys

KINDS = [("allreduce", "all-reduce"), ("allgather", "all-gather"), ("reducescatter", "reduce-scatter"),
         ("alltoall", "all-to-all"), ("sendrecv", "send/recv"), ("_send", "send/recv"), ("_recv", "send/recv"),
         ("broadcast", "broadcast"), ("bcast", "broadcast"), ("reduce", "reduce")]


def kind_of(name):
    low = name.lower()
    for key, kind in KINDS:
        if key in low:
            return kind
    return "other"


def union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(u, a, b):
    return sum(max(0, min(b, e) - max(a, s)) for s, e in u)


def ns(us):
    # Exact decimal: epoch-sized µs times 1000 does not fit a double's 53 bits.
    return int((decimal.Decimal(str(us)) * 1000).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


def rank_figures(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        d = json.load(f)
    ev = d["traceEvents"]
    step = next(e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    w0 = ns(step["ts"])
    w1 = w0 + ns(step["dur"])
    compute, comm, calls = [], [], []
    for e in ev:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        s = ns(e["ts"])
        t = s + ns(e.get("dur", 0))
        a, b = max(s, w0), min(t, w1)
        if b <= a:
            continue
        if e["cat"] == "kernel" and "nccl" in e["name"].lower():
            comm.append((a, b))
            calls.append((a, b, kind_of(e["name"])))
        else:
            compute.append((a, b))
    cu, mu = union(compute), union(comm)
    calls.sort()
    fig = {
        "rank": d["distributedInfo"]["rank"],
        "step": w1 - w0,
        "compute": sum(e - s for s, e in cu),
        "comm": sum(e - s for s, e in mu),
        "exposed": sum((e - s) - covered(cu, s, e) for s, e in mu),
        "calls": [(kind, b - a, (b - a) - covered(cu, a, b)) for a, b, kind in calls],
    }
    return fig


def main(paths):
    ranks = sorted((rank_figures(p) for p in paths), key=lambda r: r["rank"])
    n = len(ranks)
    waited = [0] * n
    caused = [0] * n
    critical = 0
    for kind in sorted({c[0] for r in ranks for c in r["calls"]}):
        per = [[c for c in r["calls"] if c[0] == kind] for r in ranks]
        for j in range(min(len(p) for p in per)):
            durs = [p[j][1] for p in per]
            last = min(range(n), key=lambda r: (durs[r], r))
            for r in range(n):
                waited[r] += durs[r] - durs[last]
            caused[last] += min(durs[r] for r in range(n) if r != last) - durs[last]
            critical += per[last][j][2]
    print("rank\tstep_ns\tcompute_ns\tcomm_ns\texposed_comm_ns\twaited_ns\tcaused_ns")
    for i, r in enumerate(ranks):
        print(f"{r['rank']}\t{r['step']}\t{r['compute']}\t{r['comm']}\t{r['exposed']}\t{waited[i]}\t{caused[i]}")
    top = max(range(n), key=lambda r: (caused[r], -r))
    print(f"# straggler {ranks[top]['rank']}\tsaving_ns {caused[top]}\tcritical_exposed_ns {critical}")


if __name__ == "__main__":
    main(sys.argv[1:])
