"""A real PyTorch CPU training loop: small CNN, synthetic image dataset whose __getitem__ has a slow per-item
decode. Unchanged user code: stepscope finds DataLoader waits and Optimizer steps by itself.

    python_torch_train.py --workers 0     # input-bound: the training thread waits for each batch
    python_torch_train.py --workers 2     # forked worker processes load in parallel: waits mostly hidden
    python_torch_train.py --kineto out.json   # also trace with torch.profiler (Kineto JSON)
    python_torch_train.py --step-log s.txt    # each step's own times, to check a recording's steps against
    python_torch_train.py --ready-file F      # creates F after --ready-steps (2) steps: training is under way
    python_torch_train.py --duration 600 --steps 1000000   # stops after 10 minutes of steps (a long recording)

Prints: steps, the loop's own measured DataLoader wait share, and the final loss. The step log has a line per
step, "wait_start wait_end step_end" in CLOCK_MONOTONIC ns (time.monotonic_ns), the clock stepscope records on.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    def __init__(self, n, decode_ms):
        self.n, self.decode_s = n, decode_ms / 1000.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.decode_s)  # slow per-item decode (I/O + codec latency)
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--decode-ms", type=float, default=2.0, help="per item")
    ap.add_argument("--kineto", default="")
    ap.add_argument("--step-log", default="")
    ap.add_argument("--ready-file", default="", help="created once --ready-steps steps are taken")
    ap.add_argument("--ready-steps", type=int, default=2)
    ap.add_argument("--duration", type=float, default=0, help="seconds: stop the loop after them (0: --steps)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(128 * 64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(SlowImages(a.steps * a.batch, a.decode_ms), batch_size=a.batch,
                        num_workers=a.workers,
                        prefetch_factor=4 if a.workers else None)
    prof = None
    if a.kineto:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
    waited, steps, loss, first_wait = 0, 0, None, 0
    log = []
    start = time.monotonic_ns()
    it = iter(loader)
    while True:
        t0 = time.monotonic_ns()
        try:
            x, y = next(it)
        except StopIteration:
            break
        t1 = time.monotonic_ns()
        waited += t1 - t0
        if steps == 0:
            first_wait = time.monotonic_ns() - t0
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
        log.append((t0, t1, time.monotonic_ns()))
        if a.ready_file and steps == a.ready_steps:
            open(a.ready_file, "w").close()  # a test's cue: the loop runs (torch's import took 2-13 s here)
        if prof is not None:
            prof.step()
        if a.duration and time.monotonic_ns() - start >= a.duration * 1e9:
            break
    total = time.monotonic_ns() - start
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(a.kineto)
    if a.step_log:
        with open(a.step_log + ".tmp", "w") as f:
            f.writelines(f"{w0} {w1} {e}\n" for w0, w1, e in log)
        os.replace(a.step_log + ".tmp", a.step_log)
    print(f"steps {steps}")
    print(f"wait_share {waited / total:.4f}")
    print(f"first_wait_ms {first_wait / 1e6:.1f} loop_s {total / 1e9:.2f}")
    print(f"loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
