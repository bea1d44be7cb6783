package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"net/netip"

	"golang.org/x/time/rate"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
)

// edge is `evs serve`'s HTTP front: the API's handlers on the standard
// mux, with what API Gateway does for them on AWS written as middleware in
// front of each route:
//
//   - the key lookup, its answer cached for Config.AuthTTL and trusted only
//     while the store says no key or account changed since (KeysVersioned),
//     so a key revoked in another process is refused at its next call;
//   - per-account throttling (Config.RateLimit, burst twice that);
//   - the same refusals as template.yaml's gateway responses (responses.go).
//
// Beyond API Gateway, it refuses a client that keeps failing to
// authenticate (failLimiter) and new work when the disk is low, shares a
// budget among large bodies (bodyGate) and bounds a body's arrival.
type edge struct {
	o       Options
	handler http.Handler
	keys    keyLookup
	calls   func(c *api.Call, end time.Time) // counts each call in the metrics; nil without

	ping func(ctx context.Context) error // the health endpoint's store check
	// writable probes the store for the readiness endpoint; draining
	// turns it 503, and drain waits for inflight calls to end.
	writable *writable
	egress   *egressWatches // what /readyz says of how receivers see us
	draining atomic.Bool
	inflight atomic.Int64

	// version, when the store has one, tells whether keys or accounts
	// changed since a cache entry was made (KeysVersioned).
	version func(ctx context.Context) (int64, error)

	mu                sync.Mutex
	cache             map[[32]byte]authEntry
	limiters          map[string]*rate.Limiter
	fails             *failLimiter
	pkClients, pkKeys *failLimiter // publishable keys' limits, per client address and per key
	uploads           uploadStore  // nil when the store keeps none
	ledger            api.Ledger   // charges uploads as they arrive
	exports           exportStore  // nil when the store keeps none
	bodies            *bodyGate
	// receiving holds the ids of the uploads whose list is arriving: one
	// PUT at a time per upload.
	receiving sync.Map
}

// Local settings API Gateway has no counterpart of.
const (
	// authFailRate is how many failed authentications (401 and 403) one
	// client address may have per second, with a burst of as many, before
	// its calls are answered 429 without being authorized.
	authFailRate    = 20
	authFailClients = 10000 // client addresses remembered, least recent forgotten
)

// authEntry is a key's cached answer: its principal, and whether the key
// is revoked or its account suspended.
type authEntry struct {
	p         evs.Principal
	forbidden bool
	expires   time.Time
	version   int64 // the store's keys version read before the lookup
}

// KeysVersioned is a store that can tell cheaply, on every call, whether
// keys or accounts changed between two calls: KeysVersion returns the same
// number only if none did (sqlitestore.Store is one).
type KeysVersioned interface {
	KeysVersion(ctx context.Context) (int64, error)
}

// keyLookup resolves an API key (*authorizer.Authorizer is one).
type keyLookup interface {
	Authorize(ctx context.Context, key string) (authorizer.Principal, error)
}

// newEdge serves the routes mount adds behind the key lookup of keys.
// Config.AuthTTL is 300 s when 0 (negative: no cache), BodyTimeout 30 s.
func newEdge(o Options, mount func(api.Guard) func(*http.ServeMux), keys keyLookup, bodies *bodyGate) *edge {
	o.Config.AuthTTL = cmp.Or(o.Config.AuthTTL, 300*time.Second)
	o.BodyTimeout = cmp.Or(max(o.BodyTimeout, 0), 30*time.Second)
	if bodies == nil {
		bodies = newBodyGate(o.BodyBudget, o.BodyWait)
	}
	e := &edge{o: o, keys: keys, cache: map[[32]byte]authEntry{},
		limiters: map[string]*rate.Limiter{}, fails: newFailLimiter(authFailRate, authFailClients), bodies: bodies,
		pkClients: newClientLimiter(authFailClients), pkKeys: newClientLimiter(authFailClients)}
	e.ping = healthCheck(o.Store)
	var probeFailed func()
	if o.Metrics != nil {
		probeFailed = func() { o.Metrics.StoreError("readyz") }
		e.calls = app.Calls(o.Metrics)
	}
	e.writable = newWritable(o.Store, o.Now, probeFailed)
	if v, ok := o.Store.(KeysVersioned); ok {
		e.version = v.KeysVersion
	}
	e.uploads, _ = o.Store.(uploadStore)
	e.exports, _ = o.Store.(exportStore)

	mux := http.NewServeMux()
	mount(e.guard)(mux)
	// The check endpoints and the console's files need no key.
	mux.HandleFunc(HealthPath, e.health)
	mux.HandleFunc(ReadyPath, e.ready)
	api.MountConsole(mux, api.ConsoleHandler())
	if e.uploads != nil {
		mux.HandleFunc(uploadRoute, e.receiveUpload)
	}
	if e.exports != nil {
		mux.HandleFunc(exportRoute, e.sendExport)
	}
	if o.sns != nil {
		// SNS sends no key: the URL's token names the account (sns.go).
		mux.HandleFunc(snsRoute, e.receiveSNS)
	}
	mux.HandleFunc("/", api.NotFound)
	e.handler = api.Observe(api.ObserveOptions{
		Logger:     o.Logger,
		Now:        o.Now,
		ClientAddr: func(r *http.Request) netip.Addr { return clientAddr(r, o.Config.TrustedProxies) },
		Done:       e.count,
	}, framed(api.Canonical(mux)))
	return e
}

func routed(r *http.Request, route string) *api.Call {
	c := api.CallFromContext(r.Context())
	c.Route = route
	return c
}

func (e *edge) count(c *api.Call, end time.Time) {
	if e.calls == nil {
		return
	}
	e.calls(c, end)
	if storeFault(c) {
		e.o.Metrics.StoreError("api")
	}
}

// storeFault tells whether an API call was answered 503 because the store,
// the one dependency that can be down, failed it. The check endpoints
// count their own.
func storeFault(c *api.Call) bool {
	return c.Status == http.StatusServiceUnavailable && c.Route != HealthPath && c.Route != ReadyPath &&
		c.Err != nil && evs.ErrorCode(c.Err) == evs.CodeUnavailable
}

// ServeHTTP serves one call.
func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.inflight.Add(1)
	defer e.inflight.Add(-1)
	if e.o.TLS != nil { // for upload URLs
		r.Header.Set("X-Forwarded-Proto", "https")
	}
	// The body's deadline runs from here, in real time. A call without a
	// body gets none: one left on the connection would cancel the call's
	// context mid-call when it expires.
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(e.o.BodyTimeout)) // unsupported only in tests' fakes
	}
	e.handler.ServeHTTP(w, r)
}

// framed refuses a request whose head carried both Content-Length and
// Transfer-Encoding (RFC 9112, section 6.3), and closes the connection, so
// no byte of its ambiguous body is read as another request.
func framed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if smuggled(r.Context()) {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusBadRequest, evs.CodeInvalidRequest,
				"A request must not carry both Content-Length and Transfer-Encoding.", api.CallFromContext(r.Context()).RequestID)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guard runs before route rt's handler what API Gateway runs on AWS, and
// what `evs serve` adds.
func (e *edge) guard(rt api.Route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := routed(r, rt.Path)
		rid := c.RequestID
		p, typ, extra := e.authenticate(r, c)
		if typ != "" {
			defer refuseEarly(w, r)()
			writeResponse(w, typ, rid, extra)
			return
		}
		c.AccountID = p.AccountID // an account's keys share its limits
		c.SetPrincipal(p)
		if err := api.Permit(w, r, rt, p); err != nil { // before it spends a limit
			defer refuseEarly(w, r)()
			writeError(w, http.StatusForbidden, evs.CodeForbidden, evs.ErrorMessage(err), rid)
			return
		}
		if wait, limited := e.throttleCall(c, p); limited {
			defer refuseEarly(w, r)()
			writeResponse(w, throttled, rid, map[string]string{"Retry-After": api.RetryAfter(wait)})
			return
		}
		if storesWork(r.Method, rt.Path) && e.lowOnSpace() {
			defer refuseEarly(w, r)()
			writeLowSpace(w, rid)
			return
		}
		// A large body waits for its share of the budget before a byte of
		// it is read, and keeps it until the handler has answered.
		weight := e.bodies.weight(r, rt.MaxBody)
		release, err := e.bodies.admit(r.Context(), c.AccountID, weight)
		if err != nil {
			writeBodyBusy(w, r, err, rid)
			return
		}
		defer release()
		if r.ContentLength != 0 {
			// The deadline is lifted once the body is read, never past
			// the route's limit.
			b := &deadlineBody{ReadCloser: http.MaxBytesReader(unwrap(w), r.Body, rt.MaxBody), rc: *http.NewResponseController(w), h: w.Header()}
			if weight > 0 { // time spent waiting for the budget is not the client's
				_ = b.rc.SetReadDeadline(time.Now().Add(e.o.BodyTimeout))
			}
			r.Body = b
		}
		next.ServeHTTP(w, r)
	})
}

// unwrap is the server's own ResponseWriter under the middleware's, which
// http.MaxBytesReader tells to close the connection.
func unwrap(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// deadlineBody lifts the connection's read deadline once the body is read,
// and closes the connection after a body that could not be read whole.
type deadlineBody struct {
	io.ReadCloser
	rc   http.ResponseController
	h    http.Header
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		if err == io.EOF {
			_ = b.rc.SetReadDeadline(time.Time{})
		} else { // the rest is never read: the server must not wait on it
			b.h.Set("Connection", "close")
		}
	}
	return n, err
}

// authenticate resolves the call's key to its principal, or names the
// refusal to answer with (and the cause of a 500 in c.Err).
func (e *edge) authenticate(r *http.Request, c *api.Call) (evs.Principal, string, map[string]string) {
	key := ""
	// Two different keys name no single caller.
	if keys := r.Header.Values(authorizer.HeaderName); len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { return k != keys[0] }) {
		key = keys[0]
	}
	now := e.o.Now()
	var hit cacheHit // for both the failure limiter and the key check
	if key != "" {
		hit = e.lookup(r.Context(), key, now)
	}
	client := ""
	if !hit.found || hit.e.forbidden {
		client = api.ClientPrefix(c.ClientAddr)
		// Guessing keys is slow; a key seen to work (cached) still passes,
		// so neighbours behind the same NAT keep working.
		if wait, blocked := e.fails.blocked(client, now); blocked {
			return evs.Principal{}, throttled, map[string]string{"Retry-After": api.RetryAfter(wait)}
		}
	}
	typ := unauthorized
	var p evs.Principal
	if key != "" {
		p, typ = e.authorize(r.Context(), c, hit, key, now)
	}
	if typ == unauthorized || typ == accessDenied {
		e.fails.fail(client, now)
	}
	return p, typ, nil
}

// cacheHit is what the cache holds for a call's key.
type cacheHit struct {
	ck      [32]byte // the key's hash: the cache never holds a key itself
	e       authEntry
	found   bool  // a live cached answer
	version int64 // the store's keys version now, unless noCache
	noCache bool
}

// lookup reads the cache entry of key, unless keys or accounts changed
// since it was made.
func (e *edge) lookup(ctx context.Context, key string, now time.Time) cacheHit {
	h := cacheHit{ck: sha256.Sum256([]byte(key))}
	if e.o.Config.AuthTTL <= 0 {
		return h
	}
	if e.version != nil {
		v, err := e.version(ctx)
		if err != nil { // whether the key changed cannot be told
			h.noCache = true
			return h
		}
		h.version = v
	}
	e.mu.Lock()
	ent, ok := e.cache[h.ck]
	e.mu.Unlock()
	if ok && now.Before(ent.expires) && ent.version == h.version {
		h.e, h.found = ent, true
	}
	return h
}

func (e *edge) authorize(ctx context.Context, c *api.Call, hit cacheHit, key string, now time.Time) (evs.Principal, string) {
	ent := hit.e
	if !hit.found {
		p, err := e.keys.Authorize(ctx, key)
		switch {
		case errors.Is(err, authorizer.ErrUnauthorized):
			return evs.Principal{}, unauthorized // not cached: the key may be issued later
		case err != nil && !errors.Is(err, authorizer.ErrForbidden):
			c.Err = fmt.Errorf("authorizer: %w", err)
			return evs.Principal{}, default5XX
		}
		ent = authEntry{p: p.Evs(),
			forbidden: err != nil, expires: now.Add(e.o.Config.AuthTTL), version: hit.version}
		if e.o.Config.AuthTTL > 0 && !hit.noCache {
			e.mu.Lock()
			e.cache[hit.ck] = ent
			e.mu.Unlock()
		}
	}
	if ent.forbidden {
		return evs.Principal{}, accessDenied
	}
	return ent.p, ""
}

// refuseEarly marks the connection to be closed after a reply given before
// the request's body was read, so the server does not wait for it, and
// returns what to run once the reply is written (defer refuseEarly(w, r)()):
// it reads what the client is still sending into nothing for up to
// bodyLinger. net/http closes a connection with unread bytes half a second
// after the reply, and a client still sending then meets a reset instead of
// the reply. Reading into nothing costs no memory.
func refuseEarly(w http.ResponseWriter, r *http.Request) (drain func()) {
	if r.ContentLength == 0 {
		return func() {}
	}
	w.Header().Set("Connection", "close")
	rc := http.NewResponseController(w)
	if rc.EnableFullDuplex() != nil {
		return func() {}
	}
	return func() {
		if rc.Flush() == nil {
			_ = rc.SetReadDeadline(time.Now().Add(bodyLinger))
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 2*api.MaxBatchBody))
		}
	}
}

// bodyLinger is how long refuseEarly reads a refused body.
const bodyLinger = 3 * time.Second

// throttleCall takes a token from the buckets of the call: the account's
// for a secret key; for a publishable key (public, so never spending the
// account's budget) the client address's, then the key's. Per address the
// burst is the minute's calls; per key a sixth (or up to 100 for a small key).
func (e *edge) throttleCall(c *api.Call, p evs.Principal) (time.Duration, bool) {
	if p.Kind != evs.KeyPublishable {
		return e.throttle(c.AccountID)
	}
	now, l := e.o.Now(), api.PublishableDefaults(e.o.Config).Of(p)
	// Per key: one shop's form spends no other's limit behind a shared NAT.
	if wait, limited := e.pkClients.take(p.KeyID+" "+api.ClientPrefix(c.ClientAddr), now, rate.Limit(l.PerAddress)/60, l.PerAddress); limited {
		return wait, true
	}
	return e.pkKeys.take(p.KeyID, now, rate.Limit(l.PerKey)/60, max(l.PerKey/6, min(l.PerKey, 100)))
}

func (e *edge) throttle(account string) (time.Duration, bool) {
	if e.o.Config.RateLimit <= 0 {
		return 0, false
	}
	e.mu.Lock()
	lim, ok := e.limiters[account]
	if !ok {
		burst := int(math.Ceil(2 * e.o.Config.RateLimit))
		lim = rate.NewLimiter(rate.Limit(e.o.Config.RateLimit), burst)
		e.limiters[account] = lim
	}
	e.mu.Unlock()
	now := e.o.Now()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, true
	}
	return 0, false
}
