#!/usr/bin/env python3
"""Independent computation of the acceptance figures the analyzer tests check, straight from the trace JSON
(plain json/gzip, no stepscope code). Run: python3 independent_figures.py TRACES_DIR > expected.json

data_wait_share: union of `enumerate(DataLoader)#...__next__` ranges inside ProfilerStep# windows over the
summed step time. gpu_busy_share: union of GPU kernels/copies/memsets inside the step windows over summed step
time. Gap figures are over the GPU activity span: time in gaps between consecutive GPU work, by gap length.
"""
import gzip
import json
import sys

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def load(path):
    with gzip.open(path) as f:
        d = json.load(f)
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
    return out


if __name__ == "__main__":
    root = sys.argv[1]
    names = ["kineto/resnet50_num_workers_0.json.gz", "kineto/resnet50_num_workers_4.json.gz",
             "hta/v100_resnet_gpu_bound_ns.json.gz", "hta/a100_rank0_many_small_kernels.json.gz",
             "tracelens/b200_eager.json.gz", "tracelens/h100_bert_small_inference.json.gz"]
    json.dump({n: figures(root + "/" + n) for n in names}, sys.stdout, indent=1, sort_keys=True)
    print()
