"""The sizes of `run`'s phases: how long each program runs, how often it prints a window line, the limits, and what
the overhead phase leaves the phases after it."""

ATTACH_SECONDS = 20  # launch_bound's run in the attach phase
LB_REPORT_EVERY = 2000  # launch_bound steps per window line: ~0.23 s on an H100 (117 µs a step); attach, flight and
#                         the overhead runs (flight-overhead reuses plain's windows)
ATTACH_REPORT_EVERY = LB_REPORT_EVERY
# The flight phase: launch_bound FLIGHT_SECONDS under `record --flight FLIGHT_WINDOW`, `stepscope dump` at
# FLIGHT_DUMP_AFTER_S after its first window line; the run's limit (start, the dump, the end) FLIGHT_SECONDS +
# FLIGHT_RUN_SLACK_S. The overhead phase keeps FLIGHT_RESERVE_S of the deadline for it.
FLIGHT_SECONDS = 20
FLIGHT_DUMP_AFTER_S = 10
FLIGHT_DUMP_WAIT_S = 30  # `dump --wait`: the launcher merges a save 2 s after it appeared, then symbolizes it
FLIGHT_DUMP_TIMEOUT_S = 45
FLIGHT_RUN_SLACK_S = 40
FLIGHT_RESERVE_S = FLIGHT_SECONDS + 20  # the flight run (plain reused from the overhead phase) and its start/end
# torch.profiler's trainer run: as many steps as PROFILER_SECONDS of the plain trainer did (at least
# PROFILER_MIN_STEPS, at most all of them). Its post-processing after the timed steps took ~8 ms a step on the
# H200 (146 s for 18,625 steps) and never finished a 30 s run inside the proof's deadline; its own time limit is
# PROFILER_TIMEOUT_BASE_S + PROFILER_TIMEOUT_PER_STEP_S a step (start, the profiled steps, post-processing: 2×).
PROFILER_SECONDS = 5.0
PROFILER_MIN_STEPS = 500
PROFILER_TIMEOUT_BASE_S = 60.0
PROFILER_TIMEOUT_PER_STEP_S = 0.025
# The toggled overhead (issue 50 item 1): one launch_bound under `record --paused`; after TOGGLE_OFF_S a recording
# window at record's defaults opens (`stepscope start`) for TOGGLE_ON_S and closes (`stepscope stop`), in turn,
# for TOGGLE_SECONDS; each window line (~0.23 s) that ends within TOGGLE_TRIM_S after a switch is left out, and the
# switching commands' own time belongs to neither side.
TOGGLE_SECONDS = 58
TOGGLE_ON_S = 8.0
TOGGLE_OFF_S = 6.0
TOGGLE_TRIM_S = 1.0

# launch_bound's --steps cap under --duration: a step of 20 µs (its fused step on an H100 is ~25 µs).
LB_MIN_STEP_US = 20.0


def launch_bound_cap(seconds):
    """--steps for a `launch_bound --duration seconds` run: a cap it does not reach (its cudaEvents, one per
    100 steps, are made up front)."""
    return min(10000000, max(100000, int(seconds * 1e6 / LB_MIN_STEP_US)))  # 10,000,000: its --steps range


def profiler_steps(plain_steps, plain_seconds):
    """Steps of torch.profiler's bounded trainer run, from the plain run's steps in plain_seconds."""
    return min(plain_steps, max(PROFILER_MIN_STEPS, round(plain_steps * PROFILER_SECONDS / plain_seconds)))


def profiler_timeout(steps):
    return PROFILER_TIMEOUT_BASE_S + PROFILER_TIMEOUT_PER_STEP_S * steps


# The graphs phase (issue 49): launch_bound --graph (its step one replay of a captured graph of kernels_per_step
# kernels) plain for GRAPH_PLAIN_SECONDS; recorded whole (`--gpu-window all`, the calibration off: its launches
# would fall in the timed steps) for GRAPH_ALL_STEPS steps with one interval per replay (`--cuda-graphs graph`) and
# with every node's records (nodes, the default); and with the defaults for as many steps as the plain run did.
GRAPH_PLAIN_SECONDS = 10
GRAPH_ALL_STEPS = 20000  # ~1.1 s on an H100 (53.5 µs a step), 620,000 kernel rows: a store that finalizes fast
GRAPH_REPORT_EVERY = 1000
GRAPH_RESERVE_S = 4 * 15 + GRAPH_PLAIN_SECONDS * 2  # four runs' start and end, the two long ones

# The neighbour phase (issue 50 item 7): the trainer NEIGHBOUR_STEPS timed steps under `record --gpu-window all`,
# torch.profiler (CPU + CUDA) on steps NEIGHBOUR_SPAN (from, to): stepscope lends CUDA tracing for that span.
NEIGHBOUR_STEPS = 600
NEIGHBOUR_SPAN = (200, 260)
