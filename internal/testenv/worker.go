package testenv

import (
	"net"
	"testing"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/worker"
)

// ServeWorker runs the worker's gRPC service over ex in process on a loopback port until
// the test ends, and returns its address (for backend.DialRemote) and the service.
func ServeWorker(t testing.TB, ex backend.Executor, o worker.ServerOptions) (string, *worker.Service) {
	t.Helper()
	svc := worker.NewService(ex)
	srv, _, err := worker.NewServer(svc, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), svc
}
