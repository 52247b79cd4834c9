"""What hf_trainer.py and lightning_trainer.py share: their command line, and a dataset whose batches for optimizer
steps [--slow-from, --slow-to) sleep --slow-ms per item (those steps wait for input), and whose first item of
optimizer step --fail-at raises when fetched: the training fails there (transformers.Trainer's loader fetches a
batch ahead: its last step done is then --fail-at - 2)."""
import argparse
import time

import torch


def parse_args(out_dir):
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", required=True)
    ap.add_argument("--steps")
    ap.add_argument("--every", type=int)
    ap.add_argument("--length", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--slow-ms", type=float, default=10.0)
    ap.add_argument("--slow-from", type=int, default=0)
    ap.add_argument("--slow-to", type=int, default=0)
    ap.add_argument("--fail-at", type=int, default=-1)
    ap.add_argument("--out-dir", default=out_dir)
    ap.add_argument("--second-callback", action="store_true", help="a second stepscope callback in the trainer")
    ap.add_argument("--train-twice", action="store_true", help="train() twice with the same callback")
    return ap.parse_args()


class SlowBatches(torch.utils.data.Dataset):
    """n items; item(i, generator) makes one. Items are fetched in order, batch × accum per optimizer step."""

    def __init__(self, a, n):
        self.a, self.n, self.calls = a, n, 0
        per_step = a.batch * a.accum
        self.slow = range(a.slow_from * per_step, a.slow_to * per_step)
        self.fail = a.fail_at * per_step if a.fail_at >= 0 else -1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        k, self.calls = self.calls, self.calls + 1
        if k == self.fail:
            raise RuntimeError(f"slow_batches: the first item of optimizer step {self.a.fail_at} (--fail-at)")
        if k in self.slow:
            time.sleep(self.a.slow_ms / 1e3)
        return self.item(i, torch.Generator().manual_seed(i))

    def item(self, i, g):
        raise NotImplementedError
