#!/usr/bin/env python3
"""Checks the collector's stack scan (docs/collector.md, "Code without unwind tables") against oneDNN's own JIT
kernels, an account of those frames independent of the scan. Record with both

    ONEDNN_JIT_DUMP=1 STEPSCOPE_SCAN_TRACE=1 stepscope record -o x.db -- python trainer.py 2> trace.txt

(oneDNN writes each kernel it generates to dnnl_dump_*.bin in the working directory). For every scanned frame
whose code lies in a dumped kernel (found by the 24 bytes at its PC), the kernel's instructions from its start
to that PC give how far below the return address the stack pointer is (its pushes and `sub $n, %rsp`), and
whether rbp was pushed (where) or left alone: the scan's slot and, where the caller's rule needed it, the rbp it
chose must agree.

    scan_vs_jit_dumps.py TRACE DUMP_DIR     # prints the counts; exit 1 if any scanned frame disagrees
"""
import collections
import glob
import os
import re
import subprocess
import sys

CALLEE = re.compile(r"stepscope scan: callee (0x[0-9a-f]+) code ([0-9a-f]*) slot \+(\d+) ra ")
FP = re.compile(r"stepscope scan: fp (interrupted|\+(\d+)|none)")
INSTR = re.compile(r"\n\s*([0-9a-f]+):\t(?:[0-9a-f]{2} )+\s*\t([^\n]*)")
SUB_RSP = re.compile(r"sub\s+\$0x([0-9a-f]+),%rsp$")
ADD_RSP = re.compile(r"add\s+\$0x([0-9a-f]+),%rsp$")


def instructions(path, cache={}):
    if path not in cache:
        out = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", path], capture_output=True,
                             text=True, check=True).stdout
        cache[path] = [(int(m.group(1), 16), m.group(2).strip()) for m in INSTR.finditer(out)]
    return cache[path]


def frame_at(path, offset):
    """(bytes between rsp and the return address, rbp's slot below the return address or None, rbp changed
    without a push) at `offset`, by the instructions before it; None where rsp is set another way."""
    depth, rbp_pushed_at, rbp_changed = 0, None, False
    for at, ins in instructions(path):
        if at >= offset:
            return (depth, rbp_pushed_at, rbp_changed) if at == offset else None
        op = ins.split()[0] if ins else ""
        if op == "push":
            depth += 8
            if ins.endswith("%rbp") and rbp_pushed_at is None:
                rbp_pushed_at = depth
        elif op == "pop":
            depth -= 8
        elif SUB_RSP.match(ins):
            depth += int(SUB_RSP.match(ins).group(1), 16)
        elif ADD_RSP.match(ins):
            depth -= int(ADD_RSP.match(ins).group(1), 16)
        elif ins.endswith(",%rsp") and not op.startswith(("cmp", "test")):
            return None
        elif ins.endswith((",%rbp", ",%ebp")) and not op.startswith(("cmp", "test")):
            rbp_changed = True
    return None


def main():
    trace, dump_dir = sys.argv[1], sys.argv[2]
    dumps = {p: open(p, "rb").read() for p in glob.glob(os.path.join(dump_dir, "dnnl_dump_*.bin"))}
    lines = open(trace, errors="replace").read().splitlines()
    counts = collections.Counter()
    bad = []
    for i, line in enumerate(lines):
        m = CALLEE.search(line)
        if not m:
            continue
        code, slot = bytes.fromhex(m.group(2)), int(m.group(3))
        hits = [(p, b.find(code)) for p, b in dumps.items() if code and code in b]
        if not hits:
            counts["frames not in a dumped kernel"] += 1
            continue
        frames = {frame_at(p, o) for p, o in hits}
        if len(frames) != 1 or None in frames:
            counts["frames whose kernel offset is ambiguous"] += 1
            continue
        depth, rbp_at, rbp_changed = frames.pop()
        counts["slot agrees" if depth == slot else "SLOT DISAGREES"] += 1
        if depth != slot:
            bad.append(f"{m.group(1)}: slot +{slot}, kernel says +{depth}")
        fp = next((FP.search(l) for l in lines[i + 1:i + 3] if FP.search(l)), None)
        if not fp or fp.group(1) == "none":
            continue
        # The caller's rbp is still in rbp until the kernel changes it, and in its pushed copy once pushed.
        expected = ({"interrupted"} if not rbp_changed else set()) | ({depth - rbp_at} if rbp_at is not None else set())
        chosen = "interrupted" if fp.group(1) == "interrupted" else int(fp.group(2))
        counts["rbp agrees" if chosen in expected else "RBP DISAGREES"] += 1
        if chosen not in expected:
            bad.append(f"{m.group(1)}: rbp from {chosen}, kernel says {sorted(map(str, expected))}")
    for k, v in sorted(counts.items()):
        print(f"{v:8d}  {k}")
    for b in bad[:20]:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
