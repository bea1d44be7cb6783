package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/authorizer"
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
	// keep makes it keep the body too, in body.
	keep bool
	body []byte
}

func (w *discardWriter) Header() http.Header  { return w.h }
func (w *discardWriter) WriteHeader(code int) { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.keep {
		w.body = append(w.body, b...)
	}
	w.n += len(b)
	return len(b), nil
}

// SetReadDeadline is there because net/http's writer has it (through
// http.ResponseController): without it the gateway's deadline calls would
// cost an error each, which a real connection never does.
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

// WriteString is there because net/http's writer has it: a string body is
// written without a copy.
func (w *discardWriter) WriteString(s string) (int, error) {
	if w.keep {
		w.body = append(w.body, s...)
	}
	w.n += len(s)
	return len(s), nil
}

type benchStack struct {
	h   http.Handler
	key string
}

func newBenchStack(b *testing.B) benchStack { return newBenchStackOpen(b, sqlitestore.OpenServing) }

// newBenchStackOpen is newBenchStack on a store opened by open: Open gives
// a store that is not the directory's only server, so it keeps nothing in
// memory between calls.
func newBenchStackOpen(b *testing.B, open func(context.Context, string, func() time.Time) (*sqlitestore.Store, error), wrap ...func(server.Store) server.Store) benchStack {
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
	var served server.Store = st
	for _, w := range wrap {
		served = w(served)
	}
	srv, err := server.New(server.Options{Config: cfg, Store: served, Logger: cfg.Logger(io.Discard)})
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
	w.status, w.n, w.body = 0, 0, w.body[:0]
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

// BenchmarkRevokedKeyStarredPath is GET on a path full of '*' with a
// revoked key (TestRevokedKeyStarredPath): microseconds, whatever the
// stars; the old matcher backtracked for seconds per call from 12.
func BenchmarkRevokedKeyStarredPath(b *testing.B) {
	var st *sqlitestore.Store
	s := newBenchStackOpen(b, func(ctx context.Context, dir string, now func() time.Time) (*sqlitestore.Store, error) {
		var err error
		st, err = sqlitestore.OpenServing(ctx, dir, now)
		return st, err
	})
	if _, err := st.RevokeKey(context.Background(), authorizer.HashKey(s.key), time.Now()); err != nil {
		b.Fatal(err)
	}
	// A refused key counts as a failed authentication of the client's
	// address, 20 a second at most: the calls come from many addresses.
	clients := make([]string, 1<<16)
	for i := range clients {
		clients[i] = fmt.Sprintf("127.%d.%d.1:50000", i>>8, i&0xff)
	}
	next := 0
	for _, n := range []int{12, 50, 500} {
		b.Run(fmt.Sprintf("stars=%d", n), func(b *testing.B) {
			r := benchRequest(http.MethodGet, "/v1/requests/"+strings.Repeat("*", n)+"/results", s.key, "")
			w := &discardWriter{h: http.Header{}}
			call := func() {
				r.RemoteAddr = clients[next%len(clients)]
				next++
				serveWant(b, s.h, r, "", w, http.StatusForbidden)
			}
			call()
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
		})
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

// BenchmarkCreateBatch measures batch creation through the whole handler
// stack on `evs serve` at the contract's largest sizes: a 50,000-address
// JSON body, and a 1,000,000-address upload (the PUT is outside the
// timer; the create reads, deduplicates and stores the list). Its floor is
// reading the same lists with api.ReadListJSON and api.ReadListCSV alone, side by side, so the figure
// to quote is the ratio. Each batch is cancelled after its creation so the
// worker does not run beside the next one.
func BenchmarkCreateBatch(b *testing.B) {
	csv1M := benchList(1_000_000, "\n")
	body50k := `{"emails":[` + strings.TrimSuffix(benchList(50_000, `",`), ",") + `]}`
	b.Run("body-50k", func(b *testing.B) {
		s := newBenchStack(b)
		w := &discardWriter{h: http.Header{}, keep: true}
		for b.Loop() {
			r := benchRequest(http.MethodPost, "/v1/requests", s.key, body50k)
			serveWant(b, s.h, r, body50k, w, http.StatusCreated)
			b.StopTimer()
			cancelCreated(b, s, w)
			b.StartTimer()
		}
	})
	b.Run("body-50k-floor", func(b *testing.B) {
		for b.Loop() {
			if _, err := api.ReadListJSON(strings.NewReader(body50k), api.ListLimits{MaxAddresses: 50_000, MaxAddressBytes: 512}, api.ListFields{}, func(string) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	// upload-1M keeps the list's rows (a one-column list: its rows file is
	// the list again); upload-1M-without-rows is the same through a store
	// that keeps none, as creation was before rows were kept.
	uploads := []struct {
		name string
		wrap func(server.Store) server.Store
	}{
		{"upload-1M", func(s server.Store) server.Store { return s }},
		{"upload-1M-without-rows", hideRows},
	}
	for _, u := range uploads {
		b.Run(u.name, func(b *testing.B) { benchUpload(b, newBenchStackOpen(b, sqlitestore.OpenServing, u.wrap), csv1M) })
	}
	b.Run("upload-1M-floor", func(b *testing.B) {
		for b.Loop() {
			if _, err := api.ReadListCSV(strings.NewReader(csv1M), api.ListLimits{MaxAddresses: 1_000_000, MaxAddressBytes: 512}, api.CSVLayout{}, func(string) error { return nil }, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchUpload measures creating a batch from an upload of list on s (the
// PUT is outside the timer), cancelling each batch after its creation, and
// reports the create's largest heap peak (live heap sampled every 0.5 ms
// above what was live before it).
func benchUpload(b *testing.B, s benchStack, list string) {
	w := &discardWriter{h: http.Header{}, keep: true}
	var peak uint64
	for b.Loop() {
		b.StopTimer()
		up := benchRequest(http.MethodPost, "/v1/uploads", s.key, `{"contentType":"text/csv"}`)
		serveWant(b, s.h, up, `{"contentType":"text/csv"}`, w, http.StatusCreated)
		var u struct{ UploadID, URL string }
		if err := json.Unmarshal(w.body, &u); err != nil {
			b.Fatalf("upload reply: %v %s", err, w.body)
		}
		put, _ := http.NewRequest(http.MethodPut, u.URL, nil)
		put.Header.Set("Content-Type", "text/csv")
		put.RemoteAddr = "127.0.0.1:50000"
		serveWant(b, s.h, put, list, w, http.StatusOK)
		body := `{"uploadId":"` + u.UploadID + `","mode":"quick"}`
		create := benchRequest(http.MethodPost, "/v1/requests", s.key, body)
		stop := startHeapPeak()
		b.StartTimer()
		serveWant(b, s.h, create, body, w, http.StatusCreated)
		b.StopTimer()
		peak = max(peak, stop())
		cancelCreated(b, s, w)
		b.StartTimer()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// benchList is n distinct addresses over 1,000 domains, each followed by
// sep (quoted when sep starts with a quote).
func benchList(n int, sep string) string {
	var sb strings.Builder
	quote := strings.HasPrefix(sep, `"`)
	for i := range n {
		if quote {
			sb.WriteByte('"')
		}
		fmt.Fprintf(&sb, "user.%d@d%d.example%s", i, i%1000, sep)
	}
	return sb.String()
}

// cancelCreated cancels the batch whose creation w holds.
func cancelCreated(b *testing.B, s benchStack, w *discardWriter) {
	var e struct {
		Request struct{ ID string } `json:"request"`
	}
	if err := json.Unmarshal(w.body, &e); err != nil || e.Request.ID == "" {
		b.Fatalf("create reply: %v %s", err, w.body)
	}
	r := benchRequest(http.MethodPost, "/v1/requests/"+e.Request.ID+"/cancel", s.key, "")
	serveWant(b, s.h, r, "", w, http.StatusOK)
}
