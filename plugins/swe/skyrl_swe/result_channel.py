"""A pytest plugin the ``swe_tests`` verifier loads inside the sandbox (``-p skyrl_result_channel``): it streams the
collected test ids, every test phase's outcome and the session's exit status as JSON lines to the file descriptor
named by ``SKYRL_RESULT_FD`` — one end of a pipe whose other end the host reads. No file in the sandbox holds the
results, so code under test cannot rewrite a report at exit; whatever it injects into the stream shows up as a
duplicate or unknown result, which the verifier's cross-check turns into ``error_eval``.

Standard library only (it runs in the instance's environment). Copied next to nothing else into a directory the
sandbox mounts read-only.
"""

import json
import os

_FD = None
_fd_name = os.environ.pop("SKYRL_RESULT_FD", None)  # read at import, before any conftest or tested code runs
if _fd_name:
    _FD = int(_fd_name)
    os.set_inheritable(_FD, False)  # processes the tests start do not get it


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
