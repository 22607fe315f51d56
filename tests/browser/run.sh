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
rc=0
go test -count=1 -timeout 6m -v -run '^TestConsole(Firefox)?$' ./tests/browser/ "$@" || rc=$?
if [ $rc -ne 0 ]; then
  echo "browser suite failed: screenshots of the failed scenarios' tabs in $artifacts"
  ls -1 "$artifacts" 2>/dev/null || true
elif [ -n "${made:-}" ]; then
  rm -rf "$artifacts"
fi
exit $rc
