#!/usr/bin/env bash
# The web console's browser suite (issue 27): Debian's headless chromium, driven over the
# DevTools protocol (chromedp; TestConsole), and Debian's headless firefox-esr, driven over
# WebDriver BiDi (TestConsoleFirefox), against the real `tuft launch` binary on the tiny
# model with two tenants, while the official Tinker SDK (0.38.0 venv) trains. Fails, rather
# than skips, when a browser or the SDK venv is missing (scripts/setup.sh installs them).
#   TUFT_BROWSER_SCREENSHOTS=docs/console  also rewrite the screenshots docs/console.md shows
#   TUFT_BROWSER_ARTIFACTS=DIR             where a failed scenario's screenshot goes
set -euo pipefail
cd "$(dirname "$0")/../.."
export TUFT_REQUIRE_BROWSER=1
artifacts="${TUFT_BROWSER_ARTIFACTS:-}"
if [ -z "$artifacts" ]; then artifacts="$(mktemp -d)"; made=1; fi
export TUFT_BROWSER_ARTIFACTS="$artifacts"
log="$(mktemp)"
set +e
go test -count=1 -timeout 6m -v -run '^TestConsole(Firefox)?$' ./tests/browser/ "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ $rc -ne 0 ]; then
  # The server's log, printed when a test fails, pushes the tests' own lines out of a
  # log's tail: say them again, last.
  echo "== the suite's own lines (failures among them), again:"
  grep -E '^[[:space:]]+[a-z_]+_test\.go:[0-9]+: ' "$log" | tail -n 40 || true
  echo "browser suite failed: screenshots of the failed scenarios' tabs in $artifacts"
  ls -1 "$artifacts" 2>/dev/null || true
elif [ -n "${made:-}" ]; then
  rm -rf "$artifacts"
fi
rm -f "$log"
exit $rc
