#!/usr/bin/env python3
"""torch_dataloader: a small CNN trained on a synthetic image dataset whose per-item decode is slow.

With the default `--workers 0` the training loop decodes every item itself: the device waits for each batch
and the step time is the decode time (input-bound). The cure is the DataLoader's own: `--workers N`
(parallel decode in worker processes, prefetching `--prefetch-factor` batches each) and `--pin-memory`
(page-locked batches, copied with non_blocking=True).

  python torch_dataloader.py                              # input-bound
  python torch_dataloader.py --workers 4 --pin-memory     # the cure

Sized to the machine (lines "sizing:"): on a GPU, `--width auto` (the default) widens the model (16, 32, 64, ...
channels) until a step takes 10 ms, so the loader's fixed cost per batch (~0.1-0.3 ms of queues and hand-off)
stays a small share of it; on CPU the 16-channel model is kept. With the default `--decode-ms auto` it then
times a training step (a copy of the model, so the training itself is unchanged) and the decode's own cost per item,
then sets the decode cost so that one batch takes 4/3 of a step to decode: the 4 workers of the cure
(`--size-for-workers`) then deliver a batch every third of a step, while the single-process loader leaves the
device waiting ~57% of the step, on any GPU. A fast GPU gets a fast decode; a GPU step too short
for the decode's fixed overhead is reported as a warning.

The data, the model's initialization and the batch order are seeded, so the printed losses are the same
with and without the cure (on CPU exactly; on a GPU up to nondeterministic kernels): the cure changes the
speed, not the training. Each item is a 3x32x32 image of noise with a bright 8x8 patch whose position is
its class (10 classes), so the loss visibly falls.
Each step is marked with stepscope.step() and its wait for the batch with stepscope.data_wait() (no-ops
outside `stepscope record`), and on a GPU also with NVTX ranges "step" and "next_batch".
Exit codes: 0 ok, 1 the loss did not fall, 2 bad arguments or torch missing.
"""
import argparse
import copy
import statistics
import sys
import time


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

IMAGE = 32
CLASSES = 10
# With --decode-ms auto, one batch's decode is sized to SIZING_MARGIN x step / workers of the cure: the workers
# then deliver a batch every step / SIZING_MARGIN (room for collation, IPC and the pin-memory thread).
SIZING_MARGIN = 3.0
MIN_GPU_STEP_MS = 10.0  # with --width auto on a GPU (see size_width)
MAX_WIDTH = 1024


def decode_item(index, decode_ms, np):
    """The "decode" of item `index`: deterministic content plus CPU work of about decode_ms (standing in for
    JPEG decode and augmentation)."""
    rng = np.random.default_rng(index)
    label = index % CLASSES
    img = rng.random((3, IMAGE, IMAGE), dtype=np.float32) * 0.5
    r, c = divmod(label, 5)
    img[:, r * 16 + 4:r * 16 + 12, c * 6 + 1:c * 6 + 9] += 1.0
    deadline = time.perf_counter() + decode_ms / 1000.0
    work = img.copy()
    while time.perf_counter() < deadline:  # real CPU work, result discarded: a blur pass per round
        work = (work + np.roll(work, 1, axis=1) + np.roll(work, 1, axis=2)) / 3.0
    return img, label


def time_line(label, step_us):
    """The line every sample prints (samples/cuda/sample_common.cuh): scripts/record-samples.sh reads it."""
    s = sorted(step_us)
    return (f"time: {label}: step median {statistics.median(s):.2f} us, mean {statistics.mean(s):.2f} us, "
            f"min {s[0]:.2f} us, max {s[-1]:.2f} us ({len(s)} samples)")


def time_step_ms(torch, a, model, device):
    """Median of 10 synchronized training steps (after 3 warm-up ones) on a copy of `model`: the real training
    is untouched."""
    cuda = device.type == "cuda"
    probe = copy.deepcopy(model)
    opt = torch.optim.SGD(probe.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(a.batch_size, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    y = torch.arange(a.batch_size) % CLASSES
    step_ms = []
    for i in range(13):  # 3 warm-up steps, then 10 timed ones, each from host batch to finished update
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        xd, yd = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss_fn(probe(xd), yd).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if i >= 3:
            step_ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(step_ms)


def size_width(torch, a, device):
    """On a GPU, the narrowest model (channels 16, 32, 64, ...) whose step takes MIN_GPU_STEP_MS: the loader's
    fixed cost per batch (queues, collation hand-off: ~0.1-0.3 ms) must be a small share of the step, or even
    a loader that keeps up shows as a data wait. On CPU the 16-channel model is already slow enough."""
    if device.type != "cuda":
        return 16
    width, step = 16, 0.0
    while True:
        step = time_step_ms(torch, a, make_model(torch, width).to(device), device)
        if step >= MIN_GPU_STEP_MS or width >= MAX_WIDTH:
            break
        width *= 2
    print(f"sizing: model width {width} channels: train step {step:.3f} ms (the narrowest from 16 with a step of "
          f"at least {MIN_GPU_STEP_MS:g} ms, at most {MAX_WIDTH})")
    return width


def size_decode(torch, a, model, device):
    """Times a training step on `device` and the decode's overhead per item; returns the decode ms per item and
    prints the sizing."""
    import numpy as np
    step = time_step_ms(torch, a, model, device)

    def item_ms(decode_ms):  # what one item really costs: the fixed part, plus the blur loop's overshoot
        t = []
        for i in range(20):
            t0 = time.perf_counter()
            decode_item(i, decode_ms, np)
            t.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(t)

    overhead = item_ms(0.0)
    w = a.size_for_workers
    print(f"sizing: train step {step:.3f} ms on {device} (median of 10, synchronized); decode overhead "
          f"{overhead:.3f} ms per item")
    if a.decode_ms == "auto":
        target = w * step / SIZING_MARGIN / a.batch_size  # ms per item
        decode_ms = max(0.0, target - overhead)
        for _ in range(2):  # the blur loop overshoots its deadline by up to one pass: correct for what it costs
            if decode_ms > 0:
                decode_ms = max(0.0, decode_ms - (item_ms(decode_ms) - target))
        how = f"auto: {w} workers deliver a batch every step / {SIZING_MARGIN:g}"
    else:
        decode_ms = a.decode_ms
        how = "--decode-ms"
    batch_ms = a.batch_size * item_ms(decode_ms)
    base_wait = batch_ms / (batch_ms + step)
    period = batch_ms / max(1, a.workers or w)
    print(f"sizing: decode {decode_ms:.3f} ms per item ({how}) -> {batch_ms:.2f} ms per batch of {a.batch_size}; "
          f"expected: workers=0 waits ~{100 * base_wait:.0f}% of the step, {a.workers or w} workers deliver a batch "
          f"every {period:.2f} ms against a {step:.2f} ms step")
    if base_wait < 0.3 or period > step:
        print("sizing: warning: on this machine the loader with and without workers will not differ clearly "
              "(a decode too short for the step, or too long for the workers): set --decode-ms")
    return decode_ms


def build(torch):
    import numpy as np

    class SlowDecodeDataset(torch.utils.data.Dataset):
        def __init__(self, size, decode_ms):
            self.size, self.decode_ms = size, decode_ms

        def __len__(self):
            return self.size

        def __getitem__(self, index):
            img, label = decode_item(index, self.decode_ms, np)
            return torch.from_numpy(img), label

    return SlowDecodeDataset


def make_model(torch, width):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * (IMAGE // 4) ** 2, CLASSES))  # keeps position: the class is where the patch is


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--decode-ms", default="auto",
                   help="CPU cost of decoding one item in ms, or auto (default): sized to this device's step")
    p.add_argument("--width", default="auto",
                   help="channels of the first conv layer, or auto (default): 16 on CPU, on a GPU the narrowest "
                        f"power of two from 16 whose step takes {MIN_GPU_STEP_MS:g} ms")
    p.add_argument("--size-for-workers", type=int, default=4,
                   help="with --decode-ms auto: the workers the decode is sized for (default 4, the documented cure)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (cure: > 0)")
    p.add_argument("--pin-memory", action="store_true", help="DataLoader pin_memory + non_blocking copies (cure)")
    p.add_argument("--prefetch-factor", type=int, default=None, help="batches prefetched per worker (workers > 0)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.decode_ms != "auto":
        try:
            a.decode_ms = float(a.decode_ms)
        except ValueError:
            p.error(f"--decode-ms: expected milliseconds or auto, got {a.decode_ms!r}")
    if a.width != "auto":
        try:
            a.width = int(a.width)
            assert 1 <= a.width <= 4096
        except (ValueError, AssertionError):
            p.error(f"--width: expected 1..4096 or auto, got {a.width!r}")
    if a.steps < 2 or a.batch_size < 1 or a.workers < 0 or (a.decode_ms != "auto" and a.decode_ms < 0):
        p.error("need --steps >= 2, --batch-size >= 1, --workers >= 0, --decode-ms >= 0")
    if a.size_for_workers < 1:
        p.error("--size-for-workers must be >= 1")
    if a.prefetch_factor is not None and (a.workers == 0 or a.prefetch_factor < 1):
        p.error("--prefetch-factor needs --workers > 0 and a value >= 1")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        print(f"torch_dataloader: error: torch is not importable ({e}); run scripts/python-env.sh", file=sys.stderr)
        return 2
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_dataloader: error: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    pin = a.pin_memory and device.type == "cuda"  # pinning only matters for host-to-device copies

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)  # the model is tiny; keep its CPU use from hiding the decode cost
    Dataset = build(torch)
    width = size_width(torch, a, device) if a.width == "auto" else a.width
    torch.manual_seed(a.seed)  # the model's initialization does not depend on the sizing probes
    model = make_model(torch, width).to(device)
    decode_ms = size_decode(torch, a, model, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    kwargs = dict(batch_size=a.batch_size, shuffle=True, num_workers=a.workers, pin_memory=pin,
                  generator=torch.Generator().manual_seed(a.seed), drop_last=True)
    if a.workers > 0:
        kwargs.update(persistent_workers=True, prefetch_factor=a.prefetch_factor or 2)
    loader = torch.utils.data.DataLoader(Dataset(a.steps * a.batch_size, decode_ms), **kwargs)
    print(f"torch_dataloader: device={device} workers={a.workers} pin_memory={pin} batch_size={a.batch_size} "
          f"steps={a.steps} width={width} decode_ms={decode_ms:.3f}")

    # Step boundaries: CUDA events on a GPU (no per-step synchronization, which would itself be a stall),
    # wall time on CPU.
    cuda = device.type == "cuda"
    marks = []

    def mark():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)
        else:
            marks.append(time.perf_counter())

    losses, wait_s = [], []
    it = iter(loader)
    for step in range(a.steps):
        mark()
        stepscope.step()
        if cuda:
            torch.cuda.nvtx.range_push("step")
            torch.cuda.nvtx.range_push("next_batch")
        t0 = time.perf_counter()
        with stepscope.data_wait():
            x, y = next(it)
        wait_s.append(time.perf_counter() - t0)
        if cuda:
            torch.cuda.nvtx.range_pop()
        x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())  # read at the end: no per-step .item()
        if cuda:
            torch.cuda.nvtx.range_pop()
    mark()
    stepscope.step()  # closes the last step
    if cuda:
        torch.cuda.synchronize()
        step_s = [marks[i - 1].elapsed_time(marks[i]) / 1e3 for i in range(1, len(marks))]
    else:
        step_s = [marks[i] - marks[i - 1] for i in range(1, len(marks))]
    losses = [float(v) for v in losses]

    # The first steps include worker start-up; report the steady state (second half) too.
    half = len(step_s) // 2
    wait_share = sum(wait_s[half:]) / sum(step_s[half:])
    label = f"workers={a.workers}" + (" pin_memory" if pin else "") + f" steps {half}-{len(step_s) - 1}"
    print(time_line(label, [v * 1e6 for v in step_s[half:]]))
    print(f"time: data wait {100 * wait_share:.1f}% of step time (steps {half}-{len(step_s) - 1}); "
          f"all {len(step_s)} steps: mean {statistics.mean(step_s) * 1e6:.2f} us (the first include worker start-up)")
    first = statistics.mean(losses[:5])
    last = statistics.mean(losses[-5:])
    print(f"loss: first5 {first:.6g} last5 {last:.6g}")
    ok = last < first
    print("verification: " + ("PASS" if ok else "FAIL") + " (the loss falls)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
