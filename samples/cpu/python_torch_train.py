"""A real PyTorch CPU training loop: small CNN, synthetic image dataset whose __getitem__ has a slow per-item
decode. Unchanged user code: stepscope finds DataLoader waits and Optimizer steps by itself.

    python_torch_train.py --workers 0     # input-bound: the training thread waits for each batch
    python_torch_train.py --workers 2     # forked worker processes load in parallel: waits mostly hidden
    python_torch_train.py --kineto out.json   # also trace with torch.profiler (Kineto JSON)

Prints: steps, the loop's own measured DataLoader wait share, and the final loss.
"""
import argparse
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
    start = time.monotonic_ns()
    it = iter(loader)
    while True:
        t0 = time.monotonic_ns()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waited += time.monotonic_ns() - t0
        if steps == 0:
            first_wait = time.monotonic_ns() - t0
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        steps += 1
        if prof is not None:
            prof.step()
    total = time.monotonic_ns() - start
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(a.kineto)
    print(f"steps {steps}")
    print(f"wait_share {waited / total:.4f}")
    print(f"first_wait_ms {first_wait / 1e6:.1f} loop_s {total / 1e9:.2f}")
    print(f"loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
