# Run by the collector inside the recorded program (collector/src/python/python_hooks.cpp), on a thread that holds
# the GIL: at the interpreter's first run event (a PEP 578 audit hook armed before the interpreter started) or
# from a pending call after `stepscope attach`. It makes the helper embedded in the collector importable and
# installs the automatic hooks; it never raises, and leaves one line in `_status`.
#
# Given as globals: _lib (the collector library's path), _sources ({module name: (file name, source)} of the
# embedded `stepscope` package), _wait_func / _step_func (--data-wait-func / --step-func), _how (what ran it).
# Leaves _on_exec (the callable the collector's audit hook passes "exec" events to, or None when the hooks need
# none) beside _status. A second recording window of the same process runs it again: the package is imported
# already and install() puts back what the last window's uninstall() took out.
# The embedded package is imported as `_stepscope`, the collector's own copy whatever else is on sys.path; the
# public name `stepscope` (the marker API) falls back to the same sources only when nothing on sys.path has it,
# so a pip-installed or PYTHONPATH copy keeps precedence and the user's sitecustomize and PYTHONPATH are never
# touched.


def _stepscope_bootstrap():
    import sys

    global _on_exec
    _on_exec = None
    again = sys.modules.get("_stepscope._autohook")
    if again is not None:
        try:
            done = again.install(wait_func=_wait_func, step_func=_step_func)
        except BaseException as e:
            return "failed (" + _how + "): " + type(e).__name__ + ": " + str(e)[:300]
        if again.wants_exec_events():
            _on_exec = again._on_exec
        return ("installed again (" + _how + ")") if done else ("failed (" + _how + "): no collector entry points")

    class EmbeddedLoader:
        def __init__(self, sources):
            self.sources = sources

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            file, source = self.sources[module.__spec__.name.replace("_stepscope", "stepscope", 1)]
            module.__dict__["_collector_path"] = _lib
            exec(compile(source, file, "exec"), module.__dict__)

        def get_source(self, name):  # tracebacks and inspect show the embedded lines
            return self.sources[name.replace("_stepscope", "stepscope", 1)][1]

    class EmbeddedFinder:
        """Serves `_stepscope` always and `stepscope` when nothing before it on sys.meta_path did."""

        def __init__(self, sources):
            self.loader = EmbeddedLoader(sources)

        def find_spec(self, fullname, path=None, target=None):
            public = fullname.replace("_stepscope", "stepscope", 1) if fullname.startswith("_stepscope") else fullname
            if public not in self.loader.sources:
                return None
            from importlib.machinery import ModuleSpec

            package = "." not in public
            spec = ModuleSpec(fullname, self.loader, origin=self.loader.sources[public][0], is_package=package)
            spec.has_location = False
            return spec

    finder = EmbeddedFinder(_sources)
    sys.meta_path.append(finder)  # last: the regular finders get `stepscope` first
    try:
        import _stepscope._autohook as autohook

        autohook._embedded_finder = finder  # uninstall() takes it out, install() puts it back
        done = autohook.install(wait_func=_wait_func, step_func=_step_func)
        if autohook.wants_exec_events():
            _on_exec = autohook._on_exec
    except BaseException as e:  # never break the program: say why in the recording
        return "failed (" + _how + "): " + type(e).__name__ + ": " + str(e)[:300]
    public = sys.modules.get("stepscope")
    if public is not None and hasattr(public, "_rebind"):
        public._rebind()  # imported before the collector arrived (attach): its markers find it now
    if not done:
        return "failed (" + _how + "): the collector's entry points were not found from Python"
    return "installed (" + _how + ")"


_on_exec = None
_status = _stepscope_bootstrap()
del _stepscope_bootstrap
if _on_exec is None:
    del _on_exec  # the collector then passes no "exec" events (3.13+, or no --step-func/--data-wait-func)
