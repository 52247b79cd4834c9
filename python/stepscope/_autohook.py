"""Automatic data-wait and step marks for unmodified Python trainers, installed by the collector itself in every
Python process it records (collector/src/python/python_hooks.cpp runs install() on the interpreter's own thread).

Mechanisms (docs/python.md says why and how precise each is):
- Known framework entry points are wrapped when their module is first imported (an import hook; nothing is
  imported by us): torch.utils.data.dataloader._BaseDataLoaderIter.__next__ (data wait "dataloader", and a
  step boundary at each call until Optimizer.step marks exist), torch.optim.Optimizer.step (step boundary
  "optimizer" at its end, through torch's global optimizer step post-hook), tf.data's OwnedIterator.__next__/get_next
  (data wait "tf.data", and a step boundary "dataloader" at each call). The wrapper reads
  time.monotonic_ns() on entry and exit on the calling thread, so a wait blocked off-CPU (DataLoader worker
  queues) is measured exactly.
- --data-wait-func / --step-func (install()'s wait_func / step_func: regexes over qualified names
  "module.Class.func"; data wait source "data-wait-func", step source "step-func", an explicit marker like stepscope.step()'s "api"): on
  3.12+ sys.monitoring PY_START/PY_RESUME/PY_RETURN/PY_YIELD/PY_UNWIND events, with every non-matching code
  object disabled after its first call; before 3.12 a sys.setprofile/threading.setprofile filter.
Only the outermost wait of a thread is recorded: nested matches never count twice.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
import time

_now = time.monotonic_ns
_tls = threading.local()


# ---- where marks go -----------------------------------------------------------------------------------

class _Sink:
    """The collector's C entry points, or (for tests and debugging) a text log named by STEPSCOPE_PYTHON_LOG."""

    def __init__(self):
        from . import _c, data_wait_interval, step_at  # this package's marker API: the same C entry points

        self.collector = _c.wait is not None
        self._wait = data_wait_interval
        self._step = step_at
        self._log = None
        self._lock = threading.Lock()
        path = os.environ.get("STEPSCOPE_PYTHON_LOG")
        if path:
            self._log = open(path, "a", buffering=1)

    @property
    def usable(self):
        return self.collector or self._log is not None

    def wait(self, start, end, source):
        if self.collector:
            self._wait(start, end, source)
        if self._log is not None:
            with self._lock:
                self._log.write(f"wait {os.getpid()} {threading.get_native_id()} {start} {end} {source}\n")

    def step(self, t, source):
        if self.collector:
            self._step(t, source)
        if self._log is not None:
            with self._lock:
                self._log.write(f"step {os.getpid()} {threading.get_native_id()} {t} {source}\n")


_sink = None
_optimizer_seen = False  # once Optimizer.step marks steps, DataLoader calls no longer do


def _wait_depth():
    return getattr(_tls, "depth", 0)


def _begin_wait():
    d = getattr(_tls, "depth", 0)
    _tls.depth = d + 1
    return d == 0


def _end_wait(start, source, outer):
    _tls.depth -= 1
    if outer:
        _sink.wait(start, _now(), source)


# ---- wrappers for known framework functions --------------------------------------------------------------

def _wrap_data_wait(fn, source, marks_step):
    """Each outermost call is a data wait of `source`; with marks_step it also starts a step (step source
    "dataloader": the data-loader boundary level of the analyzer's step sources) until optimizer steps exist."""
    if getattr(fn, "__stepscope_wrapped__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = _now()
        if marks_step and not _optimizer_seen and _wait_depth() == 0:
            _sink.step(start, "dataloader")
        outer = _begin_wait()
        try:
            return fn(*args, **kwargs)
        finally:
            _end_wait(start, source, outer)

    wrapper.__stepscope_wrapped__ = True
    return wrapper


def _patch_torch_dataloader(module):
    cls = getattr(module, "_BaseDataLoaderIter", None)
    if cls is not None and "__next__" in cls.__dict__:
        cls.__next__ = _wrap_data_wait(cls.__dict__["__next__"], "dataloader", marks_step=True)


def _optimizer_step_done(*_args, **_kwargs):
    global _optimizer_seen
    _optimizer_seen = True
    _sink.step(_now(), "optimizer")


def _patch_torch_optimizer(module):
    # torch >= 2.0 calls global post-hooks after every optimizer's step(), whatever subclass overrides it.
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(_optimizer_step_done)
        return
    cls = getattr(module, "Optimizer", None)
    if cls is None:
        return
    # Older torch: SGD, Adam, ... override step(); wrap each subclass's step, now and at class creation.
    def wrap(sub):
        if "step" in sub.__dict__ and not getattr(sub.__dict__["step"], "__stepscope_wrapped__", False):
            original = sub.__dict__["step"]

            @functools.wraps(original)
            def step(*args, **kwargs):
                try:
                    return original(*args, **kwargs)
                finally:
                    _optimizer_step_done()

            step.__stepscope_wrapped__ = True
            sub.step = step

    previous = cls.__dict__.get("__init_subclass__")

    def __init_subclass__(sub, **kwargs):
        if previous is not None:
            previous.__func__(sub, **kwargs)
        wrap(sub)

    cls.__init_subclass__ = classmethod(__init_subclass__)
    stack = list(cls.__subclasses__())
    while stack:
        sub = stack.pop()
        wrap(sub)
        stack.extend(sub.__subclasses__())


def _patch_tf_iterator(module):
    for name in ("OwnedIterator", "IteratorBase"):
        cls = getattr(module, name, None)
        if cls is None:
            continue
        for meth in ("__next__", "get_next", "get_next_as_optional"):
            if meth in cls.__dict__:
                setattr(cls, meth, _wrap_data_wait(cls.__dict__[meth], "tf.data", marks_step=True))


_TARGETS = {
    "torch.utils.data.dataloader": _patch_torch_dataloader,
    "torch.optim.optimizer": _patch_torch_optimizer,
    "tensorflow.python.data.ops.iterator_ops": _patch_tf_iterator,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:  # never break the user's import
            _debug(f"patching {module.__name__} failed: {e!r}")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ImportHook(importlib.abc.MetaPathFinder):
    """Patches the target modules right after they execute; finds them through the other finders."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _TARGETS.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


# ---- regex-matched functions ----------------------------------------------------------------------------

def _compile(option, text):
    text = (text or "").strip()
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        print(f"stepscope: {option} {text!r} is not a valid regex ({e}); ignored", file=sys.stderr)
        return None


class _RegexHooks:
    """Maps code objects to 'wait' / 'step' / None by their qualified name, once per code object."""

    def __init__(self, wait_re, step_re):
        self.wait_re, self.step_re = wait_re, step_re
        self.kind = {}
        # This package's own functions never match (its file names: a folder on disk, or the collector's embedded copy).
        self.own_files = {os.path.dirname(os.path.abspath(install.__code__.co_filename))}

    def classify(self, code, globals_):
        kind = self.kind.get(code)
        if kind is not None or code in self.kind:
            return kind
        qual = getattr(code, "co_qualname", code.co_name)
        module = globals_.get("__name__", "") if globals_ is not None else ""
        names = (f"{module}.{qual}" if module else qual, qual)
        kind = None
        if os.path.dirname(os.path.abspath(code.co_filename)) not in self.own_files:
            if self.wait_re is not None and any(self.wait_re.search(n) for n in names):
                kind = "wait"
            elif self.step_re is not None and any(self.step_re.search(n) for n in names):
                kind = "step"
        self.kind[code] = kind
        return kind

    # A per-thread stack of (code, start, outer) for the open waits of matched code.
    def enter(self, code, kind):
        if kind == "step":
            _sink.step(_now(), "step-func")
            return
        stack = getattr(_tls, "regex_stack", None)
        if stack is None:
            stack = _tls.regex_stack = []
        stack.append((code, _now(), _begin_wait()))

    def leave(self, code):
        stack = getattr(_tls, "regex_stack", None)
        if stack and stack[-1][0] is code:
            _, start, outer = stack.pop()
            _end_wait(start, "data-wait-func", outer)


def _install_monitoring(hooks):
    mon = sys.monitoring
    tool = next((t for t in (4, 3, 5, 2) if mon.get_tool(t) is None), None)
    if tool is None:
        _debug("no free sys.monitoring tool id; --data-wait-func/--step-func ignored")
        return False
    mon.use_tool_id(tool, "stepscope")
    E = mon.events
    disable = mon.DISABLE

    def on_start(code, offset):
        kind = hooks.kind.get(code, 0)
        if kind == 0:
            kind = hooks.classify(code, sys._getframe(1).f_globals)
        if kind is None:
            return disable
        hooks.enter(code, kind)

    def on_stop(code, offset, retval):
        kind = hooks.kind.get(code)
        if kind is None:
            return disable
        if kind == "wait":
            hooks.leave(code)

    def on_unwind(code, offset, exc):  # not disableable: cheap membership test only
        if hooks.kind.get(code) == "wait":
            hooks.leave(code)

    mon.register_callback(tool, E.PY_START, on_start)
    mon.register_callback(tool, E.PY_RESUME, on_start)
    mon.register_callback(tool, E.PY_RETURN, on_stop)
    mon.register_callback(tool, E.PY_YIELD, on_stop)
    mon.register_callback(tool, E.PY_UNWIND, on_unwind)
    mon.set_events(tool, E.PY_START | E.PY_RESUME | E.PY_RETURN | E.PY_YIELD | E.PY_UNWIND)
    return True


def _install_profile(hooks):
    kinds = hooks.kind

    def profile(frame, event, arg):
        if event[1] == "_":  # c_call / c_return / c_exception
            return
        code = frame.f_code
        kind = kinds.get(code, 0)
        if kind == 0:
            kind = hooks.classify(code, frame.f_globals)
        if kind is None:
            return
        if event == "call":
            hooks.enter(code, kind)
        elif event == "return" and kind == "wait":
            hooks.leave(code)

    threading.setprofile(profile)
    sys.setprofile(profile)
    return True


# ---- entry point ----------------------------------------------------------------------------------------

def _debug(msg):
    if os.environ.get("STEPSCOPE_PYTHON_DEBUG"):
        print(f"stepscope: {msg}", file=sys.stderr)


_installed = False


def install(wait_func=None, step_func=None):
    """Installs the hooks once; returns False (and does nothing) when neither collector nor log is there.
    wait_func / step_func: the --data-wait-func / --step-func regexes (default: STEPSCOPE_DATA_WAIT_FUNC /
    STEPSCOPE_STEP_FUNC from the environment)."""
    global _sink, _installed
    if _installed:
        return True
    sink = _Sink()
    if not sink.usable:
        return False
    _sink = sink
    _installed = True
    hook = _ImportHook()
    sys.meta_path.insert(0, hook)
    for name, patch in _TARGETS.items():  # already imported (e.g. installed late): patch now
        module = sys.modules.get(name)
        if module is not None:
            try:
                patch(module)
            except Exception as e:
                _debug(f"patching {name} failed: {e!r}")
    if wait_func is None:
        wait_func = os.environ.get("STEPSCOPE_DATA_WAIT_FUNC")
    if step_func is None:
        step_func = os.environ.get("STEPSCOPE_STEP_FUNC")
    wait_re, step_re = _compile("--data-wait-func", wait_func), _compile("--step-func", step_func)
    if wait_re is not None or step_re is not None:
        hooks = _RegexHooks(wait_re, step_re)
        if hasattr(sys, "monitoring"):
            _install_monitoring(hooks)
        else:
            _install_profile(hooks)
    _debug(f"hooks installed (collector={'yes' if sink.collector else 'no'})")
    return True
