// Command loadtest measures the HTTP path of `evs serve` against a floor, in
// one run on one machine: a bare net/http handler that decodes the same JSON
// and writes a reply of the same size is the best any handler here could do,
// so the figures it prints are ratios to that floor (and to plain
// /v1/verify), which stay comparable across machines where absolute
// requests per second do not.
//
// It starts both servers in this process (the real stack: gateway,
// authorizer, handlers, idempotency keeper, SQLite store in a temporary data
// directory, batch runner, with a test-mode key made through the server
// package's key path), drives each scenario from a process of its own (this
// program again, with -drive) with a closed loop of N keep-alive
// connections for a bounded time, and prints:
//
//   - POST /v1/verify quick vs the floor: requests/s and p99;
//   - the same call with a unique Idempotency-Key vs plain /v1/verify;
//   - GET /v1/requests/{id} vs plain /v1/verify;
//   - a result-cache hit (a live account's full-mode /v1/verify of an
//     address verified once through loopback DNS and SMTP peers) vs plain
//     /v1/verify, the quick check with no network at all (goal: at most
//     1.2× its cost);
//   - history: a live account with a million reported outcomes verifies
//     an address without outcomes (its domain has counts) and one with
//     them, vs the same call by a live account with none;
//   - a 50,000-address test-mode batch, create → completed: addresses/s,
//     bytes stored per result, and this process's RSS after it.
//
// Run it with `make bench-http`. It asserts nothing; it measures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	_ "modernc.org/sqlite" // the harness reads the data directory's sizes itself

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

func main() {
	var (
		duration = flag.Duration("duration", 2*time.Second, "how long each request scenario runs per round")
		rounds   = flag.Int("rounds", 3, "rounds of the request scenarios, interleaved so a noisy neighbour hits all alike; figures are medians")
		conns    = flag.Int("conns", 64, "concurrent keep-alive connections (closed loop)")
		batchN   = flag.Int("batch", 50_000, "addresses in the batch scenario (0 skips it)")
		only     = flag.String("only", "", "comma-separated scenarios to run (floor,verify,idem,get,hit,history,victim,batch); default all")
		outcomes = flag.Int("outcomes", 1_000_000, "outcomes of the history scenario's account")
		profile  = flag.String("cpuprofile", "", "write a CPU profile of the servers' process in each scenario to PREFIX.<scenario>.<round>.pprof")
		keepDir  = flag.Bool("keep", false, "keep the data directory (its path is printed)")
		driver   = flag.Bool("drive", false, "be the load generator: run the load read from stdin (a JSON drive), write its figures to stdout")
	)
	flag.Parse()
	log.SetFlags(0)
	if *driver {
		var d drive
		if err := json.NewDecoder(os.Stdin).Decode(&d); err != nil {
			log.Fatal("loadtest -drive: ", err)
		}
		f, err := load(d)
		if err == nil {
			err = json.NewEncoder(os.Stdout).Encode(f)
		}
		if err != nil {
			log.Fatal("loadtest -drive: ", err)
		}
		return
	}
	if err := run(context.Background(), opts{duration: *duration, rounds: max(1, *rounds), conns: *conns, batch: *batchN, outcomes: *outcomes, only: *only, profile: *profile, keep: *keepDir}); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

type opts struct {
	duration time.Duration
	rounds   int
	conns    int
	batch    int
	outcomes int
	only     string
	profile  string
	keep     bool
}

// wants tells whether scenario s runs: "history" also names its
// "history-none" and "history-addr".
func (o opts) wants(s string) bool {
	return o.only == "" || slices.ContainsFunc(strings.Split(o.only, ","), func(w string) bool { return s == w || strings.HasPrefix(s, w+"-") })
}

// stack is a running `evs serve` and the floor beside it.
type stack struct {
	dir      string
	st       *sqlitestore.Store
	evs      string // host:port
	floor    string
	key      string
	liveKey  string // a live account's, for the result-cache scenario
	smtp     *testkit.SMTPServer
	stop     func()
	replyLen int
}

// programTB lets the program start testkit's loopback peers, which take a
// testing.TB: a failure ends the program, cleanups run at stop. The methods
// the peers do not call stay nil and would panic.
type programTB struct {
	testing.TB
	cleanups []func()
}

func (*programTB) Helper()                           {}
func (*programTB) Fatal(args ...any)                 { log.Fatal(append([]any{"loadtest: "}, args...)...) }
func (*programTB) Fatalf(format string, args ...any) { log.Fatalf("loadtest: "+format, args...) }
func (*programTB) Logf(format string, args ...any)   {}
func (t *programTB) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *programTB) cleanup() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

// hitDomain is served by the loopback DNS peer; its MX, the loopback SMTP
// peer, accepts hitEmail and rejects every other address, so hitEmail is
// deliverable and kept in the account's result cache.
const (
	hitDomain = "hit.example"
	hitEmail  = "ok@" + hitDomain
	hitBody   = `{"email":"` + hitEmail + `","mode":"full"}`
	// histDomain's addresses are those of the history scenario's
	// outcomes: h<n>@histDomain.
	histDomain = "hist.example"
)

func start(ctx context.Context) (*stack, error) {
	dir, err := os.MkdirTemp("", "evs-loadtest-")
	if err != nil {
		return nil, err
	}
	// Loopback DNS and SMTP peers give the live account a real verdict to
	// cache; test mode never reaches them.
	tb := &programTB{}
	dnsPeer := testkit.StartDNS(tb)
	dnsPeer.AddRecord(hitDomain + ". 300 IN MX 10 mx." + hitDomain + ".")
	dnsPeer.AddRecord("mx." + hitDomain + ". 300 IN A 127.0.0.1")
	dnsPeer.AddRecord(histDomain + ". 300 IN MX 10 mx." + histDomain + ".")
	dnsPeer.AddRecord("mx." + histDomain + ". 300 IN A 127.0.0.1")
	smtpPeer := testkit.StartSMTP(tb, testkit.SMTPOptions{Rcpt: func(addr string) string {
		if addr == hitEmail {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: User unknown"
	}})
	env := map[string]string{
		"EVS_DATA_DIR":     dir,
		"EVS_RATE_LIMIT":   "off",
		"EVS_SMTP":         "direct",
		"EVS_SMTP_PORT":    strconv.Itoa(smtpPeer.Port),
		"EVS_SMTP_HELO":    "probe.evs.test",
		"EVS_DNS_SERVERS":  dnsPeer.Addr,
		"EVS_EGRESS_ALLOW": "127.0.0.0/8",
		"EVS_CACHE_TTL":    "24h",
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] }, false)
	if err != nil {
		return nil, err
	}
	st, err := sqlitestore.OpenServing(ctx, cfg.DataDir, time.Now)
	if err != nil {
		return nil, err
	}
	// The key path `evs serve --test-account` takes on first start.
	key, err := server.Bootstrap(ctx, st, true, time.Now())
	if err != nil {
		return nil, err
	}
	live := evs.Account{ID: uuid.NewString(), Name: "live", CreatedAt: time.Now().UTC()}
	if err := st.CreateAccount(ctx, live); err != nil {
		return nil, err
	}
	liveKey, err := authorizer.IssueKey(ctx, st, live.ID, "", time.Now())
	if err != nil {
		return nil, err
	}
	// The access and call logs are formatted as in production but not
	// written: a terminal would measure itself.
	logger := cfg.Logger(io.Discard)
	srv, err := server.New(server.Options{Config: cfg, Store: st, Logger: logger})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	s := &stack{dir: dir, st: st, evs: ln.Addr().String(), key: key, liveKey: liveKey, smtp: smtpPeer}

	// Size the floor's reply after the real one.
	r, err := s.call(http.MethodPost, "/v1/verify", verifyBody, nil)
	if err == nil && r.status != http.StatusOK {
		err = fmt.Errorf("POST /v1/verify: %d %s", r.status, r.body)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	s.replyLen = len(r.body)
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, err
	}
	fsrv := &http.Server{Handler: testkit.FloorHandler(s.replyLen), ReadHeaderTimeout: 10 * time.Second}
	go fsrv.Serve(fln)
	s.floor = fln.Addr().String()
	s.stop = func() {
		fsrv.Close()
		cancel()
		<-done
		st.Close()
		tb.cleanup()
	}
	return s, nil
}

const verifyBody = `{"email":"alice@example.com","mode":"quick"}`

// account makes an account (test mode or live) and returns a key of it.
func (s *stack) account(ctx context.Context, name string, test bool) (string, error) {
	a := evs.Account{ID: uuid.NewString(), Name: name, Test: test, CreatedAt: time.Now().UTC()}
	if err := s.st.CreateAccount(ctx, a); err != nil {
		return "", err
	}
	return authorizer.IssueKey(ctx, s.st, a.ID, "", time.Now())
}

type result struct {
	status int
	body   []byte
}

// call makes one request to the evs server with the test-mode key.
func (s *stack) call(method, path, body string, hdr map[string]string) (result, error) {
	return s.callAs(s.key, method, path, body, hdr)
}

// callAs makes one request to the evs server with key.
func (s *stack) callAs(key, method, path, body string, hdr map[string]string) (result, error) {
	req, err := http.NewRequest(method, "http://"+s.evs+path, strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("X-Api-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, body: b}, err
}

// figures are one scenario's measurements.
type figures struct {
	name     string
	Requests int
	Errors   int
	Elapsed  time.Duration
	// The latency percentiles reported, not every latency: what the
	// harness keeps must not count in the server's RSS after the batch.
	P50, P99, Max time.Duration
	// CPU is the CPU time (user and system) of the server's process and
	// the load generator's over the scenario: per request, it is what a
	// call costs end to end, and unlike requests/s a neighbour's burst
	// barely moves it.
	CPU time.Duration
	// ServerCPU is the server process's share of CPU.
	ServerCPU time.Duration
	// SysR and SysW are the server process's read and write system calls
	// over the scenario (/proc/self/io; 0 where there is none): unlike
	// time, a count no neighbour moves.
	SysR, SysW int64
}

// cpuPerRequest is the scenario's CPU time per request, in microseconds.
func (f figures) cpuPerRequest() float64 {
	return float64(f.CPU) / float64(time.Microsecond) / float64(max(f.Requests, 1))
}

func (f figures) rps() float64 { return float64(f.Requests) / f.Elapsed.Seconds() }

// percentile is the p-th of sorted latencies (p from 0 to 1).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// drive is a load: Conns closed-loop connections to Addr for Duration,
// each sending Req (a raw HTTP/1.1 request) again and again, with "{n}" in
// it replaced by a number no other call of the load has; a reply whose
// status is not Want counts as an error.
type drive struct {
	Addr     string
	Conns    int
	Duration time.Duration
	Want     int
	Req      []byte
}

// driveElsewhere runs d in a load generator process of its own (this
// program with -drive), as a client would, and adds this process's CPU
// time over it (the server's) to the generator's.
func driveElsewhere(d drive) (figures, error) {
	exe, err := os.Executable()
	if err != nil {
		return figures{}, err
	}
	in, err := json.Marshal(d)
	if err != nil {
		return figures{}, err
	}
	cmd := exec.Command(exe, "-drive")
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), os.Stderr
	cpu0, r0, w0 := processCPU(), syscalls("syscr"), syscalls("syscw")
	out, err := cmd.Output()
	if err != nil {
		return figures{}, fmt.Errorf("load generator: %w", err)
	}
	var f figures
	err = json.Unmarshal(out, &f)
	f.ServerCPU = processCPU() - cpu0
	f.CPU += f.ServerCPU
	f.SysR, f.SysW = syscalls("syscr")-r0, syscalls("syscw")-w0
	return f, err
}

// load runs d from this process.
func load(d drive) (figures, error) {
	addr, conns, want := d.Addr, d.Conns, d.Want
	numbered := bytes.Contains(d.Req, []byte("{n}"))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		errs     atomic.Int64
		firstErr error
	)
	deadline := time.Now().Add(d.Duration)
	cpu0 := processCPU()
	begin := time.Now()
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			defer func() {
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			defer conn.Close()
			br := bufio.NewReaderSize(conn, 16<<10)
			for i := 0; time.Now().Before(deadline); i++ {
				req := d.Req
				if numbered {
					req = bytes.ReplaceAll(req, []byte("{n}"), []byte(strconv.Itoa(c)+"-"+strconv.Itoa(i)))
				}
				t := time.Now()
				if _, err := conn.Write(req); err != nil {
					errs.Add(1)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t))
				if resp.StatusCode != want {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	f := figures{Requests: len(all), Errors: int(errs.Load()), Elapsed: time.Since(begin), CPU: processCPU() - cpu0}
	slices.Sort(all)
	f.P50, f.P99, f.Max = percentile(all, 0.50), percentile(all, 0.99), percentile(all, 1)
	return f, firstErr
}

func rawRequest(method, host, path, key string, hdr map[string]string, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host)
	if key != "" {
		fmt.Fprintf(&b, "X-Api-Key: %s\r\n", key)
	}
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.Bytes()
}

func run(ctx context.Context, o opts) error {
	s, err := start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		s.stop()
		if o.keep {
			fmt.Println("data directory kept:", s.dir)
		} else {
			os.RemoveAll(s.dir)
		}
	}()
	fmt.Printf("loadtest: %d connections, %s per scenario, GOMAXPROCS %d, reply %d bytes\n\n",
		o.conns, o.duration, runtime.GOMAXPROCS(0), s.replyLen)

	res := map[string][]figures{}
	scenario := func(name string, addr string, want int, req []byte) error {
		if !o.wants(name) {
			return nil
		}
		stopProf, err := startProfile(o.profile, fmt.Sprint(name, ".", len(res[name])+1))
		if err != nil {
			return err
		}
		f, err := driveElsewhere(drive{Addr: addr, Conns: o.conns, Duration: o.duration, Want: want, Req: req})
		stopProf()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		f.name = name
		res[name] = append(res[name], f)
		n := float64(max(f.Requests, 1))
		fmt.Printf("%-12s %9.0f req/s  p50 %7s  p99 %7s  max %7s  CPU %5.1f µs/req (server %5.1f)  syscalls %.2f read %.2f write /req  errors %d\n",
			name, f.rps(), f.P50.Round(time.Microsecond), f.P99.Round(time.Microsecond), f.Max.Round(time.Microsecond),
			f.cpuPerRequest(), float64(f.ServerCPU/time.Nanosecond)/1e3/n, float64(f.SysR)/n, float64(f.SysW)/n, f.Errors)
		return nil
	}

	floorReq := rawRequest(http.MethodPost, s.floor, "/v1/verify", "", nil, verifyBody)
	verifyReq := rawRequest(http.MethodPost, s.evs, "/v1/verify", s.key, nil, verifyBody)
	var getReq []byte
	if o.wants("get") {
		r, err := s.call(http.MethodPost, "/v1/requests", `{"emails":["alice@example.com","bob@example.com"],"mode":"quick"}`, nil)
		if err != nil {
			return err
		}
		id, err := batchID(r)
		if err != nil {
			return err
		}
		getReq = rawRequest(http.MethodGet, s.evs, "/v1/requests/"+id, s.key, nil, "")
	}
	var hitReq []byte
	var conns0 int
	if o.wants("hit") {
		// One real verification through the peers puts the verdict in the
		// live account's cache; every call after it is a hit.
		r, err := s.callAs(s.liveKey, http.MethodPost, "/v1/verify", hitBody, nil)
		if err != nil {
			return err
		}
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"status":"deliverable"`)) {
			return fmt.Errorf("warming the cache: %d %s", r.status, r.body)
		}
		hitReq = rawRequest(http.MethodPost, s.evs, "/v1/verify", s.liveKey, nil, hitBody)
		conns0 = s.smtp.Connections()
	}
	var noneReq, histReq, histAddrReq []byte
	if o.wants("history") {
		if noneReq, histReq, histAddrReq, err = s.prepareHistory(ctx, o.outcomes); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	var attacker *hostile
	if o.wants("victim") {
		if attacker, err = prepareHostile(ctx, s); err != nil {
			return fmt.Errorf("hostile: %w", err)
		}
	}
	for round := range o.rounds {
		fmt.Printf("round %d\n", round+1)
		if err := scenario("floor", s.floor, http.StatusOK, floorReq); err != nil {
			return err
		}
		if err := scenario("verify", s.evs, http.StatusOK, verifyReq); err != nil {
			return err
		}
		if attacker != nil {
			// The victim's verify load while another account attacks.
			attacker.start()
			time.Sleep(time.Second) // the attack's connections are open
			err := scenario("victim", s.evs, http.StatusOK, verifyReq)
			attacker.stop()
			if err != nil {
				return err
			}
		}
		if err := scenario("idem", s.evs, http.StatusOK, rawRequest(http.MethodPost, s.evs, "/v1/verify", s.key,
			map[string]string{"Idempotency-Key": "lt-" + strconv.Itoa(round) + "-{n}"}, verifyBody)); err != nil {
			return err
		}
		if getReq != nil {
			if err := scenario("get", s.evs, http.StatusOK, getReq); err != nil {
				return err
			}
		}
		if hitReq != nil {
			if err := scenario("hit", s.evs, http.StatusOK, hitReq); err != nil {
				return err
			}
		}
		for _, h := range []struct {
			name string
			req  []byte
		}{{"history-none", noneReq}, {"history", histReq}, {"history-addr", histAddrReq}} {
			if h.req == nil {
				continue
			}
			if err := scenario(h.name, s.evs, http.StatusOK, h.req); err != nil {
				return err
			}
		}
	}
	if hitReq != nil {
		// A hit that quietly probed again would measure the wrong thing.
		if n := s.smtp.Connections() - conns0; n != 0 {
			return fmt.Errorf("hit: %d SMTP connections during the cache-hit scenario, want 0", n)
		}
	}
	var victimAlone, victimAttacked []time.Duration
	if attacker != nil {
		// The victim's batch, alone and under the attack, alternately.
		for range o.rounds {
			alone, err := s.victimBatch(ctx)
			if err != nil {
				return err
			}
			attacker.start()
			attacked, err := s.victimBatch(ctx)
			attacker.stop()
			if err != nil {
				return err
			}
			victimAlone, victimAttacked = append(victimAlone, alone), append(victimAttacked, attacked)
			fmt.Printf("victim batch of %d: %s alone, %s under attack\n", victimBatchN, alone.Round(time.Millisecond), attacked.Round(time.Millisecond))
		}
	}
	var bf batchFigures
	if o.batch > 0 && o.wants("batch") {
		stopProf, err := startProfile(o.profile, "batch")
		if err != nil {
			return err
		}
		bf, err = runBatch(s, o.batch)
		stopProf()
		if err != nil {
			return fmt.Errorf("batch: %w", err)
		}
		fmt.Printf("batch   %d addresses in %s: %.0f addresses/s; stored %.0f B/result (decision %.0f B); RSS peak %.1f MB, after %.1f MB\n",
			o.batch, bf.elapsed.Round(time.Millisecond), bf.rate(), bf.perResult, bf.decision, bf.peakMB, bf.afterMB)
	}

	fmt.Println()
	// Ratios are taken within each round, between scenarios that ran side
	// by side, then the median over rounds: a neighbour's burst that slows
	// one round slows both sides of its ratio.
	fmt.Printf("medians over %d rounds of the ratios within each round:\n", o.rounds)
	ratio := func(label, a, b string) {
		fa, fb := res[a], res[b]
		if len(fa) == 0 || len(fa) != len(fb) {
			return
		}
		var rr, pr, cr, sr []float64
		for i := range fa {
			rr = append(rr, fa[i].rps()/fb[i].rps())
			pr = append(pr, p99(fa[i])/p99(fb[i]))
			cr = append(cr, fa[i].cpuPerRequest()/fb[i].cpuPerRequest())
			sr = append(sr, float64(fa[i].ServerCPU)/float64(max(fa[i].Requests, 1))/(float64(fb[i].ServerCPU)/float64(max(fb[i].Requests, 1))))
		}
		fmt.Printf("%-40s %5.2f× rps   p99 %5.2f×   CPU/req %5.2f× (server %5.2f×)   (%s rps, %s)\n", label, medianOf(rr), medianOf(pr), medianOf(cr), medianOf(sr),
			strings.Join(each(fa, figures.rps, "%.0f"), "/"), strings.Join(each(fb, figures.rps, "%.0f"), "/"))
	}
	ratio("verify quick / floor", "verify", "floor")
	ratio("verify + unique Idempotency-Key / verify", "idem", "verify")
	ratio("GET /v1/requests/{id} / verify", "get", "verify")
	ratio("verify cache hit (full) / verify quick", "hit", "verify")
	ratio("victim verify under attack / verify", "victim", "verify")
	ratio("outcomes, address without / none", "history", "history-none")
	ratio("outcomes, address with / none", "history-addr", "history-none")
	if len(victimAlone) > 0 {
		var rr []float64
		for i := range victimAlone {
			rr = append(rr, victimAttacked[i].Seconds()/victimAlone[i].Seconds())
		}
		fmt.Printf("%-40s %5.2f× the time alone\n", "victim batch under attack / alone", medianOf(rr))
	}
	if attacker != nil {
		peak, _ := rss()
		fmt.Printf("%-40s served %d, refused %d; victim p99 %s ms; process RSS peak %.1f MB (server and attacker)\n", "attacker's calls",
			attacker.served.Load(), attacker.refused.Load(), strings.Join(each(res["victim"], p99, "%.1f"), "/"), peak)
	}
	if bf.elapsed > 0 {
		fmt.Printf("%-40s %7.0f addresses/s, %.0f B/result, RSS after %.1f MB\n", "50k test-mode batch", bf.rate(), bf.perResult, bf.afterMB)
	}
	return nil
}

// prepareHistory gives a live account n outcomes, stored through the store
// as POST /v1/outcomes would store them (h<i>@histDomain, one in ten a
// hard bounce, the rest deliveries), makes a live account with none, and
// returns the three calls of the history scenario, each made once so that
// every later one is a result-cache hit: the account with none and the
// account with n verify an address without outcomes on their domain, and
// the account with n one of its addresses.
func (s *stack) prepareHistory(ctx context.Context, n int) (none, without, with []byte, err error) {
	noneKey, err := s.account(ctx, "no-history", false)
	if err != nil {
		return nil, nil, nil, err
	}
	a := evs.Account{ID: uuid.NewString(), Name: "history", CreatedAt: time.Now().UTC()}
	if err := s.st.CreateAccount(ctx, a); err != nil {
		return nil, nil, nil, err
	}
	histKey, err := authorizer.IssueKey(ctx, s.st, a.ID, "", time.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	begin, at, os := time.Now(), time.Now().Add(-time.Hour).Truncate(time.Millisecond), make([]evs.Outcome, 0, 10_000)
	for i := range n {
		o := evs.Outcome{Address: fmt.Sprintf("h%d@%s", i, histDomain), Kind: evs.OutcomeDelivered, At: at, Verdict: evs.Deliverable, Score: 90}
		if i%10 == 0 {
			o.Kind, o.BounceType = evs.OutcomeBounced, evs.BounceHard
		}
		if os = append(os, o); len(os) == cap(os) || i == n-1 {
			if _, err := s.st.PutOutcomes(ctx, a.ID, os, time.Now().Add(24*time.Hour)); err != nil {
				return nil, nil, nil, err
			}
			os = os[:0]
		}
	}
	fmt.Printf("history: %d outcomes stored in %s\n", n, time.Since(begin).Round(time.Millisecond))
	body := func(addr string) string { return `{"email":"` + addr + `","mode":"quick"}` }
	without, with = []byte(body("new@"+histDomain)), []byte(body("h1@"+histDomain))
	for _, c := range []struct {
		key  string
		body []byte
		out  *[]byte
	}{{noneKey, without, &none}, {histKey, without, &without}, {histKey, with, &with}} {
		r, err := s.callAs(c.key, http.MethodPost, "/v1/verify", string(c.body), nil)
		if err == nil && r.status != http.StatusOK {
			err = fmt.Errorf("%d %s", r.status, r.body)
		}
		if err != nil {
			return nil, nil, nil, err
		}
		*c.out = rawRequest(http.MethodPost, s.evs, "/v1/verify", c.key, nil, string(c.body))
	}
	return none, without, with, nil
}

func p99(f figures) float64 { return float64(f.P99) / float64(time.Millisecond) }

// each formats v of every round's figures.
func each(fs []figures, v func(figures) float64, format string) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprintf(format, v(f))
	}
	return out
}

// medianOf is the median of xs.
func medianOf(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func startProfile(prefix, name string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "." + name + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func batchID(r result) (string, error) {
	var env struct {
		Request struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"request"`
	}
	if r.status >= 300 {
		return "", fmt.Errorf("status %d: %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Request.ID == "" {
		return "", fmt.Errorf("no request id in %s", r.body)
	}
	return env.Request.ID, nil
}

type batchFigures struct {
	n                   int
	elapsed             time.Duration
	perResult, decision float64
	peakMB, afterMB     float64
}

func (b batchFigures) rate() float64 { return float64(b.n) / b.elapsed.Seconds() }

// runBatch creates an n-address test-mode batch, polls it until it is
// completed, and measures what it left on disk and in memory.
func runBatch(s *stack, n int) (batchFigures, error) {
	before, err := dataSize(s.dir)
	if err != nil {
		return batchFigures{}, err
	}
	emails := make([]string, n)
	for i := range emails {
		// Distinct local parts over a few hundred domains, as a real list.
		emails[i] = fmt.Sprintf("user.%d@d%d.example", i, i%300)
	}
	id, took, err := s.quickBatch(context.Background(), emails, 5*time.Millisecond)
	if err != nil {
		return batchFigures{}, err
	}
	f := batchFigures{n: n, elapsed: took}
	// What a server at rest holds a moment after the batch, as an operator
	// would see it in top. The harness itself keeps nothing of the batch.
	time.Sleep(time.Second)
	f.peakMB, f.afterMB = rss()
	after, err := dataSize(s.dir)
	if err != nil {
		return f, err
	}
	f.perResult = float64(after-before) / float64(n)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.dir, sqlitestore.FileName)+"?mode=ro")
	if err != nil {
		return f, err
	}
	defer db.Close()
	// The schema's own business; -1 when this one does not match it.
	if err := db.QueryRow(`SELECT avg(length(r.decision)) FROM results r JOIN batches b ON b.key = r.batch WHERE b.id = ?`, id).Scan(&f.decision); err != nil {
		f.decision = -1
	}
	return f, nil
}

// quickBatch creates a quick-mode batch of emails, polls it every poll
// until it is completed, and returns its id and the time from creation.
func (s *stack) quickBatch(ctx context.Context, emails []string, poll time.Duration) (string, time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"emails": emails, "mode": "quick"})
	begin := time.Now()
	r, err := s.call(http.MethodPost, "/v1/requests", string(body), nil)
	if err != nil {
		return "", 0, err
	}
	id, err := batchID(r)
	if err != nil {
		return "", 0, err
	}
	for ctx.Err() == nil {
		r, err := s.call(http.MethodGet, "/v1/requests/"+id, "", nil)
		if err != nil {
			return "", 0, err
		}
		var env struct {
			Request struct {
				State string `json:"state"`
			} `json:"request"`
		}
		if err := json.Unmarshal(r.body, &env); err != nil {
			return "", 0, err
		}
		switch env.Request.State {
		case "completed":
			return id, time.Since(begin), nil
		case "queued", "running":
		default:
			return "", 0, fmt.Errorf("batch ended %s: %s", env.Request.State, r.body)
		}
		time.Sleep(poll)
	}
	return "", 0, ctx.Err()
}

// dataSize is the data directory's size once the WAL is checkpointed into
// the database file, so it counts what is kept, not what is in flight.
func dataSize(dir string) (int64, error) {
	db, err := sql.Open("sqlite", filepath.Join(dir, sqlitestore.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	var total int64
	err = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Size()
		}
		return err
	})
	return total, err
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syscalls is this process's count of read or write system calls so far
// (field "syscr" or "syscw" of /proc/self/io), 0 where there is none.
func syscalls(field string) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// rss reads this process's peak and current resident set from
// /proc/self/status, in MB.
func rss() (peak, cur float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			peak = kb / 1024
		case "VmRSS:":
			cur = kb / 1024
		}
	}
	return peak, cur
}
