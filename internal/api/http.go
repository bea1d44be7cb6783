package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// request is one call as a handler reads it: its body (read once, within
// the route's limit) and its query, parsed once.
type request struct {
	r     *http.Request
	query map[string]string
	body  []byte
}

// header returns the last value of a request header, as a client that
// repeats a header means its last word.
func (req *request) header(name string) (string, bool) {
	vs := req.r.Header.Values(name)
	if len(vs) == 0 {
		if strings.EqualFold(name, "Host") && req.r.Host != "" {
			return req.r.Host, true
		}
		return "", false
	}
	return vs[len(vs)-1], true
}

// lastValues flattens a query to the last value of each name.
func lastValues(q url.Values) map[string]string {
	if len(q) == 0 {
		return nil
	}
	m := make(map[string]string, len(q))
	for k, v := range q {
		if len(v) > 0 {
			m[k] = v[len(v)-1]
		}
	}
	return m
}

// endpoint is a route's handler: a reply's meaning, or an error that is
// the reply instead.
type endpoint func(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error)

// Guard wraps a route's handler with what a deployment does before it:
// `evs serve` checks the key, the account's rate and the body's budget;
// on AWS, API Gateway has done all that and Guard is nil.
type Guard func(rt Route, next http.Handler) http.Handler

// MountAll mounts every route of the API behind guard (`evs serve`). Each
// Lambda function mounts only its own routes, so the linker leaves out
// the others' handlers.
func (h *Handler) MountAll(guard Guard) func(*http.ServeMux) {
	v, b, o := h.MountVerify(guard), h.MountBatches(guard), h.MountOutcomes(guard)
	return func(mux *http.ServeMux) { v(mux); b(mux); o(mux) }
}

// MountOutcomes mounts the outcome routes behind guard.
func (h *Handler) MountOutcomes(guard Guard) func(*http.ServeMux) {
	return h.mount(guard, map[string]endpoint{
		"POST /v1/outcomes":       h.postOutcomes,
		"DELETE /v1/outcomes":     h.deleteOutcomes,
		"GET /v1/outcomes/report": h.outcomesReport,
	})
}

// MountVerify mounts POST /v1/verify behind guard.
func (h *Handler) MountVerify(guard Guard) func(*http.ServeMux) {
	m := h.mount(guard, map[string]endpoint{"POST /v1/verify": h.verify})
	return func(mux *http.ServeMux) {
		m(mux)
		// The CORS preflight carries no key: it is answered before any
		// guard (on AWS its method has no authorizer).
		mux.HandleFunc("OPTIONS /v1/verify", Preflight)
	}
}

// MountBatches mounts the batch and upload routes behind guard.
func (h *Handler) MountBatches(guard Guard) func(*http.ServeMux) {
	return h.mount(guard, map[string]endpoint{
		"POST /v1/requests":             h.createBatch,
		"GET /v1/requests":              h.listBatches,
		"GET /v1/requests/{id}":         h.getBatch,
		"GET /v1/requests/{id}/results": h.results,
		"GET /v1/requests/{id}/export":  h.export,
		"POST /v1/requests/{id}/cancel": h.cancel,
		"POST /v1/uploads":              h.createUpload,
	})
}

// mount registers eps, keyed by their method-and-path patterns, behind
// guard (nil on AWS). Each route's path also answers its other methods
// with 405 after the guard, as API Gateway's ANY method does.
func (h *Handler) mount(guard Guard, eps map[string]endpoint) func(*http.ServeMux) {
	if guard == nil {
		guard = func(_ Route, next http.Handler) http.Handler { return next }
	}
	return func(mux *http.ServeMux) {
		for _, rt := range Routes() {
			registered := false
			for _, m := range rt.Methods {
				if ep, ok := eps[m+" "+rt.Path]; ok {
					registered = true
					mux.Handle(m+" "+rt.Path, guard(rt, h.serve(rt, ep)))
				}
			}
			if registered {
				mux.Handle(rt.Path, guard(rt, h.serve(rt, nil)))
			}
		}
	}
}

// Mux is the API as a Lambda function serves it: what the mounts add,
// every other path NotFound, all behind Observe.
func Mux(o ObserveOptions, mounts ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	for _, m := range mounts {
		m(mux)
	}
	mux.HandleFunc("/", NotFound)
	return Observe(o, mux)
}

// bodyLimit is the most bytes route rt's handler reads of a body: the
// route's MaxBody for a POST (the deployment's own for MaxBatchBody).
func (h *Handler) bodyLimit(rt Route, method string) int64 {
	switch {
	case method != http.MethodPost:
		return MaxOtherBody
	case rt.MaxBody == MaxBatchBody:
		return h.d.MaxBatchBody
	}
	return rt.MaxBody
}

// serve is the http.Handler of route rt: it runs ep (nil: a method the
// route does not allow) for the deployment's principal and renders its
// reply.
func (h *Handler) serve(rt Route, ep endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		c := CallFromContext(ctx)
		c.Route = rt.Path
		p, authenticated := PrincipalOf(ctx)
		c.AccountID = p.AccountID
		var reply idempotency.Reply
		var err error
		if authenticated {
			err = Permit(w, r, rt, p) // here where both deployments pass
		}
		switch {
		case !authenticated:
			// A route wired without its key check: our fault.
			err = errors.New("api: request without a principal")
		case err != nil:
		case ep == nil || !slices.Contains(rt.Methods, r.Method):
			err = notAllowed(r.Method, rt.Methods...)
		default:
			var req *request
			req, err = h.read(r, rt)
			if err == nil && rt.Heavy != nil && rt.Heavy(r) {
				// Released once the reply, streamed or not, is written.
				var release func()
				release, err = h.reads.admit(p.AccountID)
				if err == nil {
					defer release()
				}
			}
			if err == nil {
				reply, err = ep(ctx, req, p)
			}
		}
		if err != nil {
			reply = errReply(err)
		}
		c.Err = err
		if c.Attr.Key == "" && rt.Path != "/v1/verify" {
			id := r.PathValue("id")
			if id == "" {
				// A create names its batch in Location.
				id, _ = strings.CutPrefix(reply.Headers["Location"], batchPath(""))
			}
			c.Attr = slog.String("batchId", id)
		}
		render(w, reply, c.RequestID)
		if reply.Stream != nil {
			if err := reply.Stream(w); err != nil {
				// The status is sent: only a cut tells the client.
				c.Err, c.Cut = err, true
				panic(http.ErrAbortHandler)
			}
		}
	})
}

// Permit applies authorizer.Permit to the call of principal p on route rt,
// and lets the page that made a publishable key's allowed call read the
// reply (Access-Control-Allow-Origin). `evs serve`'s edge calls it too, to
// refuse before a limit is spent.
func Permit(w http.ResponseWriter, r *http.Request, rt Route, p evs.Principal) error {
	origin := ""
	if vs := r.Header.Values("Origin"); len(vs) == 1 {
		origin = vs[0] // a browser sends one; two name no single page
	}
	if err := authorizer.Permit(p, r.Method, rt.Path, origin); err != nil {
		return err
	}
	if p.Kind == evs.KeyPublishable {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
		if !slices.Contains(h.Values("Vary"), "Origin") {
			h.Add("Vary", "Origin")
		}
	}
	return nil
}

// Preflight answers the CORS preflight of POST /v1/verify, which carries
// no key. It cannot know the real request's key, so it lets any origin
// ask; the real request enforces the key's origins (Permit).
func Preflight(w http.ResponseWriter, r *http.Request) {
	c := CallFromContext(r.Context())
	c.Route = "/v1/verify"
	h := w.Header()
	h.Add("Vary", "Origin")
	if origin := r.Header.Get("Origin"); origin != "" {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", http.MethodPost)
		h.Set("Access-Control-Allow-Headers", "Content-Type, X-Api-Key")
		h.Set("Access-Control-Max-Age", strconv.Itoa(PreflightMaxAge))
	}
	w.WriteHeader(http.StatusNoContent)
}

// PreflightMaxAge is how long, in seconds, a browser may keep a preflight's
// answer (browsers cap it: Chromium at 2 hours).
const PreflightMaxAge = 7200

func (h *Handler) read(r *http.Request, rt Route) (*request, error) {
	limit := h.bodyLimit(rt, r.Method)
	if r.ContentLength > limit {
		return nil, TooLarge(rt.Path, limit)
	}
	raw, err := readBody(r.Body, r.ContentLength, limit)
	switch _, tooBig := errors.AsType[*http.MaxBytesError](err); {
	case int64(len(raw)) > limit || tooBig:
		return nil, TooLarge(rt.Path, limit)
	case err != nil && evs.ErrorCode(err) == evs.CodeInvalidRequest:
		return nil, err // an adapter's own word on the body (bad base64)
	case err != nil:
		return nil, &bodyError{err: err}
	}
	req := &request{r: r, body: raw}
	if r.URL.RawQuery != "" { // most calls have none: no map made
		req.query = lastValues(r.URL.Query())
	}
	return req, nil
}

// readBody reads at most limit+1 bytes of body, into one buffer when its
// length is stated: a 6 MiB batch is held once.
func readBody(body io.Reader, length, limit int64) ([]byte, error) {
	if body == nil || body == http.NoBody {
		return nil, nil
	}
	if length < 0 || length > limit {
		return io.ReadAll(io.LimitReader(body, limit+1))
	}
	buf := make([]byte, length+1)
	n, err := io.ReadFull(body, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return buf[:n], err
}

// bodyError is a body that could not be read: it stopped arriving in time
// or the connection failed. 400, as API Gateway's BAD_REQUEST_BODY.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "api: reading the request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error {
	return evs.Errorf(evs.CodeInvalidRequest, "The request body is invalid.")
}

// contentTypeJSONHeader is one slice for all replies: net/http only reads
// it, and Set or Add give the key a new slice.
var contentTypeJSONHeader = []string{contentTypeJSON}

// render writes a reply's meaning for the call requestID: the id goes into
// X-Request-Id and into the body (first member of a JSON success,
// error.requestId of an error).
func render(w http.ResponseWriter, r idempotency.Reply, requestID string) {
	h := w.Header()
	for k, v := range r.Headers {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	ct := r.Headers["Content-Type"]
	if ct == "" {
		ct = contentTypeJSON
		h["Content-Type"] = contentTypeJSONHeader
	}
	if v := h["X-Request-Id"]; len(v) != 1 || v[0] != requestID { // Observe sets it for every reply
		h["X-Request-Id"] = []string{requestID}
	}
	body := r.Body
	switch {
	case ct != contentTypeJSON:
		// CSV and other media carry no request id in the body.
	case r.StatusCode >= 400:
		var e errorMeaning
		if json.Unmarshal(r.Body, &e) != nil || e.Code == "" {
			e = errorMeaning{Code: evs.CodeInternal, Message: evs.ErrorMessage(errors.New("unreadable reply"))}
		}
		body = ErrorBody(e.Code, e.Message, requestID)
	default:
		body = withRequestID(r.Body, requestID)
	}
	if r.Stream == nil {
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(cmp.Or(r.StatusCode, http.StatusOK))
	_, _ = w.Write(body)
}

// Call is a call's one log line. Its fields are ids, the route template and
// a domain: never an address or a key. Observe makes it and writes it; the
// layers the call passes through fill in what only they know.
type Call struct {
	RequestID string
	Method    string
	Route     string // the route's template, "" when none matched
	AccountID string
	// ClientAddr is the client's address (the peer, the one a trusted
	// proxy forwarded for, or API Gateway's sourceIp).
	ClientAddr netip.Addr
	Status     int
	Start      time.Time
	Err        error // the cause of a 5xx, logged at ERROR level
	// Cut is set when the reply was cut after its status was sent: Err is
	// then logged too.
	Cut       bool
	Attr      slog.Attr     // the handler's own field: a domain or a batch id
	principal evs.Principal // `evs serve`'s key check's (SetPrincipal)
}

type callKey struct{}

// SetPrincipal hands the call's handler its caller (PrincipalOf), on the
// call's line: a context of its own would cost a copy of the request.
func (c *Call) SetPrincipal(p evs.Principal) { c.principal = p }

// PrincipalOf returns the caller of the call ctx belongs to (SetPrincipal,
// else evs.PrincipalFromContext); ok is false when never authenticated.
func PrincipalOf(ctx context.Context) (p evs.Principal, ok bool) {
	if c, isCall := ctx.Value(callKey{}).(*Call); isCall && c.principal.AccountID != "" {
		return c.principal, true
	}
	return evs.PrincipalFromContext(ctx)
}

// CallFromContext returns the log line of the call ctx belongs to, or a
// fresh one that no one writes.
func CallFromContext(ctx context.Context) *Call {
	if c, ok := ctx.Value(callKey{}).(*Call); ok {
		return c
	}
	return &Call{RequestID: evs.RequestIDFromContext(ctx)}
}

// Log writes the line of a call that ended at end.
func (c *Call) Log(ctx context.Context, l *slog.Logger, end time.Time) {
	level := slog.LevelInfo
	if c.Err != nil && (c.Status >= 500 || c.Cut) {
		level = slog.LevelError
	}
	// To the handler directly: Logger.LogAttrs would walk the stack for a
	// source position no one logs.
	h := l.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	rec := slog.NewRecord(end, level, "call", 0)
	// One AddAttrs call: each past the record's five inline fields grows it.
	attrs := [9]slog.Attr{
		slog.String("requestId", c.RequestID),
		slog.String("method", c.Method),
		slog.String("route", c.Route),
		slog.Int("status", c.Status),
		slog.Int64("latencyMs", end.Sub(c.Start).Milliseconds()),
		slog.String("accountId", c.AccountID),
	}
	n := 6
	if c.ClientAddr.IsValid() {
		attrs[n] = slog.String("client", c.ClientAddr.String())
		n++
	}
	if level == slog.LevelError {
		attrs[n] = slog.String("error", c.Err.Error())
		n++
	}
	attrs[n] = c.Attr
	rec.AddAttrs(attrs[:n+1]...)
	_ = h.Handle(ctx, rec)
}

// ObserveOptions configure Observe.
type ObserveOptions struct {
	Logger     *slog.Logger
	Now        func() time.Time                 // default time.Now
	ClientAddr func(r *http.Request) netip.Addr // default PeerAddr
	Done       func(c *Call, end time.Time)     // told of every call once answered
}

// Observe is the outermost layer of both deployments: it gives each call
// its request id (the platform's, or a new UUID) in X-Request-Id, writes
// its one log line, and turns a panic into the contract's 500.
func Observe(o ObserveOptions, next http.Handler) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	if o.ClientAddr == nil {
		o.ClientAddr = PeerAddr
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := evs.RequestIDFromContext(r.Context())
		if rid == "" {
			rid = uuid.NewString()
		}
		w.Header()["X-Request-Id"] = []string{rid}
		sw := &statusWriter{ResponseWriter: w, call: Call{RequestID: rid, Method: r.Method, Start: o.Now(), ClientAddr: o.ClientAddr(r)}}
		ctx := context.WithValue(r.Context(), callKey{}, &sw.call)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { // a reply cut on purpose (Reply.Stream)
					sw.call.Log(ctx, o.Logger, o.Now())
					panic(p)
				}
				sw.call.Err = fmt.Errorf("api: handler panicked: %v", p)
				if !sw.wrote {
					WriteError(sw, evs.Errorf(evs.CodeInternal, "An internal error occurred."), rid)
				}
			}
			end := o.Now()
			sw.call.Status = cmp.Or(sw.call.Status, http.StatusOK)
			sw.call.Log(ctx, o.Logger, end)
			if o.Done != nil {
				o.Done(&sw.call, end)
			}
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// PeerAddr is the address of r's peer (ParseHost of its RemoteAddr).
func PeerAddr(r *http.Request) netip.Addr { return ParseHost(r.RemoteAddr) }

// ParseHost reads an address with or without a port ("192.0.2.7",
// "192.0.2.7:5555", "[2001:db8::1]:443", "2001:db8::1"), an IPv4-mapped
// one as IPv4, without a zone; the zero Addr when it is none.
func ParseHost(s string) netip.Addr {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, _ := netip.ParseAddr(s)
	return a.Unmap().WithZone("")
}

type statusWriter struct {
	http.ResponseWriter
	call  Call
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.call.Status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.call.Status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteError answers err, classified into the contract's envelope, for the
// call requestID.
func WriteError(w http.ResponseWriter, err error, requestID string) {
	render(w, errReply(err), requestID)
}

// NotFound answers every path no route has: 404 not_found, as API
// Gateway's MISSING_AUTHENTICATION_TOKEN response does.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, evs.Errorf(evs.CodeNotFound, "No such route."), CallFromContext(r.Context()).RequestID)
}

// Canonical refuses, with NotFound, a path that the standard mux would
// redirect to a cleaned form: "/v1/requests/" is another path, with no
// route, and cannot slip out of "/v1/requests"'s idempotency scope.
func Canonical(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "" || p[0] != '/' || (p != "/" && path.Clean(p) != p && !(strings.HasSuffix(p, "/") && path.Clean(p)+"/" == p)) || r.Method == http.MethodConnect {
			NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
