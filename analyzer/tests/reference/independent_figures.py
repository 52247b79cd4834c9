#!/usr/bin/env python3
"""Independent computation of the acceptance figures the analyzer tests check, straight from the trace JSON
(plain json/gzip, no stepscope code). Run: python3 independent_figures.py TRACES_DIR > expected.json

data_wait_share: union of `enumerate(DataLoader)#...__next__` ranges inside ProfilerStep# windows over the
summed step time. gpu_busy_share: union of GPU kernels/copies/memsets inside the step windows over summed step
time. Gap figures are over the GPU activity span: time in gaps between consecutive GPU work, by gap length.
kernel_type_us and launch_*: HTA's kernel-type breakdown and launch statistics (their definitions, written
anew here from HTA's documentation and regular expressions, over the whole trace in exact µs).
"""
import decimal
import gzip
import json
import re
import sys

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def load(path, exact=False):
    # exact: timestamps as decimals — ns-resolution traces carry 19 significant digits, more than a double holds.
    with gzip.open(path) as f:
        d = json.load(f, parse_float=decimal.Decimal) if exact else json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def union(iv):
    out = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(pieces, a, b):
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in pieces)


def figures(path):
    ev = [e for e in load(path) if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") != "gpu_user_annotation")
    dl = union((e["ts"], e["ts"] + e["dur"]) for e in ev
               if str(e.get("name", "")).startswith("enumerate(DataLoader)") and "__next__" in e["name"])
    gpu_ev = [e for e in ev if e.get("cat") in GPU_CATS]
    gpu = union((e["ts"], e["ts"] + e["dur"]) for e in gpu_ev)
    out = {"steps": len(steps), "kernels": sum(1 for e in gpu_ev if e["cat"] in ("kernel", "Kernel"))}
    total = sum(b - a for a, b in steps)
    if total:
        out["data_wait_share"] = sum(overlap(dl, a, b) for a, b in steps) / total
        out["gpu_busy_share"] = sum(overlap(gpu, a, b) for a, b in steps) / total
    if gpu:
        gaps = [gpu[i][0] - gpu[i - 1][1] for i in range(1, len(gpu))]
        idle = sum(gaps)
        out["gpu_idle_us"] = idle
        out["gap_share_10_200us"] = sum(g for g in gaps if 10 <= g <= 200) / idle if idle else 0.0
        out["gpu_busy_us"] = sum(e - s for s, e in gpu)
    # Kernels shorter than their launch call (joined on args.correlation).
    launches = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e["dur"]
    ks = [e for e in gpu_ev if e["cat"] in ("kernel", "Kernel") and e.get("args", {}).get("correlation") in launches]
    if ks:
        out["short_kernel_fraction"] = sum(1 for k in ks if k["dur"] < launches[k["args"]["correlation"]]) / len(ks)
    out.update(hta_figures(path))
    return out


NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
TYPES = ((1, "COMPUTATION"), (2, "COMMUNICATION"), (4, "MEMORY"))


def kernel_type(e):
    if e["cat"] in ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset"):
        return 4
    n = e.get("name", "")
    return 2 if NCCL_KERNEL.match(n) else 4 if MEMORY_KERNEL.match(n) else 1 if not NOT_COMPUTE.match(n) else 0


def hta_figures(path):
    ev = [e for e in load(path, exact=True) if e.get("ph") == "X"]
    gpu_ev = [e for e in ev if e.get("cat") in GPU_CATS]
    zero = decimal.Decimal(0)
    out = {}
    # Kernel types: each type's union; a sweep over all types' edges names every stretch by the types running.
    edges = []
    for bit, _ in TYPES:
        for s, e in union((x["ts"], x["ts"] + x["dur"]) for x in gpu_ev if kernel_type(x) == bit):
            edges += [(s, bit), (e, -bit)]
    edges.sort()
    running, by_mask = 0, {}
    for i, (t, v) in enumerate(edges[:-1]):
        running += v
        if running > 0:
            by_mask[running] = by_mask.get(running, zero) + edges[i + 1][0] - t
    out["kernel_type_us"] = {" overlapping ".join(n for b, n in TYPES if m & b): float(v)
                             for m, v in by_mask.items() if v > 0}
    # Launch statistics: cudaLaunchKernel(ExC), cudaMemcpyAsync, cudaMemsetAsync joined with their GPU work.
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("name") in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
             and "correlation" in e.get("args", {})}
    joined = [(calls[g["args"]["correlation"]], g) for g in gpu_ev if g.get("args", {}).get("correlation") in calls]
    out["launch_count"] = len(joined)
    if joined:
        out["launch_cpu_mean_us"] = float(sum(c["dur"] for c, _ in joined) / len(joined))
        out["launch_gpu_mean_us"] = float(sum(g["dur"] for _, g in joined) / len(joined))
        out["launch_delay_mean_us"] = float(sum(max(zero, g["ts"] - c["ts"] - c["dur"]) for c, g in joined) / len(joined))
    return out


if __name__ == "__main__":
    root = sys.argv[1]
    names = ["kineto/resnet50_num_workers_0.json.gz", "kineto/resnet50_num_workers_4.json.gz",
             "hta/v100_resnet_gpu_bound_ns.json.gz", "hta/a100_rank0_many_small_kernels.json.gz",
             "tracelens/b200_eager.json.gz", "tracelens/h100_bert_small_inference.json.gz",
             "hta/trace_diff_test_v100.json.gz", "hta/gpu_user_annotation_steps.json.gz"]
    json.dump({n: figures(root + "/" + n) for n in names}, sys.stdout, indent=1, sort_keys=True)
    print()
