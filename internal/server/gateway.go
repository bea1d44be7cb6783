package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/console"
	"github.com/evs-dev/evs/internal/evs"
)

// gateway is the local stand-in for Amazon API Gateway (REST API) in front
// of the same handlers the Lambda functions run. It reproduces the parts of
// API Gateway the service relies on, so a local run exercises the
// production code paths:
//
//   - one route table (api.Routes, the same as template.yaml); an unknown
//     path gets the MISSING_AUTHENTICATION_TOKEN response (404) before any
//     authorizer runs, as on AWS;
//   - the REQUEST authorizer, called with the event API Gateway builds, its
//     result cached per key for a TTL (Config.AuthTTL, 300 s by default).
//     Unlike API Gateway, an entry is trusted only while the store says no
//     key or account changed since it was made (KeysVersioned), so a key
//     revoked by `evs keys revoke` in another process is refused at its
//     next call, not when the entry expires;
//   - the proxy event as API Gateway builds it: requestContext.requestId,
//     the authorizer context, path parameters, multi-value headers and
//     query strings, base64 for bodies that are not UTF-8;
//   - per-account throttling (token bucket: Config.RateLimit, burst twice
//     that) in place of the usage plan;
//   - gateway responses (401, 403, 404, 429, 500) in the contract's
//     envelope, the same bodies template.yaml declares;
//   - one log line per call (api.Call), also for the calls no function
//     sees; a function's part of it (the domain or batch, a 5xx's cause)
//     comes back through the context.
//
// Beyond API Gateway, it refuses a client that keeps failing to
// authenticate (failLimiter) and bounds how long a body may take to arrive.
type gateway struct {
	// o gives Config.AuthTTL, Config.RateLimit, BodyTimeout, Now, Logger
	// and Metrics.
	o          Options
	routes     []route
	functions  map[string]function
	authorizer authorizerFunc

	// console serves the web console's static files (console.Path).
	console http.Handler
	// ping checks the store for the health endpoint (HealthPath).
	ping func(ctx context.Context) error
	// writable probes the store for the readiness endpoint (ReadyPath);
	// draining turns it 503 once the server is told to stop, and drain
	// waits for inflight, the calls being served, to reach zero.
	writable *writable
	draining atomic.Bool
	inflight atomic.Int64

	// version, when the store has one, tells whether keys or accounts
	// changed since an entry of the cache was made (KeysVersioned).
	version func(ctx context.Context) (int64, error)

	// policies holds the policies compiled so far: the authorizer answers
	// every key of a stage with the same one, and compiling it is most of
	// the cost of an answer not found in the cache.
	policies policyMemo

	mu       sync.Mutex
	cache    map[[32]byte]authEntry
	limiters map[string]*rate.Limiter
	fails    *failLimiter
	// uploads receives lists PUT to upload URLs; nil when the store
	// keeps none.
	uploads uploadStore
	// exports serves the lists of export URLs; nil when the store keeps
	// none.
	exports exportStore
	// bodies bounds the bytes of large bodies read and handled at once.
	bodies *bodyGate
}

// function is a Lambda proxy handler; authorizerFunc a Lambda REQUEST
// authorizer. Tests put fakes in their place.
type (
	function       func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)
	authorizerFunc func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)
)

// Local settings API Gateway has no counterpart of.
const (
	// stage is the stage name in method ARNs and events.
	stage = "local"
	// authFailRate is how many failed authentications (401 and 403) one
	// client address may have per second, with a burst of as many, before
	// its calls are answered 429 without being authorized.
	authFailRate = 20
	// authFailClients bounds how many client addresses the failure count
	// remembers; beyond it the least recent is forgotten.
	authFailClients = 10000
)

type route struct {
	api.Route
	parts []string
}

type authEntry struct {
	resp events.APIGatewayCustomAuthorizerResponse
	// authCtx is resp's context as the integration sees it, built once per
	// entry rather than per call; functions only read it.
	authCtx map[string]any
	policy  policy
	expires time.Time
	// version is the store's keys version read before the authorizer ran.
	version int64
}

// KeysVersioned is a store that can tell cheaply, on every call, whether
// keys or accounts changed between two calls: KeysVersion returns the same
// number only if none did (sqlitestore.Store is one).
type KeysVersioned interface {
	KeysVersion(ctx context.Context) (int64, error)
}

// newGateway serves api.Routes with functions, keyed by api.Route.Function,
// behind az. From o it takes Config.AuthTTL (0: 300 s, negative: no cache),
// Config.RateLimit (0: off), BodyTimeout (0: 30 s), Now and Logger.
func newGateway(o Options, functions map[string]function, az authorizerFunc) *gateway {
	if o.Config.AuthTTL == 0 {
		o.Config.AuthTTL = 300 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	g := &gateway{o: o, functions: functions, authorizer: az, cache: map[[32]byte]authEntry{},
		limiters: map[string]*rate.Limiter{}, fails: newFailLimiter(authFailRate, authFailClients),
		bodies: newBodyGate(o.BodyBudget, o.BodyWait)}
	g.ping = healthCheck(o.Store)
	g.console = console.Handler()
	var probeFailed func()
	if o.Metrics != nil {
		probeFailed = func() { o.Metrics.StoreError("readyz") }
	}
	g.writable = newWritable(o.Store, o.Now, probeFailed)
	if v, ok := o.Store.(KeysVersioned); ok {
		g.version = v.KeysVersion
	}
	for _, r := range api.Routes() {
		g.routes = append(g.routes, route{Route: r, parts: strings.Split(r.Path[1:], "/")})
	}
	return g
}

// match finds the route of path and its path parameters. Paths match
// exactly: a trailing or doubled slash is another path, with no route
// (contract, section 1), so "/v1/requests/" cannot pass for "/v1/requests"
// and slip out of its idempotency scope.
func (g *gateway) match(path string) (route, map[string]string, bool) {
	if !strings.HasPrefix(path, "/") {
		return route{}, nil, false
	}
	// The segments are walked in place: splitting the path would cost an
	// allocation per call for nothing.
	rest := path[1:]
	for _, r := range g.routes {
		var params map[string]string
		if matchParts(r.parts, rest, func(name, value string) {
			if params == nil {
				params = make(map[string]string, 1)
			}
			params[name] = value
		}) {
			return r, params, true
		}
	}
	return route{}, nil, false
}

// matchParts tells whether the "/"-separated segments of path match parts,
// a route's segments ("{name}" matching any non-empty segment), handing
// each parameter to param as it goes.
func matchParts(parts []string, path string, param func(name, value string)) bool {
	for i, p := range parts {
		seg, next, more := strings.Cut(path, "/")
		if more != (i < len(parts)-1) {
			return false // fewer or more segments than the route
		}
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if seg == "" {
				return false
			}
			param(p[1:len(p)-1], seg)
		} else if p != seg {
			return false
		}
		path = next
	}
	return true
}

// statusWriter holds the call's log line and writes the status into it.
type statusWriter struct {
	http.ResponseWriter
	call api.Call
}

func (w *statusWriter) WriteHeader(code int) {
	w.call.Status = code
	w.ResponseWriter.WriteHeader(code)
}

// WriteString passes a string body on without copying it into a []byte,
// as net/http's own writer allows.
func (w *statusWriter) WriteString(s string) (int, error) {
	return io.WriteString(w.ResponseWriter, s)
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP serves one call and writes its one log line, whether or not a
// function saw it, and counts it under its route template when metrics are
// on.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	if g.o.TLS != nil {
		// As API Gateway's events say: the client called over HTTPS
		// (upload URLs are made with it).
		r.Header.Set("X-Forwarded-Proto", "https")
	}
	sw := &statusWriter{ResponseWriter: w, call: api.Call{RequestID: uuid.NewString(), Method: r.Method, Start: g.o.Now(),
		ClientAddr: clientAddr(r, g.o.Config.TrustedProxies)}}
	// The body's deadline runs from here (the headers are in). It is real
	// time, whatever clock the gateway is given. The server also waits on
	// it when it drains a body the handler did not read.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.o.BodyTimeout)) // unsupported only in tests' fakes
	if smuggled(r.Context()) {
		// RFC 9112, section 6.3: refused, and the connection closed, so
		// no byte of its ambiguous body is read as another request.
		w.Header().Set("Connection", "close")
		writeError(sw, http.StatusBadRequest, evs.CodeInvalidRequest,
			"A request must not carry both Content-Length and Transfer-Encoding.", sw.call.RequestID)
	} else {
		g.serve(sw, r, &sw.call)
	}
	end := g.o.Now()
	sw.call.Log(r.Context(), g.o.Logger, end)
	if g.o.Metrics != nil {
		route := sw.call.Route
		if route == "" {
			route = "unmatched" // a client's path never becomes a label
		}
		g.o.Metrics.HTTPRequest(route, sw.call.Status, end.Sub(sw.call.Start))
		if storeFault(&sw.call) {
			g.o.Metrics.StoreError("api")
		}
	}
}

// storeFault tells whether an API call was answered 503 unavailable
// because the store failed it: in `evs serve` the queue is in-process, so
// the store is the one dependency that can be down. The check endpoints
// count their own (the readiness probe, once per probe).
func storeFault(c *api.Call) bool {
	return c.Status == http.StatusServiceUnavailable && c.Route != HealthPath && c.Route != ReadyPath &&
		c.Err != nil && evs.ErrorCode(c.Err) == evs.CodeUnavailable
}

// serve answers the call c, filling in its log line; c.Start is when it
// arrived, the one reading of the clock its checks share.
func (g *gateway) serve(w http.ResponseWriter, r *http.Request, c *api.Call) {
	rid := c.RequestID
	if r.URL.Path == HealthPath {
		c.Route = HealthPath
		g.health(w, r, c)
		return
	}
	if r.URL.Path == ReadyPath {
		c.Route = ReadyPath
		g.ready(w, r, c)
		return
	}
	if console.Serves(r.URL.Path) {
		// The console's static files: no key (the page asks for one and
		// sends it on its own API calls), like the check endpoints.
		c.Route = console.Path
		g.console.ServeHTTP(w, r)
		return
	}
	if id, ok := isUploadPath(r.URL.Path); ok && g.uploads != nil {
		g.receiveUpload(w, r, c, id)
		return
	}
	if id, ok := isExportPath(r.URL.Path); ok && g.exports != nil {
		g.sendExport(w, r, c, id)
		return
	}
	rt, params, ok := g.match(r.URL.Path)
	if !ok {
		writeResponse(w, missingAuthToken, rid, nil)
		return
	}
	c.Route = rt.Path
	key := r.Header.Get("X-Api-Key")
	methodArn := "arn:aws:execute-api:local:000000000000:evs/" + stage + "/" + r.Method + r.URL.Path
	// The cache is looked up once per call: the failure limiter and the
	// authorizer both use the answer.
	var hit cacheHit
	if key != "" {
		hit = g.lookup(r.Context(), key, methodArn, c.Start)
	}
	client := ""
	if !hit.allows {
		client = clientKey(c.ClientAddr)
		// A client that keeps failing is refused before its key is even
		// looked at, so guessing keys is slow; a key already seen to
		// work (cached) still passes, so neighbours behind the same NAT
		// keep working.
		if wait, blocked := g.fails.blocked(client, g.o.Now()); blocked {
			refuseEarly(w, r)
			writeResponse(w, throttled, rid, map[string]string{"Retry-After": retryAfter(wait)})
			return
		}
	}
	// API Gateway answers 401 itself when the identity source is missing.
	typ := unauthorized
	var authResp events.APIGatewayCustomAuthorizerResponse
	if key != "" {
		authResp, typ = g.authorize(r.Context(), r, c, hit, rt, params, methodArn)
	}
	if typ != "" {
		if typ == unauthorized || typ == accessDenied {
			if client == "" {
				client = clientKey(c.ClientAddr)
			}
			g.fails.fail(client, g.o.Now())
		}
		refuseEarly(w, r)
		writeResponse(w, typ, rid, nil)
		return
	}
	// Limits and logs are per account: an account's keys share its budget.
	c.AccountID, _ = authResp.Context["accountId"].(string)
	if c.AccountID == "" {
		c.AccountID = authResp.PrincipalID
	}
	if wait, limited := g.throttle(c.AccountID); limited {
		refuseEarly(w, r)
		writeResponse(w, throttled, rid, map[string]string{"Retry-After": retryAfter(wait)})
		return
	}
	if storesWork(r.Method, rt) && g.lowOnSpace() {
		refuseEarly(w, r)
		writeLowSpace(w, rid)
		return
	}
	// A large body waits for its share of the budget before a byte of it
	// is read, and keeps it until the function has answered.
	release, err := g.bodies.admit(r.Context(), g.bodies.weight(r, rt.MaxBody))
	if err != nil {
		writeBodyBusy(w, rid)
		return
	}
	defer release()
	body, typ := g.readBody(w, r, rt)
	if typ != "" {
		// The rest of the body is never read: close instead.
		w.Header().Set("Connection", "close")
		if typ == requestTooLarge {
			writeTooLarge(w, rt, rid)
			return
		}
		writeResponse(w, typ, rid, nil)
		return
	}
	ev := g.event(r, c, rt, params, body, authResp, hit.authCtx, c.Start)
	resp, err := g.invoke(api.WithCall(r.Context(), c), g.functions[rt.Function], ev)
	if err != nil {
		c.Err = err
		writeResponse(w, default5XX, rid, nil)
		return
	}
	writeProxy(w, resp, rid)
}

// readBody reads the body up to the route's limit, which is under API
// Gateway's 10 MB payload limit: a body longer than that is refused after
// limit+1 bytes, however long it claims or turns out to be; one that does
// not arrive by the deadline set in ServeHTTP fails the read. Once read,
// the deadline is lifted: a deadline left on the idle connection would
// cancel the request's context mid-call when it expires.
func (g *gateway) readBody(w http.ResponseWriter, r *http.Request, rt route) (string, string) {
	limit := rt.MaxBody
	if r.ContentLength > limit {
		return "", requestTooLarge // said so up front: read nothing
	}
	// The deadline runs from now: time spent waiting for the budget of
	// large bodies is not the client's.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.o.BodyTimeout))
	raw := w
	if sw, ok := w.(*statusWriter); ok {
		raw = sw.ResponseWriter // MaxBytesReader tells the server through it
	}
	// The body is read straight into the string the Lambda event carries
	// (a strings.Builder hands its buffer over without a copy): a 6 MiB
	// batch is held once here, not as bytes and again as a string. A body
	// of a stated length gets one buffer of that size (and one byte more,
	// to see its end), not one grown from 512 bytes.
	var body strings.Builder
	if r.ContentLength >= 0 {
		body.Grow(int(r.ContentLength) + 1)
	}
	_, err := io.Copy(&body, http.MaxBytesReader(raw, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return "", requestTooLarge
	case err != nil:
		return "", badRequestBody
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body.String(), ""
}

// refuseEarly marks the connection to be closed after a reply given before
// the request's body was read, so the server does not wait for a body no
// one will use (a client that promises one and never sends it would hold
// the connection until the deadline).
func refuseEarly(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// cacheHit is what the authorizer cache holds for a call's key.
type cacheHit struct {
	ck   [32]byte // the key's hash: the cache never holds a key itself
	resp events.APIGatewayCustomAuthorizerResponse
	// authCtx is the cached entry's integration context.
	authCtx map[string]any
	found   bool // a live cached answer
	allows  bool // and it allows the call: a key shown to work, which a guesser cannot have
	// version is the store's keys version now; the answer of the
	// authorizer is cached only when it could be read (noCache otherwise).
	version int64
	noCache bool
}

// lookup reads the cache entry of key and tells whether it allows methodArn.
// An entry made before keys or accounts last changed is not used: the
// change may be the key's revocation.
func (g *gateway) lookup(ctx context.Context, key, methodArn string, now time.Time) cacheHit {
	h := cacheHit{ck: sha256.Sum256([]byte(key))}
	if g.o.Config.AuthTTL <= 0 {
		return h
	}
	if g.version != nil {
		v, err := g.version(ctx)
		if err != nil {
			// Whether the key changed cannot be told: ask the authorizer,
			// which reads the store and answers for itself.
			h.noCache = true
			return h
		}
		h.version = v
	}
	g.mu.Lock()
	e, ok := g.cache[h.ck]
	g.mu.Unlock()
	if ok && now.Before(e.expires) && e.version == h.version {
		h.resp, h.authCtx, h.found = e.resp, e.authCtx, true
		h.allows = e.policy.allows(methodArn)
	}
	return h
}

// retryAfter renders a wait as whole seconds, at least 1.
func retryAfter(wait time.Duration) string {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return strconv.Itoa(secs)
}

// invoke runs a function, turning a panic into an error as the Lambda
// runtime turns a crash into a failed invocation.
func (g *gateway) invoke(ctx context.Context, fn function, ev events.APIGatewayProxyRequest) (resp events.APIGatewayProxyResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("gateway: function panicked: %v", p)
		}
	}()
	return fn(ctx, ev)
}

// authorize returns the authorizer's allow response, or the gateway
// response type to answer with (and the cause of a 500 in c.Err).
func (g *gateway) authorize(ctx context.Context, r *http.Request, c *api.Call, hit cacheHit, rt route, params map[string]string, methodArn string) (events.APIGatewayCustomAuthorizerResponse, string) {
	if hit.found {
		if !hit.allows {
			return hit.resp, accessDenied
		}
		return hit.resp, ""
	}
	now := g.o.Now()
	hs, mhs := headers(r)
	qs, mqs := query(r)
	resp, err := g.authorizer(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type:                            "REQUEST",
		MethodArn:                       methodArn,
		Resource:                        rt.Path,
		Path:                            r.URL.Path,
		HTTPMethod:                      r.Method,
		Headers:                         hs,
		MultiValueHeaders:               mhs,
		QueryStringParameters:           qs,
		MultiValueQueryStringParameters: mqs,
		PathParameters:                  params,
		RequestContext: events.APIGatewayCustomAuthorizerRequestTypeRequestContext{
			Path: "/" + stage + r.URL.Path, AccountID: "000000000000", ResourcePath: rt.Path,
			Stage: stage, RequestID: c.RequestID, APIID: "evs", HTTPMethod: r.Method,
		},
	})
	if err != nil {
		// "Unauthorized" is the authorizer's documented way to ask for
		// a 401; any other failure is a 500, and neither is cached.
		if err.Error() == "Unauthorized" {
			return resp, unauthorized
		}
		c.Err = fmt.Errorf("authorizer: %w", err)
		return resp, default5XX
	}
	pol := g.policies.compile(resp.PolicyDocument)
	if g.o.Config.AuthTTL > 0 && !hit.noCache {
		g.mu.Lock()
		g.cache[hit.ck] = authEntry{resp: resp, authCtx: integrationContext(resp), policy: pol, expires: now.Add(g.o.Config.AuthTTL), version: hit.version}
		g.mu.Unlock()
	}
	if !pol.allows(methodArn) {
		return resp, accessDenied
	}
	return resp, ""
}

// policy is an authorizer's IAM policy as it bears on execute-api:Invoke,
// compiled once per answer: the resources its Allow and its Deny
// statements name.
type policy struct{ allow, deny *regexp.Regexp }

// policyMemo remembers compiled policies by their statements, up to
// maxPolicies of them (then it starts over: a policy per key is not what
// our authorizer gives, and memory must stay bounded whatever one does).
type policyMemo struct {
	mu sync.Mutex
	m  map[string]policy
}

const maxPolicies = 256

// compile is compilePolicy(doc), remembered.
func (pm *policyMemo) compile(doc events.APIGatewayCustomAuthorizerPolicy) policy {
	var b strings.Builder
	for _, s := range doc.Statement {
		// The parts are joined with characters no ARN, action or effect
		// holds, so two documents never share a key.
		b.WriteString(s.Effect)
		b.WriteByte(0)
		b.WriteString(strings.Join(s.Action, "\x01"))
		b.WriteByte(0)
		b.WriteString(strings.Join(s.Resource, "\x01"))
		b.WriteByte(0x02)
	}
	k := b.String()
	pm.mu.Lock()
	p, ok := pm.m[k]
	pm.mu.Unlock()
	if ok {
		return p
	}
	p = compilePolicy(doc)
	pm.mu.Lock()
	if pm.m == nil || len(pm.m) >= maxPolicies {
		pm.m = map[string]policy{}
	}
	pm.m[k] = p
	pm.mu.Unlock()
	return p
}

// compilePolicy compiles doc. A policy it cannot read allows nothing.
func compilePolicy(doc events.APIGatewayCustomAuthorizerPolicy) policy {
	var allow, deny []string
	for _, s := range doc.Statement {
		action, err := wildcards(s.Action)
		if err != nil {
			return policy{}
		}
		if action == nil || !action.MatchString("execute-api:Invoke") {
			continue
		}
		switch s.Effect {
		case "Allow":
			allow = append(allow, s.Resource...)
		case "Deny":
			deny = append(deny, s.Resource...)
		}
	}
	a, errA := wildcards(allow)
	d, errD := wildcards(deny)
	if errA != nil || errD != nil {
		return policy{}
	}
	return policy{allow: a, deny: d}
}

// allows evaluates the policy for arn the way IAM does: an explicit Deny
// wins, then any Allow.
func (p policy) allows(arn string) bool {
	return p.allow != nil && p.allow.MatchString(arn) && (p.deny == nil || !p.deny.MatchString(arn))
}

// wildcards compiles IAM patterns into one expression that matches what any
// of them matches (nil for none). In IAM '*' stands for any run of
// characters, '/' included, and '?' for one; nothing else is special and
// nothing escapes. path.Match is not that (its '*' stops at '/', and '['
// and '\' mean something there); a regular expression is, and Go matches
// one in time proportional to the ARN (it holds the client's path) times
// the pattern (it comes from the authorizer), never exponentially.
func wildcards(patterns []string) (*regexp.Regexp, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`(?s)\A(?:`)
	for i, p := range patterns {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(iamWildcards.Replace(regexp.QuoteMeta(p)))
	}
	b.WriteString(`)\z`)
	return regexp.Compile(b.String())
}

// iamWildcards turns the '*' and '?' that QuoteMeta escaped back into
// wildcards. An escaped backslash is taken whole, so the backslash of a
// pattern stays a literal one and does not escape what follows it.
var iamWildcards = strings.NewReplacer(`\\`, `\\`, `\*`, `.*`, `\?`, `.`)

// throttle takes a token from the account's bucket.
func (g *gateway) throttle(account string) (time.Duration, bool) {
	if g.o.Config.RateLimit <= 0 {
		return 0, false
	}
	g.mu.Lock()
	lim, ok := g.limiters[account]
	if !ok {
		burst := int(math.Ceil(2 * g.o.Config.RateLimit))
		lim = rate.NewLimiter(rate.Limit(g.o.Config.RateLimit), burst)
		g.limiters[account] = lim
	}
	g.mu.Unlock()
	now := g.o.Now()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, true
	}
	return 0, false
}

// headers is the single- and multi-value header maps of an event. The
// multi-value map is the request's own header map: net/http hands each
// request a fresh one, which nothing writes to once the handler runs, so
// copying it would only cost.
func headers(r *http.Request) (map[string]string, map[string][]string) {
	hs := make(map[string]string, len(r.Header)+1)
	for k, v := range r.Header {
		if len(v) == 0 {
			continue
		}
		hs[k] = v[len(v)-1]
	}
	// net/http takes Host out of the headers; API Gateway's event has it.
	if r.Host != "" {
		hs["Host"] = r.Host
	}
	return hs, r.Header
}

func query(r *http.Request) (map[string]string, map[string][]string) {
	if r.URL.RawQuery == "" {
		return nil, nil // most calls: nothing to parse, no empty map to make
	}
	q := r.URL.Query()
	if len(q) == 0 {
		return nil, nil
	}
	qs := make(map[string]string, len(q))
	mqs := make(map[string][]string, len(q))
	for k, v := range q {
		qs[k] = v[len(v)-1]
		mqs[k] = v
	}
	return qs, mqs
}

// event builds the proxy event API Gateway hands a Lambda function.
// authCtx is auth's integration context when the cache already holds it
// (nil: built here); now is when the call arrived.
func (g *gateway) event(r *http.Request, c *api.Call, rt route, params map[string]string, body string, auth events.APIGatewayCustomAuthorizerResponse, authCtx map[string]any, now time.Time) events.APIGatewayProxyRequest {
	hs, mhs := headers(r)
	qs, mqs := query(r)
	if authCtx == nil {
		authCtx = integrationContext(auth)
	}
	if len(params) == 0 {
		params = nil
	}
	ev := events.APIGatewayProxyRequest{
		Resource:                        rt.Path,
		Path:                            r.URL.Path,
		HTTPMethod:                      r.Method,
		Headers:                         hs,
		MultiValueHeaders:               mhs,
		QueryStringParameters:           qs,
		MultiValueQueryStringParameters: mqs,
		PathParameters:                  params,
		RequestContext: events.APIGatewayProxyRequestContext{
			AccountID:        "000000000000",
			ResourcePath:     rt.Path,
			Stage:            stage,
			RequestID:        c.RequestID,
			Identity:         events.APIGatewayRequestIdentity{SourceIP: sourceIP(r, c), UserAgent: r.UserAgent()},
			Authorizer:       authCtx,
			HTTPMethod:       r.Method,
			Path:             "/" + stage + r.URL.Path,
			APIID:            "evs",
			Protocol:         r.Proto,
			RequestTimeEpoch: now.UnixMilli(),
		},
	}
	if utf8.ValidString(body) {
		ev.Body = body
	} else {
		ev.Body = base64.StdEncoding.EncodeToString([]byte(body))
		ev.IsBase64Encoded = true
	}
	return ev
}

// integrationContext is the authorizer context as API Gateway hands it to
// the integration: the principal and every value as a string.
func integrationContext(auth events.APIGatewayCustomAuthorizerResponse) map[string]any {
	c := make(map[string]any, len(auth.Context)+1)
	c["principalId"] = auth.PrincipalID
	for k, v := range auth.Context {
		if str, ok := v.(string); ok {
			c[k] = str
		} else {
			c[k] = fmt.Sprint(v)
		}
	}
	return c
}

// sourceIP is the event's identity.sourceIp: the client address, as API
// Gateway gives the address its callers come from.
func sourceIP(r *http.Request, c *api.Call) string {
	if c.ClientAddr.IsValid() {
		return c.ClientAddr.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// writeProxy writes a function's proxy response.
func writeProxy(w http.ResponseWriter, resp events.APIGatewayProxyResponse, rid string) {
	h := w.Header()
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		if k == "X-Request-Id" {
			continue // set below, to this call's id
		}
		h.Set(k, v)
	}
	h["X-Request-Id"] = []string{rid}
	body := resp.Body // written as is: no copy into a []byte
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			writeResponse(w, default5XX, rid, nil)
			return
		}
		body = string(b)
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}
