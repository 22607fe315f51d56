package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// The TLS settings are loaded where they are declared, as the Collector's configtls does,
// so the API server (dialling workers) and the worker (serving them) share one reading of
// the files and one set of error messages by key.

// ClientTLS builds the API server's side of TLS to workers from workers.tls (nil when no
// file is set: plaintext).
func (w Workers) ClientTLS() (*tls.Config, error) {
	f := w.TLS
	if f.CAFile == "" && f.CertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("workers.tls.ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("workers.tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ServerTLS builds the worker's TLS from worker.tls (nil when no certificate is set); with
// a client CA it requires and verifies client certificates (mutual TLS).
func (w Worker) ServerTLS() (*tls.Config, error) {
	f := w.TLS
	if f.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("worker.tls: %w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile != "" {
		pool, err := readPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("worker.tls.client_ca_file: %w", err)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

func readPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
