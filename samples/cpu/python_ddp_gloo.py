"""A real data-parallel PyTorch job on CPU: DistributedDataParallel over the gloo backend, one process per rank,
started by torchrun. Unchanged user code: stepscope finds the optimizer steps of each rank by itself.

    torchrun --nproc_per_node 2 python_ddp_gloo.py --steps 20
    torchrun --nproc_per_node 2 python_ddp_gloo.py --device cuda   # both ranks on one GPU (scripts/gpu_proof.py)
    stepscope record -o run-%r.db -- torchrun --nproc_per_node 2 python_ddp_gloo.py   # one store per rank
    torchrun --nproc_per_node 2 python_ddp_gloo.py --seconds 10   # at least --steps, and on for 10 s
    ... --until-file F --seconds 120   # at least --steps, and on until F exists (at most 120 s)
    ... --ready-file F   # rank 0 creates F after --ready-steps (25) steps: when to look at a running job
    ... --slow-rank 1 --slow-ms 30   # rank 1 sleeps 30 ms at the start of every step: a known straggler
    ... --slow-rank 1 --slow-ms 600 --stall-at 60   # only in step 60: one slow step that every rank sees
        (in read_slow_shard(): `stepscope record --data-wait-func read_slow_shard` makes it a wait for input)
    ... --hidden 128 --io-ms 20   # a smaller model; every rank waits 20 ms a step for its batch (simulated I/O)

Prints one line per rank: rank, world size, steps, final loss.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def read_slow_shard(seconds):
    """The straggler's extra time: host time, or its wait for input when the recording names this function."""
    time.sleep(seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=0, help="go on past --steps until this long has passed")
    ap.add_argument("--until-file", default="", help="go on past --steps until this file exists (or --seconds passed)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: every rank on cuda:0 (gloo reduces through the host)")
    ap.add_argument("--ready-file", default="", help="rank 0 creates this file once it has taken --ready-steps steps")
    ap.add_argument("--ready-steps", type=int, default=25)
    ap.add_argument("--slow-rank", type=int, default=-1, help="this rank does --slow-ms of extra work every step")
    ap.add_argument("--slow-ms", type=float, default=0.0, help="the straggler's extra time per step (a sleep)")
    ap.add_argument("--stall-at", type=int, default=0, help="the straggler's extra time in this step (1-based) only")
    ap.add_argument("--hidden", type=int, default=512, help="width of the hidden layer")
    ap.add_argument("--io-ms", type=float, default=0.0, help="every rank waits this long per step for its batch")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(args.device)
    net = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(dev)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[0] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    loss = torch.zeros(())
    steps, start = 0, time.monotonic()

    def go_on():
        if steps < args.steps or (args.seconds <= 0 and not args.until_file):
            return steps < args.steps
        # Every rank must take as many steps as the others (each backward is a collective): rank 0 decides.
        on = args.seconds <= 0 or time.monotonic() - start < args.seconds
        if args.until_file and os.path.exists(args.until_file):
            on = False
        more = torch.tensor([1.0 if on else 0.0])
        dist.broadcast(more, src=0)
        return more.item() > 0

    while go_on():
        steps += 1
        if rank == args.slow_rank and args.slow_ms > 0 and args.stall_at in (0, steps):
            read_slow_shard(args.slow_ms / 1000.0)  # time the other ranks wait for at the gradient all-reduce
        if args.io_ms > 0:
            time.sleep(args.io_ms / 1000.0)  # reading the batch: time that does not compete for the cores
        x = torch.randn(64, 256, generator=g).to(dev)
        y = torch.randint(0, 10, (64,), generator=g).to(dev)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # gloo all-reduce of the gradients
        opt.step()
        if args.ready_file and rank == 0 and steps == args.ready_steps:
            open(args.ready_file, "w").close()  # a test's cue: training is under way, not still importing
    # One write per line: the ranks share the terminal and an unbuffered print writes the newline apart.
    sys.stdout.write(f"rank {rank} of {world} (local {os.environ.get('LOCAL_RANK')}): {steps} steps, "
                     f"loss {loss.item():.4f}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without interpreter finalization: on a loaded machine torch's gloo worker threads can still be
    # releasing Python-held tensors then, take the GIL during shutdown and abort the rank ("terminate called
    # without an active exception", 1 run in 4 under load with torch 2.15; pytorch/pytorch#179291). Many
    # trainers end this way; stepscope keeps such a rank's last samples (its _exit stand-in).
    os._exit(0)
