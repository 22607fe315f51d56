// Package testenv starts in-process TuFT servers for tests: a real engine on the built-in
// tiny preset (written once per test binary), a chosen store, and an HTTP client that
// speaks the Tinker wire formats, with scenario builders (NewSession, NewTrainingRun) for
// the requests most tests make first; and in-process workers (ServeWorker) for the remote
// executor.
package testenv
