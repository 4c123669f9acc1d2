"""The ``swe_tests`` verifier's start-up for a test run, so the workspace cannot replace the runner.

Started as ``python -E -s -S skyrl_launcher.py --pytest ARGS`` (or ``--script PATH ARGS`` for a runner script such as
Django's ``tests/runtests.py``) from the read-only directory that also holds the result-channel plugin:

- ``-E -s -S``: no ``PYTHON*`` variables, no user site, no ``site`` at start-up — so nothing in the workspace
  (``sitecustomize.py``/``.pyc``, ``usercustomize``, a ``pytest.py`` at the root) is on ``sys.path`` while the
  interpreter starts;
- ``site`` is then run here with its ``sitecustomize`` hook replaced: the environment's own ``sitecustomize`` is
  imported only when it lies outside the workspace (a ``.pth`` of an editable install may put the workspace on
  ``sys.path``; it stays off while the runner loads);
- pytest, pluggy and the result-channel plugin are imported from the environment and this directory, with every
  workspace entry off ``sys.path``; only then does ``sys.path`` become what ``python -m pytest`` in the workspace
  would have (the working directory, ``$PYTHONPATH``, the environment), and pytest runs from the modules already
  loaded, with the channel plugin registered as an object.

Standard library only, Python 3.6 and later (it runs in the instance's environment).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.getcwd()


def _inside_workspace(path):
    path = os.path.abspath(path or ".")
    return path == WORKSPACE or path.startswith(WORKSPACE.rstrip("/") + "/")


def _safe_sitecustomize():
    try:
        import importlib.util
        spec = importlib.util.find_spec("sitecustomize")
    except Exception:
        return
    if spec is not None and spec.origin and not _inside_workspace(spec.origin):
        try:
            import sitecustomize  # noqa: F401
        except Exception:
            pass


def _start_site():
    import site

    site.ENABLE_USER_SITE = False
    site.execsitecustomize = lambda: None
    site.execusercustomize = lambda: None
    site.main()


def _final_path(started):
    """``sys.path`` as ``python -m pytest`` (or ``python SCRIPT``) in the workspace would have it."""
    front = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != HERE]
    rest = [p for p in started if p not in front and p != HERE]
    return front + rest


def main(argv):
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        sys.dont_write_bytecode = True
    _start_site()
    started = list(sys.path)
    sys.path[:] = [HERE] + [p for p in started if p != HERE and not _inside_workspace(p)]
    _safe_sitecustomize()
    mode, args = argv[0], argv[1:]
    if mode == "--pytest":
        import pytest  # noqa: F401  (the environment's, before the workspace is importable)
        import _pytest.config  # noqa: F401
        import skyrl_result_channel  # this directory's, handed to pytest as an object (not ``-p``, which
        # would warn that it cannot rewrite an imported module: an error under ``filterwarnings = error``)
        for name in ("unittest", "doctest", "pdb", "inspect", "json", "warnings", "argparse", "tempfile"):
            __import__(name)
        sys.path[:] = [WORKSPACE] + _final_path(started)
        sys.argv = ["pytest"] + args
        sys.exit(int(pytest.main(args, plugins=[skyrl_result_channel])))
    if mode == "--script":
        import runpy

        script = args[0]
        sys.path[:] = [os.path.dirname(os.path.abspath(script))] + _final_path(started)
        sys.argv = list(args)
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)
    sys.stderr.write("skyrl launcher: expected --pytest or --script, got %r\n" % (mode,))
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
