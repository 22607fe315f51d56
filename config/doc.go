// Package config defines tuft_config.yaml: its schema, the embedded defaults, environment
// overrides and validation. Everything is checked once, up front, and a bad key or value
// is reported by its path (for example `models[0].max_lora_rank`).
package config
