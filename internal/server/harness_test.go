package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// harness is a real `evs serve` on loopback: SQLite store in a temp dir, the
// live engine against a loopback DNS server and a loopback SMTP server.
type harness struct {
	t        *testing.T
	base     string
	dir      string
	clock    *testkit.Clock
	st       *sqlitestore.Store
	contract *contract
	dns      *testkit.DNSServer
	smtp     *testkit.SMTPServer

	// logs holds everything the server logged, as JSON lines.
	logs *testkit.LogBuffer

	liveKey, testKey, otherKey string
	liveAcct, testAcct         string

	cancel context.CancelFunc
	done   chan error
}

type options struct {
	rateLimit float64
	authTTL   time.Duration
	realClock bool
	dir       string
	worker    batch.Worker
	batch     batch.LocalConfig
	rcpt      func(addr string) string
	// replyTimeout is the prober's wait for each SMTP reply (default 2s);
	// a test that holds replies on purpose sets it past its own length.
	replyTimeout time.Duration
	// server adjusts the server's options before it is built.
	server func(*server.Options)
	// maxActive and deadline set EVS_MAX_ACTIVE_BATCHES and
	// EVS_BATCH_DEADLINE (default: no limit, none).
	maxActive int
	deadline  time.Duration
	// wrapStore, when set, wraps the store the server uses (fault
	// injection); the harness keeps reading the store itself.
	wrapStore func(server.Store) server.Store
	// facts, when set, is the engine's domain facts (default: none, so
	// that each test sees every accept-all probe it causes).
	facts verify.DomainFacts
	// smtpProxy, when set, is the SOCKS5 exit the prober dials through
	// (EVS_SMTP_PROXY's form).
	smtpProxy string
	// exits, when set, are the SOCKS exits the prober dials through, and
	// the server shows and steers (Options.Exits).
	exits *smtpprobe.Exits
	// rcptFrom, when set, replaces rcpt with a reply that depends on the
	// client's address too.
	rcptFrom func(client, addr string) string
}

func start(t *testing.T, o options) *harness {
	t.Helper()
	h := &harness{t: t, clock: testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)), contract: loadContract(t), logs: &testkit.LogBuffer{}}
	now := h.clock.Now
	if o.realClock {
		now = time.Now
	}
	h.dir = o.dir
	if h.dir == "" {
		h.dir = t.TempDir()
	}
	ctx := context.Background()
	st, err := sqlitestore.OpenServing(ctx, h.dir, now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	h.st = st
	t.Cleanup(func() { st.Close() })

	// Loopback DNS: good.example has a mail host on the loopback SMTP server.
	rcpt := o.rcpt
	if rcpt == nil {
		rcpt = func(addr string) string {
			if strings.HasPrefix(addr, "alice@") || strings.HasPrefix(addr, "bob@") {
				return "250 2.1.5 OK"
			}
			return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
		}
	}
	h.smtp = testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: rcpt, RcptFrom: o.rcptFrom})
	h.dns = testkit.StartDNS(t)
	for _, rr := range []string{
		"good.example. 300 IN MX 10 mx1.good.example.",
		"mx1.good.example. 300 IN A 127.0.0.1",
		"other.example. 300 IN MX 10 mx1.good.example.",
	} {
		h.dns.AddRecord(rr)
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{h.dns.Addr}, Timeout: time.Second, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8") // the SMTP peer
	if err != nil {
		t.Fatal(err)
	}
	replyTimeout := o.replyTimeout
	if replyTimeout == 0 {
		replyTimeout = 2 * time.Second
	}
	pc := smtpprobe.Config{HELO: "probe.evs.test", Port: h.smtp.Port, Resolver: res, Egress: loopback, ReplyTimeout: replyTimeout, DialTimeout: time.Second}
	if o.smtpProxy != "" {
		exit := config.SMTPExit{URL: o.smtpProxy, Name: "exit"}
		if pc.Dialer, err = smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: []config.SMTPExit{exit}, Policy: loopback}); err != nil {
			t.Fatal(err)
		}
	}
	if o.exits != nil {
		pc.Dialer = o.exits
	}
	prober, err := smtpprobe.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(prober), Now: now, Facts: o.facts})
	if err != nil {
		t.Fatal(err)
	}

	authTTL := o.authTTL
	if authTTL == 0 {
		authTTL = 300 * time.Second
	}
	cfg := config.Config{RateLimit: o.rateLimit, AuthTTL: authTTL, Retention: 30 * 24 * time.Hour, SMTP: config.SMTPDirect,
		MaxActiveBatches: o.maxActive, BatchDeadline: o.deadline,
		// Every test address is on one loopback "provider": limits as
		// loose as the per-host limit of old, so that only the tests of
		// politeness (which set the runner's Gate) wait on them.
		ProviderSessions: map[string]int{"*": 4}, ProviderRcptPerMin: map[string]int{"*": 1 << 20},
		Egress: loopback} // loopback webhook receivers too
	var srvStore server.Store = st
	if o.wrapStore != nil {
		srvStore = o.wrapStore(st)
	}
	so := server.Options{
		Config: cfg, Store: srvStore, Engine: engine, Now: now, Worker: o.worker, Batch: o.batch, Exits: o.exits,
		Logger: slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.server != nil {
		o.server(&so)
	}
	srv, err := server.New(so)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.base = "http://" + ln.Addr().String()
	sctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	h.done = make(chan error, 1)
	// The accounts first, as an operator's are: a store with a live
	// account has its egress checked from the start.
	h.liveAcct, h.liveKey = h.account("live", false)
	h.testAcct, h.testKey = h.account("sandbox", true)
	_, h.otherKey = h.account("other", true)
	go func() { h.done <- srv.Serve(sctx, ln) }()
	t.Cleanup(h.stop)
	return h
}

// stop shuts the server down gracefully (as SIGTERM does) and waits.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Error("server did not stop within 30 s")
	}
}

// account creates an account (or finds it) and a key for it.
func (h *harness) account(name string, test bool) (string, string) {
	h.t.Helper()
	ctx := context.Background()
	a, err := h.st.AccountByName(ctx, name)
	if err != nil {
		a = evs.Account{ID: "acct-" + name, Name: name, Test: test, CreatedAt: h.clock.Now()}
		if err := h.st.CreateAccount(ctx, a); err != nil {
			h.t.Fatalf("create account: %v", err)
		}
	}
	key, err := authorizer.IssueKey(ctx, h.st, a.ID, "", h.clock.Now())
	if err != nil {
		h.t.Fatalf("create key: %v", err)
	}
	return a.ID, key
}

// reply is one HTTP answer, already checked against the OpenAPI contract.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("reply is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// errorCode returns error.code, checking the envelope's shape and that
// error.requestId equals the X-Request-Id header.
func (r reply) errorCode(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	if !ok || len(m) != 1 {
		t.Fatalf("not an error envelope: %s", r.body)
	}
	if rid := r.header.Get("X-Request-Id"); rid == "" || e["requestId"] != rid {
		t.Fatalf("error.requestId %v != X-Request-Id %q", e["requestId"], rid)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("error without a message: %s", r.body)
	}
	code, _ := e["code"].(string)
	return code
}

type req struct {
	method  string
	path    string
	key     string
	headers map[string]string
	body    string
}

// do sends a request and validates the reply against api/openapi.yaml.
func (h *harness) do(r req) reply {
	h.t.Helper()
	return h.doFrom(http.DefaultClient, r)
}

// doFrom is do through client (for instance one whose connections come
// from another loopback address).
func (h *harness) doFrom(client *http.Client, r req) reply {
	h.t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr, err := http.NewRequest(r.method, h.base+r.path, strings.NewReader(r.body))
	if err != nil {
		h.t.Fatal(err)
	}
	if r.key != "" {
		hr.Header.Set("X-Api-Key", r.key)
	}
	if r.body != "" && r.headers["Content-Type"] == "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.headers {
		if v == "-" {
			hr.Header.Del(k)
			continue
		}
		hr.Header.Set(k, v)
	}
	resp, err := client.Do(hr)
	if err != nil {
		h.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
	h.contract.check(h.t, hr, r.body, out)
	return out
}

// contract validates replies against the OpenAPI document.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	contractOnce sync.Once
	contractDoc  *contract
	contractErr  error
)

func loadContract(t *testing.T) *contract {
	t.Helper()
	contractOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile("../../api/openapi.yaml")
		if err != nil {
			contractErr = err
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			contractErr = err
			return
		}
		// Route by path alone: the test server's address is not one of the
		// document's servers.
		doc.Servers = nil
		r, err := legacy.NewRouter(doc)
		if err != nil {
			contractErr = err
			return
		}
		contractDoc = &contract{doc: doc, router: r}
	})
	if contractErr != nil {
		t.Fatalf("api/openapi.yaml: %v", contractErr)
	}
	return contractDoc
}

func (c *contract) check(t *testing.T, hr *http.Request, body string, r reply) {
	t.Helper()
	if r.header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: reply without X-Request-Id", hr.Method, hr.URL.Path)
	}
	vr := hr.Clone(context.Background())
	vr.Body = io.NopCloser(strings.NewReader(body))
	route, params, err := c.router.FindRoute(vr)
	if err != nil {
		// Unknown paths and methods are answered by the gateway; they are
		// still envelopes, which the callers check.
		if r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: no route in the contract: %v", hr.Method, hr.URL.Path, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true},
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 r.status,
		Header:                 r.header,
		Body:                   io.NopCloser(bytes.NewReader(r.body)),
		Options:                in.Options,
	})
	if err != nil {
		t.Errorf("%s %s → %d does not match api/openapi.yaml: %v\nbody: %.500s", hr.Method, hr.URL.Path, r.status, err, r.body)
	}
}
