// Package bench holds benchmarks run against two commits by scripts/bench-compare.sh
// (before/after figures of a refactor; docs/performance.md, "Before/after"). Its
// benchmark files use only the public surface (client, config, server) so that they
// compile when copied into an older commit's tree.
package bench
