"""Harness of the cookbook suite: runs recipes as subprocesses against the server that
run.sh started, collects their figures, and prints a summary table.

A test marked @pytest.mark.blocked_by(feature, match=REGEX) runs its recipe like any other.
When it fails with an error matching REGEX (the server's refusal of that feature) it is
reported as BLOCKED by the named server feature (pytest: xfailed); when it fails in any
other way it fails; when it passes, it fails too, so the marker is removed once the
feature lands. Nothing is skipped.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WORK = Path(os.environ.get("TUFT_WORK", "/tmp"))
MODEL = os.environ.get("TUFT_MODEL_PATH", "")
RENDERER = "qwen3_instruct"

# test node id -> {"figures": {...}, "outcome": str, "note": str}
_summary: dict[str, dict] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "blocked_by(feature, match): the recipe needs a server feature not implemented yet")


def _unmet_requirements() -> list[str]:
    """tinker-cookbook's requirements (with its math-rl extra) that the venv does not meet."""
    from packaging.requirements import Requirement

    out = []
    for spec in md.requires("tinker-cookbook") or []:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"extra": "math-rl"}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            out.append(f"{req} (not installed)")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f"{req} (installed: {have})")
    return out


def pytest_report_header(config):
    import tinker
    import torch

    lines = [
        f"tinker-cookbook {md.version('tinker-cookbook')}, tinker {tinker.__version__}, "
        f"torch {torch.__version__} ({torch.__file__.rsplit('/torch/', 1)[0]})",
        f"served model: {MODEL} (renderer {RENDERER}), server {os.environ.get('TINKER_BASE_URL')}",
    ]
    unmet = _unmet_requirements()
    if unmet:
        lines.append("installed WITHOUT these requirements of tinker-cookbook (the package index lacks them):")
        lines += [f"  - {u}" for u in unmet]
    return lines


# ---------------------------------------------------------------- running recipes


class RecipeFailed(AssertionError):
    pass


@dataclass
class Run:
    name: str
    rc: int
    log: str
    log_path: Path
    seconds: float
    slow: list[str] = field(default_factory=list)

    def metrics(self) -> list[dict]:
        p = self.log_path / "metrics.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def checkpoints(self) -> list[dict]:
        p = self.log_path / "checkpoints.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _env(name: str) -> tuple[dict, Path]:
    env = dict(os.environ)
    slow = WORK / "logs" / f"{name}.slow"
    env["PYTHONPATH"] = str(HERE / "guard") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TUFT_SLOW_LOG"] = str(slow)
    return env, slow


def run_recipe(name: str, argv: list[str], *, log_path: Path, timeout: float = 420,
               env_extra: dict | None = None, stop_when=None, check: bool = True) -> Run:
    """Runs argv (a python command line, run with the venv's python) as recipe `name`.

    Output goes to $TUFT_WORK/logs/NAME.log. stop_when(log_path) is polled while it runs;
    when it returns true the process is killed (SIGKILL), as a crash would. With check, a
    non-zero exit (other than that kill) or a request slower than the server's long poll
    raises RecipeFailed with the log's tail.
    """
    (WORK / "logs").mkdir(exist_ok=True)
    out = WORK / "logs" / f"{name}.log"
    env, slow = _env(name)
    if env_extra:
        env.update(env_extra)
    start = time.monotonic()
    with open(out, "w") as f:
        p = subprocess.Popen([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=WORK)
        killed = False
        try:
            while p.poll() is None:
                if time.monotonic() - start > timeout:
                    p.kill()
                    p.wait()
                    raise RecipeFailed(f"{name}: still running after {timeout:.0f} s\n{_tail(out)}")
                if stop_when is not None and stop_when(log_path):
                    p.send_signal(signal.SIGKILL)
                    killed = True
                    p.wait()
                    break
                time.sleep(0.05)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    run = Run(name, -9 if killed else p.returncode, out.read_text(errors="replace"), log_path,
              time.monotonic() - start, slow.read_text().splitlines() if slow.exists() else [])
    if check:
        if run.slow:
            raise RecipeFailed(f"{name}: requests slower than the server's long poll (a stalled poll):\n"
                               + "\n".join(run.slow))
        if run.rc not in (0, -9):
            raise RecipeFailed(f"{name}: exit status {run.rc}\n{_tail(out)}")
    return run


def _tail(path: Path, n: int = 40) -> str:
    lines = path.read_text(errors="replace").splitlines()
    # Keep tracebacks and errors; drop the per-step metric tables that fill recipe logs.
    return "\n".join(lines[-n:])


def cookbook_args(**kw) -> list[str]:
    return [f"{k}={v}" for k, v in kw.items()]


def figure(request, **figures):
    """Records figures of the current test for the summary table."""
    _summary.setdefault(request.node.nodeid, {}).setdefault("figures", {}).update(figures)


@pytest.fixture
def fig(request):
    return lambda **kw: figure(request, **kw)


# ---------------------------------------------------------------- blocked_by


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    entry = _summary.setdefault(item.nodeid, {})
    marker = item.get_closest_marker("blocked_by")
    if rep.when == "call" and marker is not None:
        feature = marker.args[0]
        match = marker.kwargs["match"]
        if rep.failed:
            text = str(rep.longrepr)
            if re.search(match, text):
                rep.outcome = "skipped"
                rep.wasxfail = f"BLOCKED by server feature: {feature}"
                entry["outcome"] = "BLOCKED"
                entry["note"] = f"needs {feature}"
            else:
                entry["note"] = f"failed, and not with the error of the missing {feature}"
        elif rep.passed:
            rep.outcome = "failed"
            rep.longrepr = (f"marked blocked_by({feature!r}) but passes now: the server has the feature; "
                            "remove the marker")
            entry["note"] = "passes: remove blocked_by"
    if rep.when == "call" or (rep.when == "setup" and rep.failed):
        entry.setdefault("outcome", rep.outcome.upper() if rep.outcome != "skipped" else "SKIPPED")
        if rep.failed and "note" not in entry:
            last = str(rep.longrepr).strip().splitlines()
            entry["note"] = next((ln for ln in reversed(last) if "Error" in ln or "error" in ln), last[-1] if last else "")[:160]
        entry["seconds"] = round(rep.duration, 1)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if not _summary:
        return
    tr.section("cookbook recipes against tuft")
    w = max(len(k.split("::")[-1]) for k in _summary)
    tr.write_line(f"{'test':<{w}}  {'outcome':<8} {'s':>6}  figures / note")
    blocked = []
    for nodeid, e in _summary.items():
        name = nodeid.split("::")[-1]
        figs = ", ".join(f"{k}={_fmt(v)}" for k, v in e.get("figures", {}).items())
        note = e.get("note", "")
        text = "; ".join(x for x in (figs, note) if x)
        tr.write_line(f"{name:<{w}}  {e.get('outcome', '?'):<8} {e.get('seconds', 0):>6}  {text}")
        if e.get("outcome") == "BLOCKED":
            blocked.append(f"{name}: {note}")
    if blocked:
        tr.write_line("")
        tr.write_line("blocked by server features not implemented yet (issue 15):")
        for b in blocked:
            tr.write_line(f"  - {b}")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)
