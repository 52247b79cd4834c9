"""Python workloads of different shape for bench/overhead's Python mode (pyperformance-style: each a fixed amount
of work, a few seconds). Each prints, on stderr, its own compute time measured around the work only (imports and
interpreter start-up excluded), the same line hot_loop --time prints:

    compute_wall_s=W compute_cpu_s=C

    python_workloads.py loop | recursion | dicts | numpy | torch [--scale F]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one compute thread everywhere: less noise on 2 cores
os.environ.setdefault("OMP_NUM_THREADS", "1")


def loop(scale):
    s = 0
    for i in range(int(18_000_000 * scale)):
        s += (i * i) % 7
    return s


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursion(scale):
    return sum(fib(24) for _ in range(int(170 * scale)))


def dicts(scale):
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma "
             "tau upsilon phi chi psi omega").split()
    total = 0
    for r in range(int(250_000 * scale)):
        counts = {}
        line = " ".join(words[(r + k) % len(words)] for k in range(12))
        for w in line.split():
            key = w.upper() if len(w) > 4 else w
            counts[key] = counts.get(key, 0) + 1
        total += len(f"{r}:{sorted(counts.items())[0]}")
    return total


def numpy_work(scale):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    acc = 0.0
    for _ in range(int(15_000 * scale)):
        b = np.tanh(a @ a.T * 0.01) + a
        acc += float(b[:4, :4].sum())
    return acc


def torch_train(scale):
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(4096, 64)
    y = (x.sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = None
    for _ in range(max(1, int(4 * scale))):
        for xb, yb in loader:  # DataLoader and Optimizer.step: the code the hooks wrap
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
    return float(loss)


WORKLOADS = {"loop": loop, "recursion": recursion, "dicts": dicts, "numpy": numpy_work, "torch": torch_train}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    fn = WORKLOADS[a.workload]
    if a.workload in ("numpy", "torch"):  # import outside the timed part
        __import__("numpy" if a.workload == "numpy" else "torch")
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn(a.scale)
    w1, c1 = time.perf_counter(), time.process_time()
    print(f"result {result}")
    print(f"compute_wall_s={w1 - w0:.6f} compute_cpu_s={c1 - c0:.6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
