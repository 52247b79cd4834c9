#!/usr/bin/env python3
"""torch_fusion: the launch-overhead curve of eager PyTorch vs torch.compile.

A chain of N lightweight elementwise ops (add, sin, mul, cos, relu, exp, sigmoid, ...) on a small tensor,
for N = 1..30. In eager mode every op is its own kernel launch (and its own dispatch through PyTorch), so
the per-call latency grows linearly with N; torch.compile fuses the chain into one kernel and the curve
goes flat. This reproduces the experiment of seed article 001 (eager 13 -> 226 us, static compile
~37-42 us, dynamic ~60-67 us on the author's GPU; break-even near 5-10 ops).

Modes: eager; static (torch.compile(dynamic=False), one fixed shape); dynamic (torch.compile(dynamic=True),
shapes vary call to call). Fusion is not the whole cure: static still launches one kernel per call, and the
compiled function's own host work per call (~39 us on an H200) leaves the GPU ~97% idle, so stepscope rightly
calls it launch-overhead (GPU proofs of 2026-11-26 and -30); the rest of the cure is a CUDA graph
(torch.compile(mode="reduce-overhead")) or more work per call. Runs on CUDA when available, otherwise on CPU (there the "launch" is PyTorch's
per-op dispatch and the fused code is Inductor's C++ loop: the same shape of curve, other numbers).

  python torch_fusion.py                       # full curve, all modes
  python torch_fusion.py --ops 30 --modes eager --repeats 30   # one point: 30 steps, e.g. under `stepscope record`

Each timed batch of calls is one step for stepscope (stepscope.step(), a no-op outside `stepscope record`;
with --nvtx also an NVTX range "step").
Prints per-call latency (us) per chain length, then for each point the step time (a step is one timed batch
of --calls calls) as `time: MODE ops=N (C calls per step): step median ... us, ...` like the CUDA samples, and
checks that every compiled chain computes what eager does.
Exit codes: 0 ok, 1 a compiled result differs from eager, 2 bad arguments or torch missing.
"""
import argparse
import statistics
import sys
import time
import warnings


try:  # the collector provides it under `stepscope record` (or pip install .); a no-op without the collector
    import stepscope
except ImportError:  # run outside stepscope: markers do nothing
    class _NoStepscope:
        @staticmethod
        def step(source="api"):
            pass

        @staticmethod
        def data_wait(source="api"):
            import contextlib
            return contextlib.nullcontext()

    stepscope = _NoStepscope()

# The seed's op pool, cycled for chains longer than 20.
OPS_POOL = [
    "x = x + 0.1", "x = torch.sin(x)", "x = x * 1.1", "x = torch.cos(x)",
    "x = x + 0.2", "x = torch.relu(x)", "x = x - 0.1", "x = torch.exp(x * 0.5)",
    "x = x + 0.3", "x = torch.sigmoid(x)", "x = x * 1.2", "x = torch.sin(x)",
    "x = x + 0.4", "x = torch.cos(x)", "x = x - 0.2", "x = torch.relu(x)",
    "x = x + 0.5", "x = torch.exp(x * 0.4)", "x = x * 1.3", "x = torch.sigmoid(x)",
]
DEFAULT_OPS = [1, 5, 10, 15, 20, 25, 30]
MODES = ("eager", "static", "dynamic")


def make_chain(torch, num_ops):
    """A fresh Python function applying the first num_ops ops of the pool (a new code object each time,
    so every chain length is compiled on its own)."""
    body = "\n".join("    " + OPS_POOL[i % len(OPS_POOL)] for i in range(num_ops))
    src = f"def chain(x):\n{body}\n    return x.sum()\n"
    ns = {}
    exec(compile(src, f"<chain_{num_ops}>", "exec"), {"torch": torch}, ns)
    return ns["chain"]


class Timer:
    """Times a batch of calls: CUDA events on a GPU (as the seed does), perf_counter on CPU."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"

    def time_batch(self, fn, inputs):
        torch = self.torch
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for x in inputs:
                fn(x)
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1000.0 / len(inputs)
        t0 = time.perf_counter()
        for x in inputs:
            fn(x)
        return (time.perf_counter() - t0) * 1e6 / len(inputs)


def per_call_us(timer, fn, inputs, calls, repeats, nvtx):
    """Mean per-call latency of each of `repeats` batches of `calls` calls (one batch is one step)."""
    torch = timer.torch
    for x in inputs[:20]:  # warm-up (and compilation)
        fn(x)
    if timer.cuda:
        torch.cuda.synchronize()
    results = []
    for r in range(repeats):
        batch = [inputs[(r * calls + i) % len(inputs)] for i in range(calls)]
        stepscope.step()
        if nvtx:
            torch.cuda.nvtx.range_push("step")
        results.append(timer.time_batch(fn, batch))
        if nvtx:
            torch.cuda.nvtx.range_pop()
    return results


def time_line(label, step_us):
    """The line every sample prints (samples/cuda/sample_common.cuh): scripts/record-samples.sh reads it."""
    s = sorted(step_us)
    return (f"time: {label}: step median {statistics.median(s):.2f} us, mean {statistics.mean(s):.2f} us, "
            f"min {s[0]:.2f} us, max {s[-1]:.2f} us ({len(s)} samples)")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, nargs="+", default=DEFAULT_OPS, help="chain lengths (1..30)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--calls", type=int, default=100, help="calls per timed batch (default 100, as the seed)")
    p.add_argument("--repeats", type=int, default=3, help="timed batches per point; the median is reported")
    p.add_argument("--shape", default="8x16", help="fixed shape for eager/static (default 8x16, as the seed)")
    p.add_argument("--nvtx", action="store_true", help="wrap each timed batch in an NVTX range named 'step'")
    a = p.parse_args(argv)
    if any(n < 1 or n > 30 for n in a.ops):
        p.error("--ops values must be in 1..30")
    if a.calls < 1 or a.repeats < 1:
        p.error("--calls and --repeats must be >= 1")
    try:
        a.shape = tuple(int(d) for d in a.shape.lower().split("x"))
        assert a.shape and all(d > 0 for d in a.shape)
    except (ValueError, AssertionError):
        p.error(f"--shape: expected e.g. 8x16, got {a.shape!r}")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
        import torch._dynamo
    except ImportError as e:
        print(f"torch_fusion: error: torch is not importable ({e}); run scripts/python-env.sh", file=sys.stderr)
        return 2
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_fusion: error: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    if a.nvtx and device.type != "cuda":
        a.nvtx = False
    warnings.filterwarnings("ignore", message=".*recompile_limit.*")
    warnings.filterwarnings("ignore", message=".*cache_size_limit.*")

    torch.manual_seed(0)
    total = max(300, a.calls * a.repeats)
    # As in the seed: variable shapes ((i % 10) + 4, 16) for eager and dynamic, one fixed shape for static.
    variable = [torch.randn(((i % 10) + 4,) + a.shape[1:], device=device) for i in range(total)]
    fixed = [torch.randn(a.shape, device=device) for _ in range(total)]
    timer = Timer(torch, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch_fusion: device={device} ({name}) torch={torch.__version__} calls={a.calls} repeats={a.repeats}")

    header = ["ops"] + [f"{m}_us" for m in a.modes]
    speedups = [m for m in a.modes if m != "eager"] if "eager" in a.modes else []
    header += [f"{m}_x" for m in speedups]
    print("  ".join(f"{h:>10}" for h in header))
    failed = False
    time_lines = []
    for n in a.ops:
        torch._dynamo.reset()  # every chain length compiles afresh
        chain = make_chain(torch, n)
        row = {}
        for mode in a.modes:
            if mode == "eager":
                fn, inputs = chain, variable
            elif mode == "static":
                fn, inputs = torch.compile(chain, dynamic=False), fixed
            else:
                fn, inputs = torch.compile(chain, dynamic=True), variable
            per_call = per_call_us(timer, fn, inputs, a.calls, a.repeats, a.nvtx)
            row[mode] = statistics.median(per_call)
            time_lines.append(time_line(f"{mode} ops={n} ({a.calls} calls per step)", [us * a.calls for us in per_call]))
            if mode != "eager":  # the fused chain must compute what eager computes
                for x in (inputs[0], inputs[7]):
                    want, got = chain(x), fn(x)
                    if not torch.allclose(want, got, rtol=1e-4, atol=1e-4):
                        print(f"torch_fusion: ops={n} {mode}: compiled result {got.item()} != eager {want.item()}",
                              file=sys.stderr)
                        failed = True
        cells = [f"{n:>10d}"] + [f"{row[m]:>10.2f}" for m in a.modes]
        cells += [f"{row['eager'] / row[m]:>9.2f}x" for m in speedups]
        print("  ".join(cells), flush=True)
    stepscope.step()  # closes the last timed batch
    for line in time_lines:
        print(line)
    print("verification: " + ("FAIL" if failed else "PASS") + " (compiled chains match eager)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
