package worker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/worker"
)

// pki writes a CA and certificates it signed (PEM) into dir.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(t *testing.T) *pki {
	p := &pki{dir: t.TempDir()}
	p.caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue makes a certificate for name (a server: 127.0.0.1 as IP SAN) and returns the
// cert and key files.
func (p *pki) issue(t *testing.T, name string, server bool) (string, string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial + 1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kb)
}

// With mutual TLS (and no token), only a client holding a certificate from the
// configured CA gets in.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	scert, skey := p.issue(t, "worker", true)
	ccert, ckey := p.issue(t, "api", false)
	stls, err := config.Worker{TLS: config.TLSFiles{CertFile: scert, KeyFile: skey, ClientCAFile: filepath.Join(p.dir, "ca.pem")}}.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeWorker(t, testenv.NewNoopExecutor(), worker.ServerOptions{TLS: stls})
	ctx := context.Background()

	good, err := config.Workers{TLS: config.TLSFiles{CAFile: filepath.Join(p.dir, "ca.pem"), CertFile: ccert, KeyFile: ckey}}.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, TLS: good, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("client with a certificate from the CA: %v", err)
	}
	rem.Close()

	noCert, _ := config.Workers{TLS: config.TLSFiles{CAFile: filepath.Join(p.dir, "ca.pem")}}.ClientTLS()
	if _, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, TLS: noCert, ConnectTimeout: 3 * time.Second}); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	other := newPKI(t)
	ocert, okey := other.issue(t, "intruder", false)
	foreign, _ := config.Workers{TLS: config.TLSFiles{CAFile: filepath.Join(p.dir, "ca.pem"), CertFile: ocert, KeyFile: okey}}.ClientTLS()
	if _, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, TLS: foreign, ConnectTimeout: 3 * time.Second}); err == nil {
		t.Fatal("a client with a certificate from another CA got in")
	}
}
