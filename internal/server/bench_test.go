package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// The handler benchmarks measure the CPU and allocations one call costs in
// `evs serve`'s HTTP handler (gateway, authorizer cache, handler, reply),
// without the sockets, beside a bare handler that decodes the same JSON and
// writes a reply of the same size: the floor of infra/loadtest. The ratio
// of the two is what the load harness's verify/floor ratio is made of once
// the kernel's share is taken out.

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// reset per call as net/http would hand a fresh one.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// SetReadDeadline is there because net/http's writer has it (through
// http.ResponseController): without it the gateway's deadline calls would
// cost an error each, which a real connection never does.
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

// WriteString is there because net/http's writer has it: a string body is
// written without a copy.
func (w *discardWriter) WriteString(s string) (int, error) { w.n += len(s); return len(s), nil }

type benchStack struct {
	h   http.Handler
	key string
}

func newBenchStack(b *testing.B) benchStack { return newBenchStackOpen(b, sqlitestore.OpenServing) }

// newBenchStackOpen is newBenchStack on a store opened by open: Open gives
// a store that is not the directory's only server, so it keeps nothing in
// memory between calls.
func newBenchStackOpen(b *testing.B, open func(context.Context, string, func() time.Time) (*sqlitestore.Store, error)) benchStack {
	b.Helper()
	dir := b.TempDir()
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_RATE_LIMIT": "off", "EVS_SMTP": "off"}
	cfg, err := config.FromEnv(func(k string) string { return env[k] }, false)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := open(ctx, cfg.DataDir, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	key, err := server.Bootstrap(ctx, st, true, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Options{Config: cfg, Store: st, Logger: cfg.Logger(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	// Serve runs the batch worker (a batch is created only with it
	// running); the calls themselves go straight to the handler.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	b.Cleanup(func() { cancel(); <-done })
	return benchStack{h: srv.Handler(), key: key}
}

const benchVerifyBody = `{"email":"alice@example.com","mode":"quick"}`

func serveOnce(b *testing.B, h http.Handler, r *http.Request, body string, w *discardWriter) {
	serveWant(b, h, r, body, w, http.StatusOK)
}

func serveWant(b *testing.B, h http.Handler, r *http.Request, body string, w *discardWriter, want int) {
	r.Body = io.NopCloser(strings.NewReader(body))
	clear(w.h)
	w.status, w.n = 0, 0
	h.ServeHTTP(w, r)
	if w.status != 0 && w.status != want {
		b.Fatalf("status %d", w.status)
	}
}

func benchRequest(method, path, key, body string) *http.Request {
	r, _ := http.NewRequest(method, "http://127.0.0.1:8080"+path, nil)
	r.Header.Set("X-Api-Key", key)
	r.Header.Set("User-Agent", "bench")
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
		r.ContentLength = int64(len(body))
	}
	r.RemoteAddr = "127.0.0.1:50000"
	return r
}

// BenchmarkServeVerifyQuick is POST /v1/verify (quick, test-mode key).
func BenchmarkServeVerifyQuick(b *testing.B) {
	s := newBenchStack(b)
	r := benchRequest(http.MethodPost, "/v1/verify", s.key, benchVerifyBody)
	w := &discardWriter{h: http.Header{}}
	serveOnce(b, s.h, r, benchVerifyBody, w) // warms the authorizer cache
	b.ReportAllocs()
	for b.Loop() {
		serveOnce(b, s.h, r, benchVerifyBody, w)
	}
}

// BenchmarkServeFloor is the load harness's floor handler: decode the same
// JSON strictly, answer with a body of the real reply's size.
func BenchmarkServeFloor(b *testing.B) {
	s := newBenchStack(b)
	r := benchRequest(http.MethodPost, "/v1/verify", s.key, benchVerifyBody)
	w := &discardWriter{h: http.Header{}}
	serveOnce(b, s.h, r, benchVerifyBody, w)
	fh := testkit.FloorHandler(w.n)
	b.ReportAllocs()
	for b.Loop() {
		serveOnce(b, fh, r, benchVerifyBody, w)
	}
}

// BenchmarkServeGetBatch is GET /v1/requests/{id} of a finished 2-address
// batch: "serving" as `evs serve` runs (the batch's view kept in memory),
// "read" on a store that reads SQLite every call, as the first poll after a
// write to the batch does.
func BenchmarkServeGetBatch(b *testing.B) {
	for _, o := range []struct {
		name string
		open func(context.Context, string, func() time.Time) (*sqlitestore.Store, error)
	}{{"serving", sqlitestore.OpenServing}, {"read", sqlitestore.Open}} {
		b.Run(o.name, func(b *testing.B) { benchGetBatch(b, newBenchStackOpen(b, o.open)) })
	}
}

func benchGetBatch(b *testing.B, s benchStack) {
	w := &discardWriter{h: http.Header{}}
	cr := benchRequest(http.MethodPost, "/v1/requests", s.key, `{"emails":["a@example.com","b@example.com"],"mode":"quick"}`)
	serveWant(b, s.h, cr, `{"emails":["a@example.com","b@example.com"],"mode":"quick"}`, w, http.StatusCreated)
	loc := w.h.Get("Location")
	if loc == "" {
		b.Fatalf("no Location (status %d)", w.status)
	}
	r := benchRequest(http.MethodGet, loc, s.key, "")
	serveOnce(b, s.h, r, "", w)
	b.ReportAllocs()
	for b.Loop() {
		serveOnce(b, s.h, r, "", w)
	}
}

// BenchmarkServeVerifyConcurrent is POST /v1/verify (quick) from 64
// goroutines on 2 CPUs, as the load harness drives it, without a key and
// with a unique Idempotency-Key per call: the handler's side of the
// harness's idempotent / plain ratio (each keyed reply is committed and
// synced to the database before it is answered, in groups).
func BenchmarkServeVerifyConcurrent(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "plain"
		if keyed {
			name = "unique-key"
		}
		b.Run(name, func(b *testing.B) {
			s := newBenchStack(b)
			warm := benchRequest(http.MethodPost, "/v1/verify", s.key, benchVerifyBody)
			serveOnce(b, s.h, warm, benchVerifyBody, &discardWriter{h: http.Header{}})
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32) // × GOMAXPROCS goroutines
			b.RunParallel(func(pb *testing.PB) {
				r := benchRequest(http.MethodPost, "/v1/verify", s.key, benchVerifyBody)
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					if keyed {
						r.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(n.Add(1), 10))
					}
					serveOnce(b, s.h, r, benchVerifyBody, w)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
