#!/usr/bin/env python3
"""The PyTorch workloads of bench/gpu_overhead: many small launches per step, as eager PyTorch makes them.

  chain   an eager chain of --ops small elementwise ops on a --elements tensor (one kernel each, plus a sum)
  train   a small training loop: a 4-layer MLP, batch 64, cross-entropy, Adam (forward, backward, update)

Each step is marked with stepscope.step() (a no-op outside `stepscope record`: GPU windows switch at steps).
`--item` reads the loss with `.item()` every step (the sync stall of logging a loss), `--duration S` ends the
timed loop after S seconds, `--report-every N` prints `window: end_ns=T steps=N mean_us=X` every N steps (T on
CLOCK_MONOTONIC, the store's clock; the GPU is synchronized at each report), for the attach checks of
scripts/gpu_proof.py. At the end it prints `memory: peak rss N KiB` (the process's own, getrusage).
Step time comes from CUDA events at step boundaries (no synchronization in the loop; wall time on CPU) and is
printed as the samples print it:
  time: WORKLOAD: step median ... us, mean ... us, min ... us, max ... us (N samples)
plus `steps: timed T total S` (warm-up included), from which the bench gets launches per step. `--profiler`
runs every step under torch.profiler (CPU and CUDA activities), the peer the bench compares with.
Exit codes: 0 ok, 1 the loss did not fall (train), 2 bad arguments or torch missing.
"""
import argparse
import resource
import statistics
import sys
import time

try:  # provided by the collector under `stepscope record` (or pip install .)
    import stepscope
except ImportError:
    class _NoStepscope:
        @staticmethod
        def step(source="api"):
            pass

    stepscope = _NoStepscope()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=["chain", "train"])
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: chain 2000, train 500)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    p.add_argument("--ops", type=int, default=30, help="chain: ops per step (default 30)")
    p.add_argument("--elements", type=int, default=4096, help="chain: tensor elements (default 4096)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    p.add_argument("--profiler", action="store_true", help="run under torch.profiler (CPU + CUDA activities)")
    p.add_argument("--item", action="store_true", help="train: read the loss with .item() every step (a sync)")
    p.add_argument("--duration", type=float, default=0, help="end the timed loop after S seconds (0: no limit)")
    p.add_argument("--report-every", type=int, default=0, help="print a window line every N steps (0: none)")
    p.add_argument("--profile-steps", default="", help="A:B: timed steps A..B-1 under torch.profiler (CPU + CUDA), "
                   "its trace to --profile-out; prints the span (the GPU proof's neighbour claim)")
    p.add_argument("--profile-out", default="", help="--profile-steps: where torch.profiler's JSON trace goes")
    a = p.parse_args(argv)
    if a.steps is None:
        a.steps = 2000 if a.workload == "chain" else 500
    if a.steps < 2 or a.warmup < 0 or a.ops < 1 or a.elements < 1 or a.duration < 0 or a.report_every < 0:
        p.error("need --steps >= 2, --warmup >= 0, --ops >= 1, --elements >= 1, --duration >= 0, --report-every >= 0")
    return a


def make_step(torch, a, device):
    """Returns (step function, final check) for the workload."""
    if a.workload == "chain":
        x = torch.rand(a.elements, device=device)
        ops = [torch.sin, torch.cos, torch.relu, torch.sigmoid, torch.tanh, lambda t: t * 1.0001,
               lambda t: t + 0.001, torch.exp]

        def step():
            y = x
            for i in range(a.ops):
                y = ops[i % len(ops)](y)
            return y.sum()

        return step, None
    nn = torch.nn
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256),
                          nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(8, 64, 256, generator=g).to(device)
    ys = (xs[:, :, :10].argmax(dim=2)).to(device)  # learnable: the class is the largest of the first 10 inputs
    losses = []
    counter = [0]

    def step():
        i = counter[0] % len(xs)
        counter[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        if a.item:
            losses.append(loss.item())  # sync: .item() (scripts/gpu_proof.py looks for this line in stacks)
        else:
            losses.append(loss.detach())
        return loss

    def check():
        first = statistics.mean(float(v) for v in losses[:8])
        last = statistics.mean(float(v) for v in losses[-8:])
        print(f"loss: first8 {first:.4f} last8 {last:.4f}")
        return last < first

    return step, check


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        print(f"torch_workloads: error: torch is not importable ({e})", file=sys.stderr)
        return 2
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_workloads: error: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    step, check = make_step(torch, a, device)
    cuda = device.type == "cuda"
    print(f"torch_workloads: {a.workload} device={device} torch={torch.__version__} steps={a.steps} "
          f"warmup={a.warmup}" + (f" ops={a.ops} elements={a.elements}" if a.workload == "chain" else "") +
          (" profiler" if a.profiler else ""))

    prof = None
    if a.profiler:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
    for _ in range(a.warmup):
        step()
    marks = []
    deadline = time.monotonic() + a.duration if a.duration else None
    window_start, window_steps = time.perf_counter(), 0
    span = [int(x) for x in a.profile_steps.split(":")] if a.profile_steps else None
    span_prof = None
    for i in range(a.steps):
        if span is not None and i == span[0]:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            span_prof = torch.profiler.profile(activities=acts)
            t_in = time.monotonic_ns()
            span_prof.__enter__()
            t_started = time.monotonic_ns()
        if span is not None and i == span[1] and span_prof is not None:
            if cuda:
                torch.cuda.synchronize()
            t_stop = time.monotonic_ns()
            span_prof.__exit__(None, None, None)
            print(f"profile-span: enter_ns={t_in} started_ns={t_started} stop_ns={t_stop} "
                  f"stopped_ns={time.monotonic_ns()} steps={span[1] - span[0]} from={span[0]}", flush=True)
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)
        else:
            marks.append(time.perf_counter())
        stepscope.step()
        step()
        window_steps += 1
        if a.report_every and window_steps == a.report_every:
            if cuda:
                torch.cuda.synchronize()
            now = time.perf_counter()
            print(f"window: end_ns={time.monotonic_ns()} steps={window_steps} "
                  f"mean_us={(now - window_start) * 1e6 / window_steps:.2f}", flush=True)
            window_start, window_steps = now, 0
        if deadline is not None and len(marks) >= 2 and time.monotonic() >= deadline:
            break
    if cuda:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append(e)
        torch.cuda.synchronize()
        step_us = [marks[i - 1].elapsed_time(marks[i]) * 1e3 for i in range(1, len(marks))]
    else:
        marks.append(time.perf_counter())
        step_us = [(marks[i] - marks[i - 1]) * 1e6 for i in range(1, len(marks))]
    stepscope.step()  # closes the last step
    s = sorted(step_us)
    # The timed steps' lines first: torch.profiler's post-processing of a 30 s run takes minutes (H200: > 150 s).
    print(f"time: {a.workload}: step median {statistics.median(s):.2f} us, mean {statistics.mean(s):.2f} us, "
          f"min {s[0]:.2f} us, max {s[-1]:.2f} us ({len(s)} samples)")
    print(f"steps: timed {len(step_us)} total {len(step_us) + a.warmup}")
    print(f"memory: peak rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} KiB", flush=True)
    if span_prof is not None and a.profile_out:
        span_prof.export_chrome_trace(a.profile_out)
        import json

        with open(a.profile_out) as f:
            events = json.load(f).get("traceEvents", [])
        print(f"profile-trace: {sum(1 for e in events if e.get('cat') == 'kernel')} kernels "
              f"{sum(1 for e in events if str(e.get('name', '')).startswith('ProfilerStep'))} step events "
              f"{len(events)} events", flush=True)
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = sum(1 for ev in prof.events() if getattr(ev, "device_type", None) == torch.autograd.DeviceType.CUDA)
        print(f"profiler: {kernels} device events")
    if check is not None and not check():
        print("verification: FAIL (the loss did not fall)")
        return 1
    print("verification: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
