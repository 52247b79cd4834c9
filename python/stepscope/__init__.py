"""stepscope's Python helpers: mark steps and data-pipeline waits for the stepscope collector.

    import stepscope
    for batch in loader_iter:
        stepscope.step()                 # a new training step starts now
        with stepscope.data_wait():      # this block waits for input
            batch = next(loader_iter)

Every call is a cheap no-op when the program does not run under `stepscope record` (the collector library
is not loaded or not recording), so the markers can stay in production code. Times are CLOCK_MONOTONIC
nanoseconds (time.monotonic_ns()), the collector's clock.

Recording from inside the program (a notebook, a script; docs/integrations.md):

    with stepscope.profile("run.db") as prof:   # or stepscope.start("run.db") ... analysis = stepscope.stop()
        train()
    prof.findings, prof.steps                   # the analysis of the store written (a notebook shows the report)

Trainer callbacks (Hugging Face Trainer, Lightning) are in stepscope.integrations.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time

__all__ = ["enabled", "step", "step_at", "data_wait", "data_wait_interval", "start", "stop", "profile"]

_monotonic_ns = time.monotonic_ns


class _Collector:
    """The collector's exported C functions, found in the process (never loaded by us)."""

    def __init__(self):
        self.active = self.step = self.step_at = self.wait = None
        self.hook_cost = self.probe = self.wait_begin = self.wait_end = None  # the collector's own helper's
        self.range = None
        self.cuda_lend = self.cuda_take_back = None  # the torch.profiler hook's (_autohook)
        self.interrupted = None  # the hooks' atexit handler's (_autohook)
        lib = None
        try:
            lib = ctypes.CDLL(None)  # global scope: holds the collector when it was LD_PRELOADed
            lib.stepscope_collector_active
        except (OSError, AttributeError):
            lib = None
        # Loaded later (attach) without RTLD_GLOBAL: the collector gives its path to the copy it embeds
        # (`_stepscope`); take the library only if it is already there.
        import sys

        paths = (globals().get("_collector_path"), getattr(sys.modules.get("_stepscope"), "_collector_path", None),
                 os.environ.get("STEPSCOPE_COLLECTOR_LIB"))
        for path in paths:
            if lib is not None:
                break
            if not path:
                continue
            try:
                lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4))
                lib.stepscope_collector_active
            except (OSError, AttributeError):
                lib = None
        if lib is None:
            return
        self.active = lib.stepscope_collector_active
        self.active.restype = ctypes.c_int
        self.active.argtypes = []
        self.step = lib.stepscope_collector_step
        self.step.restype = None
        self.step.argtypes = [ctypes.c_char_p]
        self.step_at = lib.stepscope_collector_step_at
        self.step_at.restype = None
        self.step_at.argtypes = [ctypes.c_int64, ctypes.c_char_p]
        self.wait = lib.stepscope_collector_data_wait
        self.wait.restype = None
        self.wait.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p]
        self.hook_cost = getattr(lib, "stepscope_collector_python_hook_cost", None)
        if self.hook_cost is not None:
            self.hook_cost.restype = None
            self.hook_cost.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p]
        self.probe = getattr(lib, "stepscope_collector_python_probe", None)
        if self.probe is not None:
            self.probe.restype = None
            self.probe.argtypes = [ctypes.c_int]
        self.range = getattr(lib, "stepscope_collector_range", None)  # (start, end, tid, domain, name)
        if self.range is not None:
            self.range.restype = None
            self.range.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p]
        self.cuda_lend = getattr(lib, "stepscope_collector_cuda_lend", None)
        if self.cuda_lend is not None:
            self.cuda_lend.restype = ctypes.c_int
            self.cuda_lend.argtypes = [ctypes.c_char_p]
        self.cuda_take_back = getattr(lib, "stepscope_collector_cuda_take_back", None)
        if self.cuda_take_back is not None:
            self.cuda_take_back.restype = None
            self.cuda_take_back.argtypes = []
        self.interrupted = getattr(lib, "stepscope_collector_python_interrupted", None)
        if self.interrupted is not None:
            self.interrupted.restype = None
            self.interrupted.argtypes = [ctypes.c_int]
        self.wait_begin = lib.stepscope_collector_data_wait_begin
        self.wait_begin.restype = None
        self.wait_begin.argtypes = [ctypes.c_char_p]
        self.wait_end = lib.stepscope_collector_data_wait_end
        self.wait_end.restype = None
        self.wait_end.argtypes = []


def _rebind():
    """Finds the collector again: called by the collector when it arrives after this module was imported."""
    global _c
    _c = _Collector()


_c = _Collector()


def enabled() -> bool:
    """True when the stepscope collector is loaded and recording."""
    return _c.active is not None and _c.active() != 0


def step(source: str = "api") -> None:
    """Marks the start of a training step on the calling thread."""
    if _c.step is not None:
        _c.step(source.encode())


def step_at(t_ns: int, source: str = "api") -> None:
    """Marks a step start at a CLOCK_MONOTONIC time (time.monotonic_ns())."""
    if _c.step_at is not None:
        _c.step_at(t_ns, source.encode())


def data_wait_interval(start_ns: int, end_ns: int, source: str = "api") -> None:
    """Records that the calling thread waited for input from start_ns to end_ns (time.monotonic_ns())."""
    if _c.wait is not None:
        _c.wait(start_ns, end_ns, source.encode())


@contextlib.contextmanager
def data_wait(source: str = "api"):
    """`with stepscope.data_wait(): batch = next(it)` records the block as a data wait of this thread."""
    if _c.wait is None:
        yield
        return
    start = _monotonic_ns()
    try:
        yield
    finally:
        _c.wait(start, _monotonic_ns(), source.encode())


def start(output=None, **options):
    """Starts recording this process (in-process, or a window of `stepscope record --paused`); stop() ends it.
    output: the store (default stepscope-DATE-TIME.db, -rankN added in a job of several ranks); options: cpu_hz, wall, no_gpu, gpu_window, step_func,
    data_wait_func (as `stepscope attach`'s), cli (the stepscope executable)."""
    from ._session import start as _start

    return _start(output, **options)


def stop():
    """Ends the recording start() began and returns its analysis (findings, steps, summary; a notebook shows the
    HTML report); None when a `stepscope record` launcher writes the store at the program's end, and in a child
    forked inside the window (the window is its parent's). Closing an in-process or `record --paused` window ends
    its last step() step."""
    from ._session import stop as _stop

    return _stop()


def profile(output=None, **options):
    """`with stepscope.profile("run.db") as prof:` records the block; afterwards prof.findings, prof.steps."""
    from ._session import profile as _profile

    return _profile(output, **options)
