#!/usr/bin/env bash
# The adversarial suite (issue 12): what one tenant, hostile or unlucky, must not be able
# to do to another or to the server. The end-to-end tests run with the race detector
# (the server in process, or the real binary where a process is measured or killed); the
# SIGKILL tests of each write protocol's windows live beside their code and run here too.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "-- end to end (race detector on)"
go test -count=1 -race -timeout 10m -skip 'TwoTenantLatency|VictimLatency' ./tests/adversarial/ "$@"
echo "-- two-tenant latency under a flood (race detector on; the victim's p50/p99 printed)"
out="$(go test -count=1 -race -timeout 10m -run TwoTenantLatency -v ./tests/adversarial/ 2>&1)" || { echo "$out"; exit 1; }
echo "$out" | grep -E '^(victim latency|--- |ok)'
# The race detector multiplies the cost of decoding an attack's bodies (0.3-1.1 s each
# for the render attack), which is not what these bounds are about: the victim's latency
# under each attack of issue 22 is measured on the plain build, one test at a time.
echo "-- a victim tenant's sample latency under each attack, within 2x its idle latency (p50/p99 printed)"
out="$(go test -count=1 -timeout 10m -run VictimLatency -v ./tests/adversarial/ 2>&1)" || { echo "$out"; exit 1; }
echo "$out" | grep -E 'victim latency|^--- |^ok' | sed 's/^ *//'
echo "-- SIGKILL in every window of the write protocols; store damage at random offsets"
go test -count=1 -timeout 5m -run 'SurvivesSIGKILL|CorruptionAtRandomOffsets|BitFlip|TornLastWrite|StrayCompaction' ./engine/ ./store/logstore/
