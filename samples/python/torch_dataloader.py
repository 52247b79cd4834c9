#!/usr/bin/env python3
"""torch_dataloader: a small CNN trained on a synthetic image dataset whose per-item decode is slow.

With the default `--workers 0` the training loop decodes every item itself: the device waits for each batch
and the step time is the decode time (input-bound). The cure is the DataLoader's own: `--workers N`
(parallel decode in worker processes, prefetching `--prefetch-factor` batches each) and `--pin-memory`
(page-locked batches, copied with non_blocking=True).

  python torch_dataloader.py                              # input-bound
  python torch_dataloader.py --workers 4 --pin-memory     # the cure

The data, the model's initialization and the batch order are seeded, so the printed losses are the same
with and without the cure (on CPU exactly; on a GPU up to nondeterministic kernels): the cure changes the
speed, not the training. Each item is a 3x32x32 image of noise with a bright 8x8 patch whose position is
its class (10 classes), so the loss visibly falls.
Each step is marked with stepscope.step() and its wait for the batch with stepscope.data_wait() (no-ops
outside `stepscope record`), and on a GPU also with NVTX ranges "step" and "next_batch".
Exit codes: 0 ok, 1 the loss did not fall, 2 bad arguments or torch missing.
"""
import argparse
import statistics
import sys
import time


try:  # on PYTHONPATH under `stepscope record`; every call is a no-op without the collector
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


def build(torch, decode_ms):
    import numpy as np
    nn = torch.nn

    class SlowDecodeDataset(torch.utils.data.Dataset):
        def __init__(self, size):
            self.size = size

        def __len__(self):
            return self.size

        def __getitem__(self, index):
            img, label = decode_item(index, decode_ms, np)
            return torch.from_numpy(img), label

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (IMAGE // 4) ** 2, CLASSES))  # keeps position: the class is where the patch is
    return SlowDecodeDataset, model


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--decode-ms", type=float, default=2.0, help="CPU cost of decoding one item (default 2 ms)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (cure: > 0)")
    p.add_argument("--pin-memory", action="store_true", help="DataLoader pin_memory + non_blocking copies (cure)")
    p.add_argument("--prefetch-factor", type=int, default=None, help="batches prefetched per worker (workers > 0)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.steps < 2 or a.batch_size < 1 or a.workers < 0 or a.decode_ms < 0:
        p.error("need --steps >= 2, --batch-size >= 1, --workers >= 0, --decode-ms >= 0")
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
    Dataset, model = build(torch, a.decode_ms)
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    kwargs = dict(batch_size=a.batch_size, shuffle=True, num_workers=a.workers, pin_memory=pin,
                  generator=torch.Generator().manual_seed(a.seed), drop_last=True)
    if a.workers > 0:
        kwargs.update(persistent_workers=True, prefetch_factor=a.prefetch_factor or 2)
    loader = torch.utils.data.DataLoader(Dataset(a.steps * a.batch_size), **kwargs)
    print(f"torch_dataloader: device={device} workers={a.workers} pin_memory={pin} batch_size={a.batch_size} "
          f"steps={a.steps} decode_ms={a.decode_ms}")

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
    med = statistics.median(step_s[half:]) * 1e3
    wait_share = sum(wait_s[half:]) / sum(step_s[half:])
    print(f"time: step median {med:.2f} ms (second half), mean {statistics.mean(step_s) * 1e3:.2f} ms (all steps); "
          f"data wait {100 * wait_share:.1f}% of step time (second half)")
    first = statistics.mean(losses[:5])
    last = statistics.mean(losses[-5:])
    print(f"loss: first5 {first:.6g} last5 {last:.6g}")
    ok = last < first
    print("verification: " + ("PASS" if ok else "FAIL") + " (the loss falls)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
