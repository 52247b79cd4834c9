"""Loaded by Python at start-up when stepscope's python/ folder is first on PYTHONPATH (`stepscope record`
does that). Installs the automatic data-wait/step hooks (stepscope/_autohook.py) when the collector is in the
process, then runs the sitecustomize this one shadows, if any, so the user's own start-up code still runs."""


def _stepscope_start():
    import os
    import sys

    try:
        from stepscope import _autohook

        _autohook.install()
    except Exception as e:  # never break the user's program
        if os.environ.get("STEPSCOPE_PYTHON_DEBUG"):
            print(f"stepscope: hooks not installed: {e!r}", file=sys.stderr)

    # Chain to the next sitecustomize on sys.path (ours shadows it).
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_stepscope_start()
del _stepscope_start
