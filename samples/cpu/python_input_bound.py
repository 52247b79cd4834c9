"""A pure-Python/numpy "trainer" whose input pipeline is slow: each batch is read (simulated I/O latency)
and decoded (numpy work) by a generator, then a compute step runs (numpy matmuls). It measures the time its
training loop waits for batches and prints that share, to compare with what stepscope records:

    stepscope record --data-wait-func 'Loader.__next__' --step-func train_step -- python3 python_input_bound.py
    python3 python_input_bound.py --prefetch      # background thread + queue: waits mostly vanish

Output (stdout): `steps N`, `wait_share S` (0..1), `loop_s T`, `checksum C` (deterministic).
"""
import argparse
import queue
import threading
import time

import numpy as np


def read_and_decode(i, read_s, rng_seed=0):
    time.sleep(read_s)  # simulated storage read
    rng = np.random.default_rng(rng_seed + i)
    raw = rng.integers(0, 255, size=(64, 256), dtype=np.uint8)
    return (raw.astype(np.float32) / 255.0 - 0.5) * 2.0  # simulated decode


def batches(n, read_s):
    for i in range(n):
        yield read_and_decode(i, read_s)


class Loader:
    """What the training loop calls for the next batch; with prefetch a thread fills a bounded queue."""

    def __init__(self, n, read_s, prefetch):
        self._gen = batches(n, read_s)
        self._queue = None
        if prefetch:
            self._queue = queue.Queue(maxsize=prefetch)
            threading.Thread(target=self._fill, daemon=True).start()

    def _fill(self):
        for b in self._gen:
            self._queue.put(b)
        self._queue.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        if self._queue is None:
            return next(self._gen)
        b = self._queue.get()
        if b is None:
            raise StopIteration
        return b


def train_step(w, x, compute_s):
    end = time.monotonic() + compute_s
    loss = 0.0
    while True:  # numpy compute for about compute_s seconds
        h = np.tanh(x @ w)
        loss += float((h * h).mean())
        if time.monotonic() >= end:
            return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--read-ms", type=float, default=15.0)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--prefetch", type=int, nargs="?", const=4, default=0, help="queue depth (default 4)")
    a = ap.parse_args()
    w = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32) / 16
    loader = Loader(a.steps, a.read_ms / 1000, a.prefetch)
    waited = 0
    checksum = 0.0
    start = time.monotonic_ns()
    steps = 0
    while True:
        t0 = time.monotonic_ns()
        try:
            x = next(loader)
        except StopIteration:
            break
        waited += time.monotonic_ns() - t0
        train_step(w, x, a.compute_ms / 1000)
        checksum += float(x.sum())
        steps += 1
    total = time.monotonic_ns() - start
    print(f"steps {steps}")
    print(f"wait_share {waited / total:.4f}")
    print(f"loop_s {total / 1e9:.4f}")
    print(f"checksum {checksum:.3f}")


if __name__ == "__main__":
    main()
