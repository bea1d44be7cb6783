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

// request is one call as a handler reads it: the route it matched, its
// body (read once, within the route's limit) and its query, parsed once.
type request struct {
	r *http.Request
	// rid is the call's request id; route the route's template.
	rid, route string
	query      map[string]string
	body       []byte
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

// endpoint is a route's handler: it answers a reply's meaning, or an error
// that is the reply instead. It may give the call's log line its field
// (CallFromContext); a route of a batch gets the batch's id by default.
type endpoint func(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error)

// Guard wraps a route's handler with what a deployment does before it:
// `evs serve` checks the key, the account's rate and the body's budget;
// on AWS, API Gateway has done all that and Guard is nil.
type Guard func(rt Route, next http.Handler) http.Handler

// The mounts add routes to a mux. Each Lambda function mounts only its
// own routes, so the linker leaves out the handlers (and their
// dependencies) of the others.

// MountAll mounts every route of the API behind guard (`evs serve`).
func (h *Handler) MountAll(guard Guard) func(*http.ServeMux) {
	v, b, o := h.MountVerify(guard), h.MountBatches(guard), h.MountOutcomes(guard)
	return func(mux *http.ServeMux) { v(mux); b(mux); o(mux) }
}

// MountOutcomes mounts the outcome routes (contract, section 18) behind
// guard.
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
// guard (nil: none, as on AWS, where API Gateway has checked the key and
// the rate). Each route's path also answers its other methods with 405 and
// Allow, after the guard, as API Gateway's ANY method hands every method
// of a known path to the function.
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
					// A pattern with GET also takes HEAD: the handler
					// refuses it.
					mux.Handle(m+" "+rt.Path, guard(rt, h.serve(rt, ep)))
				}
			}
			if registered {
				mux.Handle(rt.Path, guard(rt, h.serve(rt, nil)))
			}
		}
	}
}

// Mux is the API as a Lambda function serves it, behind API Gateway: what
// the mounts add (its routes, the console), every other path NotFound, all
// behind Observe.
func Mux(o ObserveOptions, mounts ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	for _, m := range mounts {
		m(mux)
	}
	mux.HandleFunc("/", NotFound)
	return Observe(o, mux)
}

// bodyLimit is the most bytes route rt's handler reads of a body: the
// route's MaxBody for a POST, the deployment's own where that is
// MaxBatchBody. No other method takes a body: a large one is refused.
func (h *Handler) bodyLimit(rt Route, method string) int64 {
	switch {
	case method != http.MethodPost:
		return MaxOtherBody
	case rt.MaxBody == MaxBatchBody:
		return h.d.MaxBatchBody
	}
	return rt.MaxBody
}

// serve is the http.Handler of route rt: it reads the principal the
// deployment put in the context, reads the body within the route's limit,
// runs ep (nil: a method the route does not allow) and renders its reply
// with the call's request id.
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
			// The rule of publishable keys, here where both deployments
			// pass (contract, section 17).
			err = Permit(w, r, rt, p)
		}
		switch {
		case !authenticated:
			// Our fault (a route wired without its key check), not the
			// client's.
			err = errors.New("api: request without a principal")
		case err != nil:
		case ep == nil || !slices.Contains(rt.Methods, r.Method):
			err = notAllowed(r.Method, rt.Methods...)
		default:
			var req *request
			req, err = h.read(r, rt, c.RequestID)
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
				// The status is sent: only a cut connection tells the
				// client the list is not whole.
				c.Err, c.Cut = err, true
				panic(http.ErrAbortHandler)
			}
		}
	})
}

// Permit applies authorizer.Permit to the call of principal p on route rt.
// A publishable key's allowed call is answered with its origin in
// Access-Control-Allow-Origin, so the page that made it may read the
// reply; a refused one is not. The handlers call it on both deployments;
// `evs serve`'s edge calls it too, to refuse before a limit is spent.
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

// Preflight answers the CORS preflight of POST /v1/verify (OPTIONS, no
// key: a browser sends none on it). It cannot know which key the real
// request will carry, so it lets any origin ask; the real request is where
// the key's origins are enforced (Permit), and its reply is readable only
// by a listed origin. No key, no store, no cost.
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
	if c.RequestID != "" {
		h.Set("X-Request-Id", c.RequestID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// PreflightMaxAge is how long, in seconds, a browser may keep a preflight's
// answer (browsers cap it: Chromium at 2 hours).
const PreflightMaxAge = 7200

// read takes the call's body, within the route's limit, and its query.
func (h *Handler) read(r *http.Request, rt Route, rid string) (*request, error) {
	limit := h.bodyLimit(rt, r.Method)
	if r.ContentLength > limit {
		return nil, TooLarge(rt.Path, limit)
	}
	raw, err := readBody(r.Body, r.ContentLength, limit)
	if err != nil || int64(len(raw)) > limit {
		return nil, bodyProblem(err, int64(len(raw)) > limit, rt.Path, limit)
	}
	return &request{r: r, rid: rid, route: rt.Path, query: lastValues(queryOf(r)), body: raw}, nil
}

// bodyProblem is the error of a body that could not be read (err) or is
// longer than limit (tooLong). It is apart from read so that its
// errors.As target is made only for a call that needs it.
func bodyProblem(err error, tooLong bool, route string, limit int64) error {
	var tooBig *http.MaxBytesError
	switch {
	case tooLong || errors.As(err, &tooBig):
		return TooLarge(route, limit)
	case evs.ErrorCode(err) == evs.CodeInvalidRequest:
		return err // an adapter's own word on the body (bad base64)
	default:
		return &bodyError{err: err}
	}
}

// readBody reads at most limit+1 bytes of body. A body of a stated length
// gets one buffer of that size and a byte more, not one grown from 512
// bytes: a 6 MiB batch is held once.
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

// queryOf parses the query only when there is one: most calls have none.
func queryOf(r *http.Request) url.Values {
	if r.URL.RawQuery == "" {
		return nil
	}
	return r.URL.Query()
}

// bodyError is a body that could not be read: it stopped arriving in time
// or the connection failed. 400, as API Gateway's BAD_REQUEST_BODY.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "api: reading the request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error {
	return evs.Errorf(evs.CodeInvalidRequest, "The request body is invalid.")
}

// contentTypeJSONHeader is the Content-Type of most replies, one slice
// for all: net/http only reads a header's values, and Set or Add give the
// key a new slice (Add appends to this full one).
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
	if v := h["X-Request-Id"]; len(v) != 1 || v[0] != requestID {
		// Observe has set it already, for every reply of the call.
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
	// Route is the route's template, "" when no route matched.
	Route     string
	AccountID string
	// ClientAddr is the address of the client (`evs serve`: the peer, or
	// behind a trusted proxy the address it forwarded for; Lambda: API
	// Gateway's sourceIp); logged as "client" when known.
	ClientAddr netip.Addr
	Status     int
	Start      time.Time
	// Err is the cause of a 5xx, logged at ERROR level; the client saw only
	// the envelope.
	Err error
	// Cut is set when the reply was cut after its status was sent (a
	// streamed list whose reading failed): Err is then logged too.
	Cut bool
	// Attr is the handler's own field: the address's domain or the batch id.
	Attr slog.Attr
	// principal is the caller as `evs serve`'s key check found it
	// (SetPrincipal); on AWS the context carries it instead
	// (evs.PrincipalFromContext).
	principal evs.Principal
}

type callKey struct{}

// SetPrincipal hands the call's handler its caller (PrincipalOf). The
// call's line is in the context already: a context of its own for the
// principal would cost every call another copy of the request.
func (c *Call) SetPrincipal(p evs.Principal) { c.principal = p }

// PrincipalOf returns the caller of the call ctx belongs to: the one
// `evs serve`'s key check set on the call's line, else the one the context
// carries (evs.PrincipalFromContext: on AWS, the authorizer's answer). ok
// is false when the call was never authenticated.
func PrincipalOf(ctx context.Context) (p evs.Principal, ok bool) {
	if c, isCall := ctx.Value(callKey{}).(*Call); isCall && c.principal.AccountID != "" {
		return c.principal, true
	}
	return evs.PrincipalFromContext(ctx)
}

// CallFromContext returns the log line of the call ctx belongs to; a
// context that has none (a handler called without Observe) gets a fresh
// one, written by no one.
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
	// The record goes to the handler directly: Logger.LogAttrs would also
	// walk the stack for a source position no one logs, on every call.
	h := l.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	rec := slog.NewRecord(end, level, "call", 0)
	// One AddAttrs call: each call past the record's five inline fields
	// grows its slice again.
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
	Logger *slog.Logger
	// Now is the clock of the line's latency (default time.Now).
	Now func() time.Time
	// ClientAddr tells the client's address (default: the peer's).
	ClientAddr func(r *http.Request) netip.Addr
	// Done, when set, is told of every call once answered (metrics).
	Done func(c *Call, end time.Time)
}

// Observe is the outermost layer of both deployments: it gives each call
// its request id (the one the platform assigned, or a new UUID), writes
// its one log line, including for calls no route answers, puts the id in
// X-Request-Id of every reply, and turns a panic into the contract's 500.
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
				if p == http.ErrAbortHandler {
					// A reply cut on purpose (Reply.Stream): its line
					// says why, then net/http closes the connection.
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

// PeerAddr is the address of r's peer.
func PeerAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// statusWriter writes the status into the call's line.
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
// Gateway's MISSING_AUTHENTICATION_TOKEN response does on AWS.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, evs.Errorf(evs.CodeNotFound, "No such route."), CallFromContext(r.Context()).RequestID)
}

// Canonical refuses, with NotFound, a path that the standard mux would
// redirect to a cleaned form: a trailing or doubled slash or a dot segment
// is another path, with no route (contract, section 1), so
// "/v1/requests/" cannot pass for "/v1/requests" and slip out of its
// idempotency scope.
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
