#!/usr/bin/env bash
# The adversarial suite (issue 12): what one tenant, hostile or unlucky, must not be able
# to do to another or to the server. The end-to-end tests run with the race detector
# (the server in process, or the real binary where a process is measured or killed); the
# SIGKILL tests of each write protocol's windows live beside their code and run here too.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "-- end to end (race detector on)"
go test -count=1 -race -timeout 10m -skip TwoTenantLatency ./tests/adversarial/ "$@"
echo "-- two-tenant latency under a flood (race detector on; the victim's p50/p99 printed)"
out="$(go test -count=1 -race -timeout 10m -run TwoTenantLatency -v ./tests/adversarial/ 2>&1)" || { echo "$out"; exit 1; }
echo "$out" | grep -E '^(victim latency|--- |ok)'
echo "-- SIGKILL in every window of the write protocols; store damage at random offsets"
go test -count=1 -timeout 5m -run 'SurvivesSIGKILL|CorruptionAtRandomOffsets|BitFlip|TornLastWrite|StrayCompaction' ./engine/ ./store/logstore/
