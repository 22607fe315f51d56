"""Stall guard for the cookbook suite (on PYTHONPATH of every recipe process).

Observes, never changes: every HTTP request the Tinker SDK makes through httpx is timed,
and one that takes longer than TUFT_SLOW_SECONDS (default: the server's long poll plus
5 s) is appended to TUFT_SLOW_LOG. The suite fails a recipe that logged one, so a poll
stall (see stall_repro.py) cannot pass unnoticed. (This file shadows Debian's
sitecustomize, which only installs the apport crash hook.)
"""

import os
import time

_log = os.environ.get("TUFT_SLOW_LOG")
if _log:
    try:
        import httpx
    except ImportError:  # not a Tinker process
        httpx = None
    if httpx is not None:
        _limit = float(os.environ.get("TUFT_SLOW_SECONDS", "35"))
        _send = httpx.AsyncClient.send

        async def _timed_send(self, request, *args, **kwargs):
            start = time.monotonic()
            outcome = "?"
            try:
                response = await _send(self, request, *args, **kwargs)
                outcome = str(response.status_code)
                return response
            except BaseException as e:
                outcome = type(e).__name__
                raise
            finally:
                took = time.monotonic() - start
                if took > _limit:
                    with open(_log, "a") as f:
                        f.write(f"{request.method} {request.url.path} -> {outcome} after {took:.1f} s\n")

        httpx.AsyncClient.send = _timed_send
