"""A pytest plugin the ``swe_tests`` verifier loads inside the sandbox (``-p skyrl_result_channel``): it streams the
collected test ids, every test phase's outcome and the session's exit status as JSON lines to the file descriptor
named by ``SKYRL_RESULT_FD`` — one end of a pipe whose other end the host reads — after moving it to a random
descriptor number (the named one is closed before any tested code runs). No file in the sandbox holds the
results, so code under test cannot rewrite a report at exit; whatever it injects into the stream shows up as a
duplicate or unknown result, or as canary tests with the wrong status, which the verifier's cross-checks find.

Standard library only (it runs in the instance's environment). Copied next to nothing else into a directory the
sandbox mounts read-only.
"""

import json
import os

_FD = None


def _hide(fd):
    """Move the channel to a descriptor at a random number, close-on-exec (processes the tests start do not get
    it), and close the one the environment named: ``SKYRL_RESULT_FD`` stays readable in ``/proc/self/environ``,
    but names a closed descriptor by the time any tested code runs."""
    import fcntl
    import random

    try:
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, random.SystemRandom().randrange(64, 512))
    except OSError:  # a low descriptor limit: keep it where it is
        os.set_inheritable(fd, False)
        return fd
    os.close(fd)
    return moved


_fd_name = os.environ.pop("SKYRL_RESULT_FD", None)  # read at import, before any conftest or tested code runs
if _fd_name:
    _FD = _hide(int(_fd_name))


def _send(event):
    if _FD is None:
        return
    data = (json.dumps(event) + "\n").encode()
    while data:
        data = data[os.write(_FD, data):]


def pytest_collection_finish(session):
    _send({"event": "collected", "ids": [item.nodeid for item in session.items]})


def pytest_runtest_logreport(report):
    _send({"event": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": bool(getattr(report, "wasxfail", None) is not None),
           "subtest": type(report).__name__ == "SubtestReport"})  # pytest 9: one per subTest, same id and phase


def pytest_sessionfinish(session, exitstatus):
    _send({"event": "finish", "exitstatus": int(exitstatus)})
