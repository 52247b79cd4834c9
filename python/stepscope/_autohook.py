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
  "module.Class.func"; data wait source "data-wait-func", step source "step-func", an explicit marker like
  stepscope.step()'s "api"): on 3.13+ sys.monitoring, PY_START global (every non-matching code object disabled
  at its first call) and local events on the matching ones; on 3.9-3.12 the matching functions' __code__
  swapped for a trampoline (below), so no other call of the program runs anything of ours.
- torch.autograd.profiler's _prepare_profiler / _disable_profiler: a profile with CUDA activity (torch.profiler)
  is lent CUDA tracing for its span (below; docs/collector.md, "A good neighbour to torch.profiler").
The framework wrappers record a thread's outermost wait only; the function hooks record each (the analyzer
counts a thread's waits as their union). uninstall() takes everything out again: a closed recording window leaves
the program as it was (issue 47).
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
import time
import types

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
            self.log("wait", start, end, source)

    def step(self, t, source):
        if self.collector:
            self._step(t, source)
        if self._log is not None:
            self.log("step", t, source)

    def log(self, kind, *fields):
        """One line of the text log, when there is one: kind, pid, thread, then the fields."""
        if self._log is not None:
            with self._lock:
                self._log.write(" ".join(map(str, (kind, os.getpid(), threading.get_native_id()) + fields)) + "\n")

    def hook_info(self, info, costs):
        from . import _c

        if self.collector and _c.hook_cost is not None:
            _c.hook_cost(int(costs[0]), int(costs[1]), info.encode())


_sink = None
_optimizer_seen = False  # once Optimizer.step marks steps, DataLoader calls no longer do
_active = False  # a wrapper that another library kept a reference to passes straight through when False
_undo = []  # what install() changed, undone in reverse by uninstall()


def _patch_attr(cls, name, new):
    """Sets cls.name = new, and puts the old one back at uninstall unless someone replaced ours since."""
    had = name in cls.__dict__
    old = cls.__dict__.get(name)
    setattr(cls, name, new)

    def undo():
        if cls.__dict__.get(name) is new:
            if had:
                setattr(cls, name, old)
            else:
                delattr(cls, name)

    _undo.append(undo)


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
        if not _active:
            return fn(*args, **kwargs)
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
        _patch_attr(cls, "__next__", _wrap_data_wait(cls.__dict__["__next__"], "dataloader", marks_step=True))


def _optimizer_step_done(*_args, **_kwargs):
    global _optimizer_seen
    if not _active:
        return
    _optimizer_seen = True
    _sink.step(_now(), "optimizer")


def _patch_torch_optimizer(module):
    # torch >= 2.0 calls global post-hooks after every optimizer's step(), whatever subclass overrides it.
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is not None:
        handle = register(_optimizer_step_done)
        _undo.append(handle.remove)
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
            _patch_attr(sub, "step", step)

    previous = cls.__dict__.get("__init_subclass__")

    def __init_subclass__(sub, **kwargs):
        if previous is not None:
            previous.__func__(sub, **kwargs)
        if _active:
            wrap(sub)

    _patch_attr(cls, "__init_subclass__", classmethod(__init_subclass__))
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
                _patch_attr(cls, meth, _wrap_data_wait(cls.__dict__[meth], "tf.data", marks_step=True))


# ---- collectives: torch.distributed process groups ---------------------------------------------------------
#
# Every collective of any backend (gloo, NCCL, MPI, ...) goes through the C++ ProcessGroup, DDP's bucketed
# all-reduces from its C++ reducer included; ProcessGroup.register_pre_hook/register_post_hook (torch 2.15) call
# Python around each of them on the issuing thread. The pre-hook reads the issue time; the post-hook gets the Work
# (its per-group sequence number) and, through its future, a callback on the backend's thread when the collective
# has completed on this rank. One range per collective from issue to completion, on the issuing thread: domain
# "stepscope.comm", name "<kind> <bytes>B pg=<group> seq=<n> <sync|async>" (docs/python.md, "Collectives").
# Every group is hooked as torch registers it (distributed_c10d._register_process_group), and the groups that
# exist at install.

_COMM_DOMAIN = b"stepscope.comm"
_COMM_HOOK_ID = 0x5757  # our id among a group's pre/post hooks
_COMM_KINDS = {
    "ALLREDUCE": "all_reduce", "ALLREDUCE_COALESCED": "all_reduce", "ALLGATHER": "all_gather",
    "ALLGATHER_BASE": "all_gather", "ALLGATHER_COALESCED": "all_gather",
    "ALLGATHER_INTO_TENSOR_COALESCED": "all_gather", "REDUCE_SCATTER": "reduce_scatter",
    "REDUCE_SCATTER_BASE": "reduce_scatter", "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter",
    "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all", "SEND": "send", "RECV": "recv",
    "BROADCAST": "broadcast", "REDUCE": "reduce", "BARRIER": "barrier", "SCATTER": "scatter", "GATHER": "gather",
}
_comm_groups = {}  # id(pg) -> pg, the groups our hooks are on


def _comm_range(start, end, tid, name):
    if _sink.collector and _c_range is not None:
        _c_range(start, end, tid, _COMM_DOMAIN, name.encode())
    if _sink._log is not None:
        with _sink._lock:
            _sink._log.write(f"range {os.getpid()} {tid} {start} {end} stepscope.comm {name}\n")


def _hook_group(pg):
    if id(pg) in _comm_groups or not hasattr(pg, "register_pre_hook"):
        return
    try:
        group = str(pg.group_name)
    except Exception:
        group = "?"
    pending = {}  # op_id -> (start, tid, kind, bytes, sync)

    def pre(a):
        if not _active:
            return
        op = str(a.name).rsplit(".", 1)[-1]
        size = 0
        for t in a.input_tensors:
            size += t.numel() * t.element_size()
        pending[a.op_id] = (_now(), threading.get_native_id(), _COMM_KINDS.get(op, op.lower()), size,
                            "async" if a.async_op else "sync")

    def post(a):
        p = pending.pop(a.op_id, None)
        if p is None or not _active:
            return
        start, tid, kind, size, how = p
        work = a.work
        seq = -1
        if work is not None:
            try:
                seq = work._get_sequence_number()
            except Exception:
                pass
        name = f"{kind} {size}B pg={group} seq={seq} {how}"
        try:
            fut = work.get_future() if work is not None else None
        except RuntimeError:  # gloo's send/recv works have none: the range ends at the issue
            fut = None
        if fut is None:
            _comm_range(start, _now(), tid, name + " issued")
        else:
            fut.add_done_callback(lambda _f: _comm_range(start, _now(), tid, name) if _active else None)

    pg.register_pre_hook(_COMM_HOOK_ID, pre)
    pg.register_post_hook(_COMM_HOOK_ID, post)
    _comm_groups[id(pg)] = pg


def _unhook_groups():
    for pg in _comm_groups.values():
        try:
            pg.unregister_pre_hook(_COMM_HOOK_ID)
            pg.unregister_post_hook(_COMM_HOOK_ID)
        except Exception as e:
            _debug(f"unhooking a process group failed: {e!r}")
    _comm_groups.clear()


def _patch_torch_distributed(module):
    register = module.__dict__.get("_register_process_group")
    if register is None or not hasattr(getattr(module, "ProcessGroup", None), "register_pre_hook"):
        _debug("torch.distributed: no ProcessGroup.register_pre_hook; collectives are not recorded")
        return

    @functools.wraps(register)
    def _register_process_group(name, pg, *args, **kwargs):
        out = register(name, pg, *args, **kwargs)
        if _active:
            try:
                _hook_group(pg)
            except Exception as e:  # never break the user's init_process_group
                _debug(f"hooking process group {name} failed: {e!r}")
        return out

    _patch_attr(module, "_register_process_group", _register_process_group)
    _undo.append(_unhook_groups)
    world = getattr(module, "_world", None)
    for pg in list(getattr(world, "pg_map", {}) or {}):  # groups made before install (attach)
        try:
            _hook_group(pg)
        except Exception as e:
            _debug(f"hooking an existing process group failed: {e!r}")


_c_range = None  # the collector's stepscope_collector_range, bound at install


# ---- torch.profiler: a good neighbour to the user's own profiler ---------------------------------------------
#
# CUPTI has one set of activity buffer callbacks and one set of enabled kinds per process. torch.profiler (Kineto)
# registers its callbacks and enables its kinds when a profile with CUDA activity is prepared, and disables them
# when it stops; stepscope's GPU windows switching kinds or detaching CUPTI in between would cut the user's trace,
# and its own records would go to Kineto's callbacks. So stepscope lends CUDA tracing for that while: before
# torch.autograd.profiler's _prepare_profiler (what torch.profiler.profile and torch.autograd.profiler.profile
# both call) with ProfilerActivity.CUDA, the collector closes its window and flushes (stepscope_collector_cuda_lend);
# after _disable_profiler, it registers its callbacks again and the window reopens (..._cuda_take_back). The
# CPU sampler and the Python hooks go on throughout.

# The process that lent, or 0: a forked child (the collector forgets the parent's lend there, after_fork_child)
# has lent nothing. Kept across uninstall/install: a profile that ends while the hooks are out (between two attach
# windows) leaves CUDA tracing lent until a later profile's end is seen; it is never taken back under a profile
# that may still run.
_cuda_lent_by = 0
_cuda_lock = threading.Lock()  # a lend or take-back with its collector call, one at a time


def _lend_cuda(who):
    global _cuda_lent_by
    from . import _c

    logged = _sink is not None and _sink._log is not None
    with _cuda_lock:
        if _cuda_lent_by == os.getpid() or (_c.cuda_lend is None and not logged):
            return False
        _cuda_lent_by = os.getpid()
        if _c.cuda_lend is not None:
            _c.cuda_lend(who.encode())
    if logged:
        _sink.log("cuda-lend", _now(), who)
    return True


def _take_back_cuda():
    global _cuda_lent_by
    from . import _c

    with _cuda_lock:
        if _cuda_lent_by != os.getpid():
            return
        if _c.cuda_take_back is not None:
            _c.cuda_take_back()
        _cuda_lent_by = 0
    if _sink is not None:
        _sink.log("cuda-take-back", _now())


def _wants_cuda(activities):
    try:
        return any(getattr(a, "name", "") == "CUDA" for a in activities)
    except TypeError:
        return False


def _patch_torch_profiler(module):
    prepare = module.__dict__.get("_prepare_profiler")
    disable = module.__dict__.get("_disable_profiler")
    if prepare is None or disable is None:
        _debug("torch.autograd.profiler: no _prepare_profiler/_disable_profiler; CUDA tracing is not lent to it")
        return

    @functools.wraps(prepare)
    def _prepare_profiler(config, activities, *args, **kwargs):
        lent_here = False
        if _active and _cuda_lent_by != os.getpid() and _wants_cuda(activities):
            try:
                lent_here = _lend_cuda("torch.profiler")
            except Exception as e:  # never break the user's profiler
                _debug(f"lending CUDA tracing failed: {e!r}")
        try:
            return prepare(config, activities, *args, **kwargs)
        except BaseException:
            if lent_here:
                _take_back_cuda()  # it never started: nothing will stop it
            raise

    @functools.wraps(disable)
    def _disable_profiler(*args, **kwargs):
        try:
            return disable(*args, **kwargs)
        finally:
            if _cuda_lent_by == os.getpid():
                try:
                    _take_back_cuda()
                except Exception as e:
                    _debug(f"taking CUDA tracing back failed: {e!r}")

    _patch_attr(module, "_prepare_profiler", _prepare_profiler)
    _patch_attr(module, "_disable_profiler", _disable_profiler)


_TARGETS = {
    "torch.utils.data.dataloader": _patch_torch_dataloader,
    "torch.optim.optimizer": _patch_torch_optimizer,
    "torch.distributed.distributed_c10d": _patch_torch_distributed,
    "torch.autograd.profiler": _patch_torch_profiler,
    "tensorflow.python.data.ops.iterator_ops": _patch_tf_iterator,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        if not _active:
            return
        try:
            if self._patch is not None:
                self._patch(module)
            if _func_hooks is not None and _monitoring is None:
                _func_hooks.scan_module(module)  # before anyone outside the module can call its functions
        except Exception as e:  # never break the user's import
            _debug(f"patching {module.__name__} failed: {e!r}")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ImportHook(importlib.abc.MetaPathFinder):
    """Patches the target modules right after they execute; finds them through the other finders."""

    def find_spec(self, fullname, path=None, target=None):
        patch = _TARGETS.get(fullname)
        if patch is None and (_func_hooks is None or _monitoring is not None):
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


# ---- regex-matched functions (--data-wait-func / --step-func) ------------------------------------------------
#
# 3.13+: sys.monitoring. PY_START is the only global event, and a code object that does not match is disabled
# at its first call (DISABLE), so after warm-up only the matching functions raise events; their PY_RESUME /
# PY_RETURN / PY_YIELD are local events of those code objects alone (PY_UNWIND, global by design, only with a
# wait regex).
# 3.9-3.12: no per-call hook at all. The matching functions are found by scanning module and class
# dictionaries (at install, after each import, and for __main__ while its code defines them) and each one's
# __code__ is swapped for a trampoline that marks the call and calls a copy of the original: every reference to
# the function object sees it, and the rest of the program runs untouched. Until the matching functions of
# __main__ exist (`record` installs the hooks before the script's first line), a profile function on the main
# thread watches for them, and removes itself once they are all wrapped.

_HOOK_FILE = "<stepscope-collector>/hook"  # the trampolines' file: the analyzer counts their samples as ours
_CO_OPTIMIZED, _CO_GENERATOR, _CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x1, 0x20, 0x80, 0x200


def _compile(option, text):
    text = (text or "").strip()
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        print(f"stepscope: {option} {text!r} is not a valid regex ({e}); ignored", file=sys.stderr)
        return None


# The marks of hooked calls: _step_mark() at a step-func call, _wait_begin() / _wait_end() around a
# data-wait-func call (a stack per thread: nested waits each give a row, and the analyzer counts a thread's waits
# as their union). _set_marks() binds them at install: straight to the collector's C entry points (one ctypes
# call each, the source already bytes; the collector reads the clock) when marks go only there, through _Sink
# with the text log.
def _step_mark():
    _sink.step(_now(), "step-func")


def _wait_begin():
    stack = getattr(_tls, "func_waits", None)
    if stack is None:
        stack = _tls.func_waits = []
    stack.append((_now(), _begin_wait()))


def _wait_end():
    stack = getattr(_tls, "func_waits", None)
    if stack:
        start, outer = stack.pop()
        _end_wait(start, "data-wait-func", outer)


_slow_marks = (_step_mark, _wait_begin, _wait_end)


def _set_marks(probe=False):
    """Binds _step_mark / _wait_begin / _wait_end. probe: the collector goes through the same motions on this
    thread and records nothing (what a hooked call costs is measured so: a real mark would add a step)."""
    global _step_mark, _wait_begin, _wait_end
    from . import _c

    if _c.probe is not None:
        _c.probe(1 if probe else 0)
    fast = _c.step is not None and _c.wait_begin is not None and _c.probe is not None
    if not fast and probe:  # no collector (the text log alone): calibrate on no-ops
        _step_mark = _wait_begin = _wait_end = lambda: None
    elif not fast or (_sink._log is not None and not probe):
        _step_mark, _wait_begin, _wait_end = _slow_marks
    else:
        _step_mark = functools.partial(_c.step, b"step-func")
        _wait_begin = functools.partial(_c.wait_begin, b"data-wait-func")
        _wait_end = functools.partial(_c.wait_end)  # a ctypes function is unhashable: so would the trampolines be


class _Resumes:
    """Drives a matched generator like `yield from` would, each resume a step mark or a timed wait."""

    __slots__ = ("_gen", "_kind")

    def __init__(self, gen, kind):
        self._gen, self._kind = gen, kind

    def __iter__(self):
        return self

    def _resume(self, how, value):
        if self._kind == "step":
            _step_mark()
            return how(value)
        _wait_begin()
        try:
            return how(value)
        finally:
            _wait_end()

    def __next__(self):
        return self._resume(lambda _: next(self._gen), None)

    def send(self, value):
        return self._resume(self._gen.send, value)

    def throw(self, *exc):
        return self._resume(lambda e: self._gen.throw(*e), exc)

    def close(self):
        return self._gen.close()


class _FuncHooks:
    """Which functions match, and (3.9-3.12) the trampolines swapped into them."""

    def __init__(self, wait_re, step_re):
        self.wait_re, self.step_re = wait_re, step_re
        self.kind = {}  # code object -> "wait" / "step" / None (sys.monitoring: every code object seen at its first call)
        self.wrapped = {}  # id(function) -> (function, its own code, the trampoline)
        self.scanned = {}  # id(module dict) -> (the dict, its length at the last scan)
        self.templates = {}  # (freevars, generator, kind) -> trampoline code with the const slots to fill
        self.nested = set()  # matching nested functions (trampolines: not wrapped; said once)
        self.trampoline_codes = set()
        self.wrapped_codes = set()  # the wrapped functions' own code objects (the exec watch asks at every call event)
        # This package's own functions never match (its file names: a folder on disk, or the collector's embedded copy).
        own = install.__code__.co_filename
        self.own_prefix = "<stepscope-collector>" if own.startswith("<stepscope-collector>") else os.path.dirname(
            os.path.abspath(own))

    def match(self, module, qual, filename):
        if filename.startswith(self.own_prefix):
            return None
        names = (f"{module}.{qual}" if module else qual, qual)
        if self.wait_re is not None and any(self.wait_re.search(n) for n in names):
            return "wait"
        if self.step_re is not None and any(self.step_re.search(n) for n in names):
            return "step"
        return None

    def classify(self, code, globals_):
        kind = self.kind.get(code, 0)
        if kind != 0:
            return kind
        module = globals_.get("__name__", "") if globals_ is not None else ""
        kind = self.match(module, getattr(code, "co_qualname", code.co_name), code.co_filename)
        self.kind[code] = kind
        return kind

    # -- 3.9-3.12: trampolines ------------------------------------------------------------------------------

    def _template(self, freevars, generator, kind):
        key = (freevars, generator, kind)
        code = self.templates.get(key)
        if code is not None:
            return code
        # The trampoline closes over the same names as the function (its closure cells stay the function's), in
        # the same sorted order; `if 0:` keeps them free variables without running anything.
        keep = f"        if 0:\n            {'; '.join(freevars)}\n" if freevars else ""
        outer = f"    {' = '.join(freevars)} = None\n" if freevars else ""
        if generator:
            body = "        return (yield from '__RESUMES__'('__ORIG__'(*__ss_a, **__ss_k), '__KIND__'))\n"
        elif kind == "step":
            body = "        '__MARK__'()\n        return '__ORIG__'(*__ss_a, **__ss_k)\n"
        else:
            body = ("        '__BEGIN__'()\n        try:\n            return '__ORIG__'(*__ss_a, **__ss_k)\n"
                    "        finally:\n            '__END__'()\n")
        src = f"def _outer():\n{outer}    def trampoline(*__ss_a, **__ss_k):\n{keep}{body}    return trampoline\n"
        ns = {}
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "'str' object is not callable": the strings are slots, filled below
            exec(compile(src, _HOOK_FILE, "exec"), ns)
        code = ns["_outer"]().__code__
        self.templates[key] = code
        return code

    def wrap(self, fn, kind):
        """Swaps fn's code for a trampoline; False where it cannot be done (left as it is)."""
        if id(fn) in self.wrapped:
            return True
        code = fn.__code__
        if code.co_flags & (_CO_COROUTINE | _CO_ASYNC_GENERATOR):
            _debug(f"{fn.__qualname__}: coroutines are hooked on CPython 3.13+ only")
            return False
        template = self._template(code.co_freevars, bool(code.co_flags & _CO_GENERATOR), kind)
        if template.co_freevars != code.co_freevars:
            return False
        original = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__qualname__ = fn.__qualname__
        slots = {"__ORIG__": original, "__MARK__": _step_mark, "__BEGIN__": _wait_begin, "__END__": _wait_end,
                 "__RESUMES__": _Resumes, "__KIND__": kind}
        consts = tuple(slots.get(c, c) if isinstance(c, str) else c for c in template.co_consts)
        fields = {"co_consts": consts, "co_name": code.co_name, "co_firstlineno": code.co_firstlineno}
        if hasattr(code, "co_qualname"):
            fields["co_qualname"] = code.co_qualname
        trampoline = template.replace(**fields)
        try:
            fn.__code__ = trampoline
        except (TypeError, ValueError) as e:
            _debug(f"{fn.__qualname__}: not hooked ({e})")
            return False
        had_wrapped = "__wrapped__" in fn.__dict__
        if not had_wrapped:
            fn.__wrapped__ = original  # inspect.signature() shows the function's own parameters
        self.wrapped[id(fn)] = (fn, code, trampoline, had_wrapped)
        self.wrapped_codes.add(code)
        self.trampoline_codes.add(trampoline)
        return True

    def unwrap_all(self):
        for fn, code, trampoline, had_wrapped in self.wrapped.values():
            if fn.__code__ is trampoline:
                fn.__code__ = code
                if not had_wrapped:
                    fn.__dict__.pop("__wrapped__", None)
        self.wrapped.clear()
        self.wrapped_codes.clear()
        self.trampoline_codes.clear()

    def _consider(self, fn, module):
        if type(fn) is not types.FunctionType or id(fn) in self.wrapped:
            return
        kind = self.match(getattr(fn, "__module__", None) or module, fn.__qualname__, fn.__code__.co_filename)
        if kind is not None:
            self.wrap(fn, kind)

    def _scan_class(self, cls, module, seen):
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for value in list(vars(cls).values()):
            if type(value) in (staticmethod, classmethod):
                value = value.__func__
            if type(value) is types.FunctionType:
                self._consider(value, module)
            elif issubclass(type(value), type) and getattr(value, "__module__", None) == module:
                self._scan_class(value, module, seen)

    def scan_module(self, module):
        d = getattr(module, "__dict__", None)
        if isinstance(d, dict):
            self.scan_dict(d)

    def scan_dict(self, d):
        name = d.get("__name__", "")
        if not isinstance(name, str):
            return
        self.scanned[id(d)] = (d, len(d))
        seen = set()
        # Looking at a module's names must say nothing to the program: isinstance(value, type) read the object's
        # __class__ through its own __getattribute__, and torch.distributed.reduce_op warned "FutureWarning: ... is
        # deprecated" from this helper into the user's stderr. type(value) asks the interpreter, not the object
        # (and a warnings filter here would be the whole process's, other threads' included).
        for value in list(d.values()):
            if type(value) is types.FunctionType:
                self._consider(value, name)
            elif issubclass(type(value), type) and getattr(value, "__module__", None) == name:
                self._scan_class(value, name, seen)

    def scan_all(self):
        for module in list(sys.modules.values()):
            if module is not None:
                self.scan_module(module)

    def rescan_changed_dict(self, d):
        entry = self.scanned.get(id(d))
        if entry is None or entry[1] != len(d):
            self.scan_dict(d)

    def expected(self, code, module, prefix=""):
        """The module-level functions and methods of `code` (module `module`'s code) that match, as code
        objects; says once per nested function that matches (those need 3.13+)."""
        found = set()
        for const in code.co_consts:
            if not isinstance(const, types.CodeType) or const.co_name.startswith("<"):
                continue
            qual = prefix + const.co_name
            if const.co_flags & _CO_OPTIMIZED:  # a function (a class body has no fast locals)
                if self.match(module, qual, const.co_filename) is not None:
                    found.add(const)
                self._note_nested(const, module, qual + ".<locals>.")
            else:
                found |= self.expected(const, module, qual + ".")
        return found

    def _note_nested(self, code, module, prefix):
        for const in code.co_consts:
            if isinstance(const, types.CodeType) and not const.co_name.startswith("<"):
                qual = prefix + const.co_name
                if qual not in self.nested and self.match(module, qual, const.co_filename) is not None:
                    self.nested.add(qual)
                    print(f"stepscope: {qual} is a nested function: on CPython {sys.version_info[0]}."
                          f"{sys.version_info[1]} --data-wait-func/--step-func hook module-level functions and "
                          "methods only (3.13+ hooks any function)", file=sys.stderr)
                self._note_nested(const, module, qual + ".<locals>.")


class _ExecWatch:
    """3.9-3.12: functions are defined as their module's code runs, and nothing announces them. The collector
    passes on each "exec" audit event (a module's code, before it runs: an import, __main__, runpy); where that
    code defines matching functions, a profile function on that thread scans the module's dictionary as it grows
    and wraps them, runs any first call made before the scan saw it, and goes as soon as they are all wrapped,
    the module's code has returned, or a wrapped function has been called (the program's loop has begun)."""

    def __init__(self, hooks):
        self.hooks = hooks
        self.watched = {}  # id(module dict) -> [dict, module code, pending code objects]
        self.inflight = {}  # frame -> True: a wait's first call run by the profile
        self.threads = set()  # threads whose profile is ours
        # Of all watched modules together, for the profile's quick tests at every event.
        self.module_codes = set()
        self.pending_codes = set()

    def _refresh(self):
        self.module_codes = {code for _, code, _ in self.watched.values()}
        self.pending_codes = set().union(*(pending for _, _, pending in self.watched.values()))

    def on_exec(self, code):
        d = self._globals_of_exec()
        if d is None or not isinstance(d.get("__name__"), str):
            return
        pending = self.hooks.expected(code, d["__name__"])
        if not pending:
            return
        self.watched[id(d)] = [d, code, pending]
        self._refresh()
        me = threading.get_ident()
        if me in self.threads:
            return
        if sys.getprofile() is not None:  # the program's own profiler comes first: scans only
            _debug("a profile function is set already; functions defined later are not hooked")
            return
        sys.setprofile(self.profile)
        self.threads.add(me)

    @staticmethod
    def _globals_of_exec():
        caller = sys._getframe(1)
        while caller is not None and caller.f_globals is globals():  # this module's frames: the callback's
            caller = caller.f_back
        if caller is None:  # no Python frame: the interpreter runs __main__ itself
            main = sys.modules.get("__main__")
            return getattr(main, "__dict__", None)
        name = caller.f_code.co_name
        if name == "_call_with_frames_removed":  # importlib: exec(code, module.__dict__)
            args = caller.f_locals.get("args")
            return args[1] if isinstance(args, tuple) and len(args) > 1 and isinstance(args[1], dict) else None
        if name == "_run_code":  # runpy: exec(code, run_globals)
            return caller.f_locals.get("run_globals")
        return None

    def _scan(self):
        changed = False
        for key, (d, code, pending) in list(self.watched.items()):
            self.hooks.rescan_changed_dict(d)
            before = len(pending)
            pending -= self.hooks.wrapped_codes
            changed |= len(pending) != before
            if not pending:
                del self.watched[key]
        if changed:  # the sets are rebuilt only when a pending function was hooked (most scans find nothing new)
            self._refresh()

    def _stop_here(self):
        if sys.getprofile() == self.profile:
            sys.setprofile(None)
        self.threads.discard(threading.get_ident())

    def stop(self):
        self.watched.clear()
        self._refresh()
        self.inflight.clear()
        self._stop_here()  # other threads' profiles end at their next call or return

    def profile(self, frame, event, arg):
        # Runs at every event of the thread while a watched module's code runs: an `import torch` ahead of the
        # hooked function's def is millions of them, so most leave after a set lookup. The module's dictionary is
        # scanned at the calls its own code makes (what it defined so far is in it by then); a call of a pending
        # function from anywhere is caught itself. C calls and their returns are not looked at.
        if event == "call":
            code = frame.f_code
            if code in self.hooks.trampoline_codes:  # a hooked function runs: the loop has begun, nothing is left to watch
                self.watched.clear()
                self._refresh()
            elif code in self.pending_codes:  # called before a scan saw it: this call through the profile
                for d, module_code, pending in self.watched.values():
                    if code in pending:
                        kind = self.hooks.match(d["__name__"], getattr(code, "co_qualname", code.co_name),
                                                code.co_filename)
                        if kind == "step":
                            _step_mark()
                        elif kind == "wait":
                            _wait_begin()
                            self.inflight[frame] = True
                        break
                self._scan()
            else:
                back = frame.f_back
                if back is not None and back.f_code in self.module_codes:
                    self._scan()
        elif event == "return":
            if self.inflight and self.inflight.pop(frame, None):
                _wait_end()
            code = frame.f_code
            if code in self.module_codes:
                for key, (d, module_code, pending) in list(self.watched.items()):
                    if module_code is code:  # the module's code ended: what it did not define, it never will
                        self.hooks.rescan_changed_dict(d)
                        del self.watched[key]
                self._refresh()
        else:
            return
        if not self.watched and not self.inflight:
            self._stop_here()


class _MonitoringHooks:
    """3.13+: sys.monitoring, global PY_START for discovery and local events on the matching code objects."""

    def __init__(self, hooks):
        self.hooks, self.tool, self.local = hooks, None, []

    def install(self, waits=None):
        mon = sys.monitoring
        tool = next((t for t in (4, 3, 5, 2) if mon.get_tool(t) is None), None)
        if tool is None:
            _debug("no free sys.monitoring tool id; --data-wait-func/--step-func ignored")
            return False
        mon.use_tool_id(tool, "stepscope")
        self.tool = tool
        hooks, E, disable, local = self.hooks, mon.events, mon.DISABLE, self.local
        if waits is None:
            waits = hooks.wait_re is not None

        def on_start(code, offset):
            kind = hooks.kind.get(code, 0)
            if kind == 0:
                kind = hooks.classify(code, sys._getframe(1).f_globals)
                if kind is not None:
                    local.append(code)
                    events = E.PY_RESUME | (E.PY_RETURN | E.PY_YIELD if kind == "wait" else 0)
                    mon.set_local_events(tool, code, events)
            if kind is None:
                return disable
            if kind == "step":
                _step_mark()
            else:
                _wait_begin()

        # PY_RETURN / PY_YIELD are local events of the matching wait functions only: each ends the wait its
        # PY_START / PY_RESUME began.
        def on_stop(code, offset, retval):
            _wait_end()

        def on_unwind(code, offset, exc):  # global by design: a membership test for every other function
            if hooks.kind.get(code) == "wait":
                _wait_end()

        mon.register_callback(tool, E.PY_START, on_start)
        mon.register_callback(tool, E.PY_RESUME, on_start)
        mon.register_callback(tool, E.PY_RETURN, on_stop)
        mon.register_callback(tool, E.PY_YIELD, on_stop)
        if waits:
            mon.register_callback(tool, E.PY_UNWIND, on_unwind)
        mon.set_events(tool, E.PY_START | (E.PY_UNWIND if waits else 0))
        return True

    def uninstall(self):
        if self.tool is None:
            return
        mon = sys.monitoring
        mon.set_events(self.tool, 0)
        for code in self.local:
            mon.set_local_events(self.tool, code, 0)
        for event in (mon.events.PY_START, mon.events.PY_RESUME, mon.events.PY_RETURN, mon.events.PY_YIELD,
                      mon.events.PY_UNWIND):
            mon.register_callback(self.tool, event, None)
        mon.free_tool_id(self.tool)
        self.tool = None
        self.local.clear()


def _calibrate(wrapped_call, plain_call, rounds=9, n=1000):
    """ns one hooked call costs more than a plain one, in the thread's CPU time (time the thread waited for a core
    is not the hook's): the quickest of `rounds` rounds of n calls, of each (the least disturbed round)."""
    clock = time.thread_time_ns
    plain = hooked = None
    for _ in range(rounds):
        t0 = clock()
        for _ in range(n):
            plain_call()
        t1 = clock()
        for _ in range(n):
            wrapped_call()
        t2 = clock()
        plain = t1 - t0 if plain is None else min(plain, t1 - t0)
        hooked = t2 - t1 if hooked is None else min(hooked, t2 - t1)
    return max(0, int((hooked - plain) / n))


def _measure_event_cost(mechanism):
    """What one hooked call costs the program, (step kind, wait kind) in ns: the trampoline or sys.monitoring
    callback and the mark's ctypes call, into the collector's no-op entry points of the same signature."""
    _set_marks(probe=True)
    try:
        def plain():
            return None

        def stepped():
            return None

        def waited():
            return None

        if mechanism == "monitoring":
            calib = _FuncHooks(None, None)
            mon_hooks = _MonitoringHooks(calib)
            calib.kind.update({plain.__code__: None, stepped.__code__: "step", waited.__code__: "wait"})
            if not mon_hooks.install(waits=True):  # PY_UNWIND as with a real --data-wait-func
                return 0, 0
            try:
                E = sys.monitoring.events
                sys.monitoring.set_local_events(mon_hooks.tool, waited.__code__, E.PY_RESUME | E.PY_RETURN | E.PY_YIELD)
                mon_hooks.local.append(waited.__code__)
                plain()  # disabled at its first call
                return _calibrate(stepped, plain), _calibrate(waited, plain)
            finally:
                mon_hooks.uninstall()
        calib = _FuncHooks(None, None)
        if not calib.wrap(stepped, "step") or not calib.wrap(waited, "wait"):
            return 0, 0
        return _calibrate(stepped, plain), _calibrate(waited, plain)
    finally:
        _set_marks()


# ---- entry point ----------------------------------------------------------------------------------------

def _debug(msg):
    if os.environ.get("STEPSCOPE_PYTHON_DEBUG"):
        print(f"stepscope: {msg}", file=sys.stderr)


_installed = False
_func_hooks = None  # _FuncHooks while --data-wait-func / --step-func are in force
_monitoring = None  # _MonitoringHooks (3.13+)
_exec_watch = None  # _ExecWatch (3.9-3.12)
_import_hook = None
_embedded_finder = None  # the bootstrap's finder of this package (collector/src/python/hooks_bootstrap.py)
hook_info = ""  # one line for the recording: which mechanism, how many functions, what one event costs


def _on_exec(code):
    """Called by the collector's audit hook for each "exec" event while install() asked for them."""
    if _exec_watch is not None and _active:
        try:
            _exec_watch.on_exec(code)
        except Exception as e:  # never break the program's import or its __main__
            _debug(f"exec watch: {e!r}")


def _at_interpreter_exit():
    """An uncaught KeyboardInterrupt (Ctrl-C, `record --duration`): CPython finalizes, then kills itself with
    SIGINT past the collector's exit code, losing the last samples and a flight recording's exit save. Its
    traceback was printed by now (sys.last_value / 3.12's sys.last_exc): the collector runs its final pass here."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if isinstance(exc, KeyboardInterrupt):
        from . import _c

        if _c.interrupted is not None:
            _c.interrupted(2)  # SIGINT


def install(wait_func=None, step_func=None):
    """Installs the hooks (again after uninstall()); returns False (and does nothing) when neither collector nor
    log is there. wait_func / step_func: the --data-wait-func / --step-func regexes (default:
    STEPSCOPE_DATA_WAIT_FUNC / STEPSCOPE_STEP_FUNC from the environment)."""
    global _sink, _installed, _active, _func_hooks, _monitoring, _exec_watch, _import_hook, hook_info
    if _installed:
        return True
    sink = _Sink()
    if not sink.usable:
        return False
    _sink = sink
    _installed = _active = True
    _set_marks()
    global _c_range
    from . import _c

    _c_range = _c.range
    if wait_func is None:
        wait_func = os.environ.get("STEPSCOPE_DATA_WAIT_FUNC")
    if step_func is None:
        step_func = os.environ.get("STEPSCOPE_STEP_FUNC")
    wait_re, step_re = _compile("--data-wait-func", wait_func), _compile("--step-func", step_func)
    hook_info = ""
    if wait_re is not None or step_re is not None:
        hooks = _FuncHooks(wait_re, step_re)
        # 3.13+: sys.monitoring (any function, nested ones and coroutines too). 3.9-3.12: trampolines; 3.12's
        # sys.monitoring cost issue 47's loop 4.7-5.4% where trampolines cost 0.8-2.7% (docs/performance.md).
        # STEPSCOPE_PYTHON_FUNC_HOOKS=monitoring|trampolines picks one (3.12+ for monitoring).
        choice = os.environ.get("STEPSCOPE_PYTHON_FUNC_HOOKS", "")
        use_monitoring = hasattr(sys, "monitoring") and (
            choice == "monitoring" or (choice != "trampolines" and sys.version_info >= (3, 13)))
        if use_monitoring:
            costs = _measure_event_cost("monitoring")
            mon = _MonitoringHooks(hooks)
            if mon.install():
                _func_hooks, _monitoring = hooks, mon
                hook_info = "sys.monitoring"
        else:
            costs = _measure_event_cost("trampoline")
            _func_hooks = hooks
            _exec_watch = _ExecWatch(hooks)
            hooks.scan_all()
            hook_info = f"trampolines ({len(hooks.wrapped)} at install)"
        if _func_hooks is not None:
            hook_info += f"; {costs[0]} ns a hooked step call, {costs[1]} ns a hooked wait call"
            _sink.hook_info(hook_info, costs)
    _import_hook = _ImportHook()
    sys.meta_path.insert(0, _import_hook)
    if _c.interrupted is not None:
        atexit.register(_at_interpreter_exit)  # registered first, so it runs last of the program's handlers
    if _embedded_finder is not None and _embedded_finder not in sys.meta_path:
        sys.meta_path.append(_embedded_finder)  # `import stepscope` served again while recording
    for name, patch in _TARGETS.items():  # already imported (e.g. installed late): patch now
        module = sys.modules.get(name)
        if module is not None:
            try:
                patch(module)
            except Exception as e:
                _debug(f"patching {name} failed: {e!r}")
    _debug(f"hooks installed (collector={'yes' if sink.collector else 'no'}{'; ' + hook_info if hook_info else ''})")
    return True


def uninstall():
    """Undoes everything install() did: the program runs as it did before (a recording window closed)."""
    global _installed, _active, _func_hooks, _monitoring, _exec_watch, _import_hook
    if not _installed:
        return
    _active = False
    for finder in (_import_hook, _embedded_finder):
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
    _import_hook = None
    atexit.unregister(_at_interpreter_exit)
    if _exec_watch is not None:
        _exec_watch.stop()
        _exec_watch = None
    if _monitoring is not None:
        _monitoring.uninstall()
        _monitoring = None
    if _func_hooks is not None:
        _func_hooks.unwrap_all()
        _func_hooks = None
    while _undo:
        try:
            _undo.pop()()
        except Exception as e:
            _debug(f"undoing a patch failed: {e!r}")
    _installed = False
    _debug("hooks removed")


def wants_exec_events():
    """True while the collector should pass "exec" audit events to _on_exec (trampolines with a regex: 3.9-3.12)."""
    return _exec_watch is not None
