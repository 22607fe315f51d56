// Command tuft is TuFT in Go: a multi-tenant LoRA fine-tuning and sampling service that
// speaks the Tinker API. `tuft launch` runs the server; the other subcommands manage
// models, configuration, persistence and telemetry checks.
//
// Every command and subcommand answers -h/--help with its usage (exit status 0); a wrong
// invocation prints the error and the usage (exit status 2). The process commands,
// launch and worker, only read flags and wire telemetry: server.Start and worker.Start
// assemble the processes.
package main
