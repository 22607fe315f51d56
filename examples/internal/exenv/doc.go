// Package exenv finds the server, API key and tokenizer for the examples.
package exenv
