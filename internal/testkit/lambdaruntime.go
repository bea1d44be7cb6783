package testkit

// Runtime serves the AWS Lambda Runtime API on loopback, so tests can run the
// real function binaries (built with lambda.norpc, started with
// AWS_LAMBDA_RUNTIME_API pointing here) and hand them events, as the Lambda
// service does.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Runtime is a Lambda Runtime API server for one function process.
type Runtime struct {
	// Addr is host:port, the value of AWS_LAMBDA_RUNTIME_API.
	Addr string

	srv     *http.Server
	events  chan invocation
	mu      sync.Mutex
	waiting map[string]chan Outcome
	initErr chan string
	seq     int
	// ready is closed by the function's first GET of its next invocation:
	// its init is over.
	ready     chan struct{}
	readyOnce sync.Once
}

type invocation struct {
	id      string
	payload []byte
}

// Outcome is what the function answered for one invocation.
type Outcome struct {
	// Response is the payload posted to /response; Error the one posted to
	// /error (then Response is nil).
	Response []byte
	Error    []byte
}

// StartRuntime serves the Runtime API on a free loopback port until the test ends.
func StartRuntime(t testing.TB) *Runtime {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{
		Addr:    ln.Addr().String(),
		events:  make(chan invocation, 16),
		waiting: map[string]chan Outcome{},
		initErr: make(chan string, 1),
		ready:   make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", r.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", r.outcome(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", r.outcome(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		select {
		case r.initErr <- string(b):
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

func (r *Runtime) next(w http.ResponseWriter, req *http.Request) {
	r.readyOnce.Do(func() { close(r.ready) })
	select {
	case inv := <-r.events:
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:evs-test")
		h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(inv.payload)
	case <-req.Context().Done():
	}
}

func (r *Runtime) outcome(isErr bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		ch := r.waiting[id]
		delete(r.waiting, id)
		r.mu.Unlock()
		if ch == nil {
			http.Error(w, "unknown invocation", http.StatusBadRequest)
			return
		}
		if isErr {
			ch <- Outcome{Error: b}
		} else {
			ch <- Outcome{Response: b}
		}
		w.WriteHeader(http.StatusAccepted)
	}
}

// Ready is closed once the function has finished its init: its first ask
// for an invocation, the moment Lambda counts as the end of a cold start's
// init phase.
func (r *Runtime) Ready() <-chan struct{} { return r.ready }

// Invoke hands event (marshalled to JSON) to the function and waits for its
// answer, or for timeout. A function that failed to start reports it too.
func (r *Runtime) Invoke(event any, timeout time.Duration) (Outcome, error) {
	payload, err := json.Marshal(event)
	if err != nil {
		return Outcome{}, err
	}
	r.mu.Lock()
	r.seq++
	id := fmt.Sprintf("invocation-%d", r.seq)
	ch := make(chan Outcome, 1)
	r.waiting[id] = ch
	r.mu.Unlock()
	r.events <- invocation{id: id, payload: payload}
	select {
	case o := <-ch:
		return o, nil
	case msg := <-r.initErr:
		return Outcome{}, fmt.Errorf("the function failed to start: %s", strings.TrimSpace(msg))
	case <-time.After(timeout):
		return Outcome{}, fmt.Errorf("no answer within %v", timeout)
	}
}
