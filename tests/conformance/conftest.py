"""Records each scenario's outcome for the version matrix (tests/conformance/matrix.py):
with TUFT_RESULTS set, the session writes {"sdk_version", "results": [...]} there."""

import json
import os

import pytest
import tinker

_results = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" and rep.outcome == "passed":
        return
    if rep.when == "teardown" and rep.outcome != "failed":
        return
    doc = (getattr(item, "function", None).__doc__ or "").strip()
    reason = ""
    if rep.skipped and isinstance(rep.longrepr, tuple):
        reason = rep.longrepr[2].removeprefix("Skipped: ")
    elif rep.failed:
        reason = str(rep.longrepr).strip().splitlines()[-1][:300] if rep.longrepr else ""
    _results.append({"test": item.name, "feature": doc.splitlines()[0] if doc else item.name,
                     "outcome": rep.outcome, "reason": reason, "seconds": round(rep.duration, 2),
                     "measured": dict(item.user_properties)})


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("TUFT_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump({"sdk_version": tinker.__version__, "results": _results}, f, indent=1)
