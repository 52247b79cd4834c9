"""The GPU proof's measuring and checking (scripts/gpu-proof.sh calls both; docs/collector.md, "GPU proof").

  gpu_proof.py run   --build DIR --out OUT [--python PY] [--overhead-seconds 30] [--deadline-s 510]
  gpu_proof.py check --out OUT [--stepscope PATH]

`run` needs a GPU: it records the programs the claims are about and writes OUT/runs.json (what ran, exit codes,
times, logs and stores, and the facts of stores it does not keep). `check` needs none: it reads OUT/runs.json,
the logs and stores, and writes OUT/gpu-proof.md (claim | measured | expected | verdict) and OUT/gpu-proof.json.
The suite runs `check` on stepscope 0.1's H100 recordings (../shared/recordings), so the verdict logic is tested
where there is no GPU.

The overhead runs: each workload's plain run stops after --overhead-seconds (launch_bound --ops 30 --duration,
the trainer --duration) and prints its step count; the default window, `--gpu-window all` and CUPTI alone then
run that many steps. torch.profiler's trainer run is bounded: the steps of PROFILER_SECONDS of the plain trainer
(at least PROFILER_MIN_STEPS), under a time limit of its own large enough for its post-processing; the claim
compares its mean step over those steps with plain's mean step and says so.

The toggled overhead (issue 50 item 1): launch_bound --ops 30 runs 58 s under `record --paused`; closed 6 s, then a
recording window at record's defaults (`stepscope start`, `stop`) open 8 s, in turn. Each window's median window
line against the closed intervals beside it (≤ +3%), and the closed intervals after a close against the first
(what a detach leaves), within the closed intervals' own spread: one process, so neither the drift between two
processes nor their memory layout can differ between the modes.

The attach: launch_bound --ops 30 runs 20 s with a `window:` line every 2000 steps (~0.2 s); stepscope attaches 5 s
after its first window for 6 s. The claim compares the median window after the detach with the median before
the attach (the first two windows and those the attach or detach falls in left out) and states the spread
(IQR / median) of the windows before: PASS within 3%, "inconclusive" (FAIL) when that spread alone exceeds 3%.
A CPU rehearsal (--device cpu) attaches to the trainer instead: no CUDA sample runs there.

The flight recorder (docs/flight.md): launch_bound --ops 30 runs 20 s under `record --flight 30s` (its defaults:
100 Hz wall-clock, `--gpu-window 20/200`, the slow-step trigger) with a `window:` line every 2000 steps; 10 s after
its first window `stepscope dump <record's pid>` (--wait 30, a 45 s limit) saves the window. flight-dump: the
store it printed exists, with meta flight.trigger = dump, kernels and flight.gpu_steps not `none`. flight-overhead:
its windows (the first two and those the dump falls in left out) against plain's — the overhead phase's plain
launch_bound (whose runs print the same windows) where it ran, else a 20 s plain run of this phase: the median
window and the mean step each ≤ +1% (the issue's always-on goal), "inconclusive" (FAIL) when plain's windows spread
(IQR / median) more than 1%. The phase takes ~25 s (~50 s with its own plain run; at most ~115 s by its limits);
when it comes after the overhead phase, that phase leaves it 40 s of the deadline. Its saves stay out of the
threads and launch-rows claims: a save has no `gpu_windows` row for a GPU window still open at the save.

The exits: launch_bound recorded 9 times with `--duration` 0.4-1.2 s, so its exit falls where the collector's
launch-cost calibration (~1 s after CUDA started) may be under way; each must exit 0 as it does plain (the H100
run of 2026-11-27 ended one such run with SIGSEGV). unique-launch-ids: in every store, no two kernels (CUDA-graph
replays aside) share a (pid, correlation id) — CUPTI restarts its ids after each re-attach, and windows 3-6 of
launch_bound once joined window 2's launches.

Exit codes: run 0 done (some runs may have failed: check says which), 2 usage, 3 no GPU;
check 0 every claim PASS, 1 some FAIL or NOT RUN, 2 usage or no runs.json.
"""

# The modules: common (paths, parsing of the programs' lines, a claim's record), stores (what `check` reads from a
# store), one module per claim family (trace, overhead, samples, sessions, flight, graphs), report (`check`: the
# claims in order, gpu-proof.md and gpu-proof.json), runner (`run`'s phases) and cli (the command line).
