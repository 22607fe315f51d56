// Package service holds the controllers: sessions, training runs, sampling sessions and
// checkpoints. It owns ownership checks and seq_id order (through futures) and is, with
// futures, the only layer that touches the store. It knows nothing of HTTP.
package service
