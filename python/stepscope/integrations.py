"""Trainer callbacks that record the steps the trainer itself counts (docs/integrations.md).

    from stepscope.integrations import StepscopeCallback             # Hugging Face transformers.Trainer
    trainer = Trainer(..., callbacks=[StepscopeCallback(steps="100:120")])

    from stepscope.integrations import StepscopeLightningCallback    # PyTorch Lightning
    trainer = L.Trainer(..., callbacks=[StepscopeLightningCallback(every=1000, length=20)])

Each optimizer step is a step: a `stepscope.step()` mark (source "api") where the trainer starts it, so a step is
one iteration of the trainer's loop (its forward/backward passes, the optimizer, logging, and the fetch of the
next step's batches); the window's last step ends where the next one begins, or where the trainer's last
optimizer step ended. No hook guesses where steps are. A window of steps is recorded on demand:
`steps="100:120"` records the optimizer steps 100 to 119 (counted from 0, as the trainer's global step before
the step), `every=1000, length=20` the steps 1000-1019, 2000-2019, ...; neither: the whole run. A window is a
window of `stepscope record --paused` when the program runs under one (the launcher writes that store at the
end), joins a recording already running (`stepscope record`, `stepscope attach`), and otherwise records
in-process: the collector is loaded into this process and each window written to its own store (`output`; with
several windows, `-steps<first>-<last>` before its extension). When a window's store is written, one line goes to
the trainer's log: its steps, their median, and each finding with its estimated saving.

The classes are made on first use (module __getattr__): importing this module imports neither framework.
"""

from __future__ import annotations

import logging
import numbers
import os
import sys
import time

from . import step as _mark_step

__all__ = ["StepscopeCallback", "StepscopeLightningCallback", "StepWindows"]

_SOURCE = "api"  # an explicit marker: the analyzer takes these steps before any hook's (docs/analysis-json.md)


class StepWindows:
    """Which optimizer steps to record. steps: "A:B" (A to B-1), "A:" (A to the end), or (A, B); every/length:
    windows of `length` steps starting at every multiple of `every` from `every` on (the start-up left out)."""

    def __init__(self, steps=None, every=None, length=None):
        length_given = length is not None
        length = 20 if length is None else length
        self.every, self.length = None, None
        self.first, self.end = 0, None
        if steps is not None and every is not None:
            raise ValueError("stepscope: give steps= or every=, not both")
        if length_given and every is None:
            # length= alone (or beside steps=) would be ignored: the window would not be the one asked for.
            raise ValueError(f"stepscope: length={length} needs every= (windows of `length` steps every `every` "
                             f"steps); steps='A:B' gives one window")
        if every is not None:
            self.every, self.length = int(every), int(length)
            if self.every <= 0 or not 0 < self.length <= self.every:
                given = "" if length_given else " (the default)"
                raise ValueError(f"stepscope: every={every}, length={length}{given}: need 0 < length <= every")
        elif steps is not None:
            if isinstance(steps, str):
                a, sep, b = steps.partition(":")
                try:
                    if not sep:
                        raise ValueError
                    self.first, self.end = int(a or 0), (int(b) if b else None)
                except ValueError:
                    raise ValueError(f"stepscope: steps={steps!r}: expected 'FIRST:END' (END excluded), "
                                     f"whole numbers") from None
            elif isinstance(steps, (tuple, list)) and len(steps) == 2:
                try:
                    self.first, self.end = int(steps[0]), (None if steps[1] is None else int(steps[1]))
                except (TypeError, ValueError):
                    raise ValueError(f"stepscope: steps={steps!r}: expected (FIRST, END) of whole numbers, END "
                                     f"excluded (None: to the end)") from None
            else:
                raise ValueError(f"stepscope: steps={steps!r}: expected 'FIRST:END' (END excluded) or "
                                 f"(FIRST, END)")
            if self.first < 0 or (self.end is not None and self.end <= self.first):
                raise ValueError(f"stepscope: steps={steps!r}: need 0 <= FIRST < END")

    @property
    def several(self):
        return self.every is not None

    def first_window(self):
        """The steps of the first window, in words: "steps 50-59", "steps from 50"."""
        if self.every is not None:
            return f"steps {self.every}-{self.every + self.length - 1}"
        return f"steps {self.first}-{self.end - 1}" if self.end is not None else f"steps from {self.first}"

    def starting_at(self, i):
        """The end (excluded; None: the run's end) of the window that starts at step i, or False."""
        if self.every is not None:
            return i + self.length if i >= self.every and i % self.every == 0 else False
        return self.end if i == self.first else False

    def inside(self, i):
        """The end of the window that contains step i (a window is joined late when the trainer resumed from a
        checkpoint past its start), or False."""
        if self.every is not None:
            k = i - i % self.every
            return k + self.length if k >= self.every and i < k + self.length else False
        return self.end if i >= self.first and (self.end is None or i < self.end) else False


class _Recorder:
    """What both callbacks do, in the trainer's step numbering (i: optimizer steps done before the step)."""

    # The recorder of the training running in this process, and what identifies that training (the trainer's
    # state object): a second stepscope callback in the same trainer marked every step twice (ten steps of
    # 67 ms for five of 135 ms) and took the first one's window for someone else's recording.
    active = None
    active_training = None

    def __init__(self, output, windows, emit, options, analyses=None):
        self.output = output
        self.windows = windows
        self.emit = emit
        self.options = options
        self.window = None  # the open _session.Window
        self.range = None   # (first, end) of the open window
        self.analyses = [] if analyses is None else analyses  # one per store written: the callback's, kept across runs
        self.lines = []     # the lines emitted
        self.last = None    # the last step marked in the open window
        self.seen = None    # the last step the trainer began
        self.opened = False  # a window was opened (or tried) in this training
        self.broken = None  # why this process cannot record: said once, then training goes on unrecorded

    def claim(self, training):
        """At the training's start: this recorder records it (`training`: the trainer's state or trainer object,
        compared by identity and held, so that no later object takes its id), unless another callback's already
        does (then one line, and this one does nothing). False: this one stands aside."""
        if _Recorder.active is not None and _Recorder.active is not self and _Recorder.active_training is training:
            self.say("stepscope: a second stepscope callback in this trainer records nothing: the first one "
                     "records the steps (one callback is enough)")
            return False
        _Recorder.active, _Recorder.active_training = self, training
        return True

    def release(self):
        if _Recorder.active is self:
            _Recorder.active = _Recorder.active_training = None

    def output_for(self, first, end):
        base = self.output
        if self.windows.several:
            root, ext = os.path.splitext(base)
            base = f"{root}-steps{first}-{end - 1}{ext or '.db'}"
        rank = os.environ.get("RANK")
        if rank is not None and int(os.environ.get("WORLD_SIZE", "1") or "1") > 1:
            root, ext = os.path.splitext(base)
            base = f"{root}-rank{rank}{ext}"
        return base

    def preflight(self):
        """At the training's start: whether a window could open here at all (the stepscope executable and the
        collector found, or a recording to join), said then rather than at the first window, hours in."""
        from ._session import cannot_record

        why = cannot_record(self.options.get("cli"))
        if why:
            self.broken = why
            self.say(f"stepscope: not recording, training goes on: {why}")

    def before_step(self, i):
        self.seen = i
        if self.window is not None and i == self.last:
            return  # this step is marked already (a trainer that announces a step twice)
        if self.window is not None and self.range[1] is not None and i >= self.range[1]:
            # The window's last step ends where the next begins: each step spans the trainer's whole loop
            # iteration (its step, logging, the next batch's fetch), the last one too.
            _mark_step(_SOURCE)
            self.window.step_end = None  # ended here: the window's close marks nothing more
            self.close()
        if self.window is None:
            end = self.windows.starting_at(i)
            if end is False and self.range is None:
                end = self.windows.inside(i)  # the first step seen lies inside a window: resumed from a checkpoint
            if end is not False:
                self.open(i, end)
        if self.window is not None:
            _mark_step(_SOURCE)
            self.last = i

    def after_step(self):
        if self.window is not None:
            self.window.step_end = time.monotonic_ns()

    def end(self):
        """The training ended (or failed) with a window open: its last step ends where the trainer's last
        optimizer step ended (the window's step_end, which its close marks: at the program's exit too, when the
        trainer's end hook never ran)."""
        if self.window is not None:
            self.close()
        elif not self.opened and not self.broken and self.seen is not None:
            # Not silence: a window the run never reached reads as if nothing was wrong with the callback.
            self.say(f"stepscope: {self.windows.first_window()} not reached (training ended after step "
                     f"{self.seen}): nothing recorded")
        self.release()

    def open(self, first, end):
        from ._session import RecordingError, Window

        if self.broken:
            return
        self.opened = True
        try:
            window = Window(self.output_for(first, end), **self.options)
            window.make_folder = True  # not under `record --paused`, whose store is the launcher's
            self.window = window.open()
        except Exception as e:  # noqa: BLE001 - whatever it is (a library that does not load), training goes on
            # A window that cannot open (a bad option, an attach that timed out, a collector that does not load)
            # must not end a training run hours in: one line, the window's steps go unrecorded, the next window
            # tries again.
            self.window, self.range = None, (first, end)  # not tried again inside this window
            why = str(e) if isinstance(e, RecordingError) else f"{type(e).__name__}: {e}"
            self.say(f"stepscope: steps from {first}: not recorded, training goes on: {why}")
            return
        self.window.step_end = None  # no step of the window has ended yet
        self.range = (first, end)
        self.last = None

    def close(self):
        from ._session import RecordingError

        window, (first, end) = self.window, self.range
        self.window = None
        # The steps marked, not the window asked for: training that ends inside a window ends it early.
        last = self.last if self.last is not None else first
        steps = f"steps {first}-{last}" if end is not None else f"steps from {first}"
        if end is not None and last < end - 1:
            steps += f" of the window {first}-{end - 1} (training ended)"
        mode = window.mode
        try:
            analysis = window.close()
        except Exception as e:  # noqa: BLE001 - a store not written or not analyzed is said, never raised into training
            self.say(f"stepscope: {steps}: {e if isinstance(e, RecordingError) else f'{type(e).__name__}: {e}'}")
            return
        if analysis is not None:
            self.analyses.append(analysis)
            replaced = " (replaced the store that was there)" if window.replaced else ""
            self.say(f"stepscope: {steps}: {analysis.one_line()}{replaced}")
        elif window.output:
            how = "recorded" if mode == "paused" else "marked in the recording running"
            self.say(f"stepscope: {steps}: {how}; `stepscope record` writes {window.output} when the program ends")
        else:
            self.say(f"stepscope: {steps}: marked in the recording `stepscope attach` is making")

    def say(self, line):
        self.lines.append(line)
        self.emit(line)


def _emitter(logger):
    """Logs to the trainer's logger when it shows INFO lines, else prints to stderr: the line is always seen."""

    def emit(line):
        if logger.isEnabledFor(logging.INFO):
            logger.info(line)
        else:
            print(line, file=sys.stderr, flush=True)

    return emit


def _record_options(kw):
    allowed = {"cpu_hz", "wall", "no_gpu", "gpu_window", "step_func", "data_wait_func", "cli", "analyze"}
    unknown = set(kw) - allowed
    if unknown:
        raise TypeError(f"stepscope: unknown option(s) {', '.join(sorted(unknown))}")
    # Checked when the trainer is built, not when the first window opens, hours in.
    hz = kw.get("cpu_hz")
    whole = isinstance(hz, numbers.Integral) or (isinstance(hz, float) and hz.is_integer())  # 1e3, numpy ints
    if hz is not None and (isinstance(hz, bool) or not whole or hz <= 0):
        raise ValueError(f"stepscope: cpu_hz={hz!r}: expected a whole number of samples a second, e.g. 1000")
    for key in ("gpu_window", "step_func", "data_wait_func", "cli"):
        if kw.get(key) is not None and not isinstance(kw[key], str):
            raise ValueError(f"stepscope: {key}={kw[key]!r}: expected a string")
    return kw


def _make_transformers_callback():
    from transformers import TrainerCallback

    class StepscopeCallback(TrainerCallback):
        """transformers.Trainer callback: records optimizer steps with stepscope (see stepscope.integrations).

        output: the store (default <output_dir>/stepscope.db); steps / every, length: the window(s); other
        keywords: cpu_hz, wall, no_gpu, gpu_window, step_func, data_wait_func, cli (as `stepscope attach`'s)."""

        def __init__(self, output=None, steps=None, every=None, length=None, **options):
            self.windows = StepWindows(steps, every, length)
            self._output = output
            self._options = _record_options(options)
            self._recorder = None
            self._analyses = []

        @property
        def analyses(self):
            """The analyses of the stores written so far, over every train() this callback saw
            (stepscope._session.Analysis)."""
            return self._analyses

        def on_train_begin(self, args, state, control, **kwargs):
            output = self._output or os.path.join(args.output_dir or ".", "stepscope.db")
            emit = _emitter(logging.getLogger("transformers.trainer"))
            self._recorder = _Recorder(output, self.windows, emit, self._options, self._analyses)
            if not self._recorder.claim(state):
                self._recorder = None
                return
            self._recorder.preflight()

        def on_step_begin(self, args, state, control, **kwargs):
            if self._recorder is not None:
                self._recorder.before_step(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            if self._recorder is not None:
                self._recorder.after_step()

        def on_train_end(self, args, state, control, **kwargs):
            if self._recorder is not None:
                self._recorder.end()

    return StepscopeCallback


def _lightning_callback_base():
    # The package the program's Trainer comes from: `lightning` (lightning.pytorch) or `pytorch_lightning`.
    if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
        from pytorch_lightning import Callback
    else:
        try:
            from lightning.pytorch import Callback
        except ImportError:
            from pytorch_lightning import Callback
    return Callback


def _make_lightning_callback():
    Callback = _lightning_callback_base()

    class StepscopeLightningCallback(Callback):
        """Lightning callback: records optimizer steps (trainer.global_step) with stepscope; with gradient
        accumulation a step spans its batches (see stepscope.integrations).

        output: the store (default <default_root_dir>/stepscope.db); steps / every, length: the window(s); other
        keywords: cpu_hz, wall, no_gpu, gpu_window, step_func, data_wait_func, cli."""

        def __init__(self, output=None, steps=None, every=None, length=None, **options):
            super().__init__()
            self.windows = StepWindows(steps, every, length)
            self._output = output
            self._options = _record_options(options)
            self._recorder = None
            self._analyses = []
            self._started = None  # the global step whose first batch has begun

        @property
        def analyses(self):
            """The analyses of the stores written so far, over every fit() this callback saw."""
            return self._analyses

        def on_train_start(self, trainer, pl_module):
            output = self._output or os.path.join(trainer.default_root_dir or ".", "stepscope.db")
            emit = _emitter(logging.getLogger("lightning.pytorch.callbacks.stepscope"))
            self._recorder = _Recorder(output, self.windows, emit, self._options, self._analyses)
            self._started = None
            if not self._recorder.claim(trainer):
                self._recorder = None
                return
            self._recorder.preflight()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            # The first batch of an optimizer step starts it; with accumulation the others continue it.
            if self._recorder is not None and trainer.global_step != self._started:
                self._started = trainer.global_step
                self._recorder.before_step(trainer.global_step)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self._recorder is not None and self._started is not None and trainer.global_step > self._started:
                self._recorder.after_step()

        def on_train_end(self, trainer, pl_module):
            if self._recorder is not None:
                self._recorder.end()

        def on_exception(self, trainer, pl_module, exception):
            if self._recorder is not None:
                self._recorder.end()

    return StepscopeLightningCallback


_makers = {"StepscopeCallback": _make_transformers_callback, "StepscopeLightningCallback": _make_lightning_callback}


def __getattr__(name):
    maker = _makers.get(name)
    if maker is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = maker()
    globals()[name] = cls
    return cls
