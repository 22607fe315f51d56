package api

import "net/http"

// closeAfter makes the server close the connection once it has answered, by sending
// "Connection: close" with the reply (on every outcome, errors included).
//
// It guards POST /api/v1/client/config. The Tinker SDK (0.25 through 0.38 at least) fetches
// that route through a one-off HTTP client that it never closes. When Python's cyclic
// garbage collector later frees that client on a thread that runs an event loop (a
// recipe's asyncio.run), the socket's finalizer releases the file descriptor at once
// while the client's __del__ schedules aclose() on that loop. In the meantime the SDK's
// own loop opens a new connection, which the kernel gives the same descriptor number;
// the stale aclose() then unregisters that number from the SDK loop's selector, so the
// new connection's reply, already received, is never read: one result poll hangs for the
// SDK's full 45-second timeout. With the connection closed by the server after this one
// reply, the SDK closes its end when it has read the reply, on its own loop, and the
// forgotten client holds no socket by the time it is collected.
// tests/cookbook/stall_repro.py reproduces the hang; api's TestClientConfigClosesConnection
// and tests/cookbook's transport test keep it fixed.
func closeAfter(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		next(w, r)
	}
}
