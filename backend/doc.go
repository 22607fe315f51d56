// Package backend is the seam between the controllers and the models. Executor is the
// one interface both the in-process model host (Local) and the gRPC client to a
// `tuft worker` (Remote) implement; Router spreads adapters over several executors, and
// Backend wraps any Executor with the caller-side spans. It also holds what both
// processes need about models and workers: LoadModels (the config's models, with their
// signature) and, on the API side, the Directory that keeps a Router in step with the
// workers that registered (Registration, RegistrationSource).
package backend
