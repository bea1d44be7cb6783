package smtpprobe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// Several SOCKS exits (docs/aws.md, "SOCKS exits"). Each provider prefers
// one exit, so that its sessions, and the retries a greylisting server
// waits for, come from one address while its budget there lasts: the
// order is by rendezvous hashing of the provider over the exits in
// rotation, which moves only the providers of an exit that leaves, and
// brings them back when it returns. A batch's session that the
// politeness gate admitted on another exit's budget goes through that
// one (WithExit). An exit leaves the rotation when it fails: at once when a
// connection through it times out and a health probe made then fails too
// (a hung exit; a silent server behind a working exit passes it), after
// DownAfter of its other faults (ErrExit) within FaultWindow, or when a
// health probe fails (a CONNECT through it, with its credentials, to the
// canary). A reply that the exit could not reach the server is our
// failure (no verdict) but no fault: dead mail servers are common. An exit
// returns when a probe passes: Run probes every exit periodically (evs
// serve), and a dial probes an exit that is out once Retry has passed
// since its last probe (Lambda, where nothing runs between invocations).
// An exit can also be avoided for one provider (Avoid: evs serve's egress
// watch, when that provider refuses most of our probes through it, or for
// all of them while the exit's address is on a DNS blocklist) while
// another exit in rotation is not. With no exit in rotation the dial fails
// with ErrExit: our failure, no verdict (contract, section 16).

// ExitsConfig configures an Exits.
type ExitsConfig struct {
	// Exits are the SOCKS5 exits (config.Config.SMTPExits); at least one.
	Exits []config.SMTPExit
	// Policy is the egress policy checked before each CONNECT.
	Policy *config.EgressPolicy
	// Key maps an MX host to the provider it orders exits by (verify.ProviderKey;
	// nil: the host itself).
	Key func(host string) string
	// Avoid, when set, tells whether exit (an index of Exits) should not
	// take a new session to host while another exit in rotation can.
	Avoid func(exit int, host string) bool
	// Observe, when set, is told each health verdict that takes an exit
	// out of rotation or keeps it out (up false), and each return (up true).
	Observe func(exit int, name string, up bool)
	// DownAfter faults within FaultWindow take an exit out (default 2, in
	// 1 min): one failed handshake is often a blip.
	DownAfter   int
	FaultWindow time.Duration
	// Retry is how long after its last probe an exit out of rotation is
	// probed again by a dial (default 5 s).
	Retry time.Duration
	// Timeout bounds each SOCKS5 handshake, up to the reply to CONNECT,
	// and each health probe (default 5 s).
	Timeout time.Duration
	// Canary is where a health probe asks an exit to CONNECT, which must
	// succeed. Without one, the probe asks for the exit's own loopback
	// port 25, and any reply passes: the exit answers CONNECTs, though
	// whether it reaches the internet is not known.
	Canary netip.AddrPort
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Exits is a dialer over several SOCKS5 exits; safe for concurrent use.
type Exits struct {
	cfg   ExitsConfig
	exits []*exit

	mu    sync.Mutex
	avoid func(exit int, host string) bool
}

// exit is one exit and its health (guarded by Exits.mu).
type exit struct {
	name   string
	dialer *socksDialer

	up         bool
	since      time.Time // of the last change of up
	faults     int
	firstFault time.Time
	lastProbe  time.Time
	probing    bool
	detail     string
}

// ExitStatus is what Status says of one exit.
type ExitStatus struct {
	Index int
	// Name is the exit's name (config.SMTPExit.Name): never credentials.
	Name string
	// Up is whether the exit is in rotation.
	Up bool
	// Since is when Up last changed (the zero time: never since start).
	Since time.Time
	// Detail is the last failure, while out of rotation.
	Detail string
}

// NewExits returns a dialer over cfg.Exits, every exit in rotation.
func NewExits(cfg ExitsConfig) (*Exits, error) {
	if len(cfg.Exits) == 0 {
		return nil, errors.New("smtpprobe: no SOCKS5 exit")
	}
	if cfg.Key == nil {
		cfg.Key = func(h string) string { return h }
	}
	cfg.DownAfter = cmp.Or(max(cfg.DownAfter, 0), 2)
	cfg.FaultWindow = cmp.Or(max(cfg.FaultWindow, 0), time.Minute)
	cfg.Retry = cmp.Or(max(cfg.Retry, 0), 5*time.Second)
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), 5*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	x := &Exits{cfg: cfg, avoid: cfg.Avoid}
	for i, e := range cfg.Exits {
		d, err := newSOCKS5(e.URL, cfg.Policy, cfg.Timeout)
		if err != nil {
			return nil, fmt.Errorf("exit %d (%s): %w", i+1, e.Name, err)
		}
		x.exits = append(x.exits, &exit{name: e.Name, dialer: d, up: true})
	}
	return x, nil
}

type mxHostKey struct{}

// WithMXHost returns ctx carrying the MX host a dial is for: Exits picks
// the exit by its provider. The prober sets it on every dial.
func WithMXHost(ctx context.Context, host string) context.Context {
	return context.WithValue(ctx, mxHostKey{}, host)
}

type exitKey struct{}

// WithExit returns ctx asking that a dial go through the exit named name
// while it is in rotation (else as chosen for its host): the exit whose
// politeness budget the session spends.
func WithExit(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, exitKey{}, name)
}

// MXHost returns the MX host WithMXHost put in ctx, or "".
func MXHost(ctx context.Context) string {
	h, _ := ctx.Value(mxHostKey{}).(string)
	return h
}

// DialContext implements ContextDialer through the exit of the MX host in
// ctx (WithMXHost). When that exit fails and so leaves the rotation, the
// host's next exit is tried at once: the receiving server saw nothing.
func (x *Exits) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host := MXHost(ctx)
	for attempt := 0; ; attempt++ {
		i, err := x.pick(ctx, host)
		if err != nil {
			return nil, err
		}
		c, err := x.exits[i].dialer.DialContext(ctx, network, addr)
		if err == nil {
			x.passed(i)
			return c, nil
		}
		if !errors.Is(err, ErrExit) || aboutServer(err) {
			return nil, err
		}
		up := false
		if isTimeout(err) {
			up = x.recheck(ctx, i)
		} else {
			up = x.fault(i, err)
		}
		if up || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// recheck probes exit i at once, after a connection through it timed out,
// and reports whether it is still in rotation: a hung exit fails the probe
// and leaves now; one that only waited on a silent server passes it.
func (x *Exits) recheck(ctx context.Context, i int) bool {
	x.mu.Lock()
	mine := x.claim(i)
	x.mu.Unlock()
	if mine {
		x.probeOne(context.WithoutCancel(ctx), i)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.exits[i].up
}

// claim marks exit i as being probed, unless it already is. x.mu is held.
func (x *Exits) claim(i int) bool {
	e := x.exits[i]
	if e.probing {
		return false
	}
	e.probing, e.lastProbe = true, x.cfg.Now()
	return true
}

// score is exit name's rendezvous weight for key: stable across
// processes and restarts, so every instance of a deployment agrees.
func score(name, key string) uint64 {
	h := fnv.New64a()
	io.WriteString(h, name)
	h.Write([]byte{0})
	io.WriteString(h, key)
	// FNV's low bits mix poorly across similar inputs: finish with
	// splitmix64's mixer.
	z := h.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// order returns the exits host's sessions may take, in rotation and not
// avoided for it, preferred first; when every exit in rotation is avoided
// for host, the preferred of those alone: its refusals are then the truth
// about us wherever we go, and say so. x.mu is held.
func (x *Exits) order(host string) []int {
	key := x.cfg.Key(host)
	var ok, avoided []int
	for i, e := range x.exits {
		switch {
		case !e.up:
		case x.avoid != nil && x.avoid(i, host):
			avoided = append(avoided, i)
		default:
			ok = append(ok, i)
		}
	}
	all := len(ok) == 0
	if all {
		ok = avoided
	}
	sort.Slice(ok, func(a, b int) bool { return score(x.exits[ok[a]].name, key) > score(x.exits[ok[b]].name, key) })
	if all && len(ok) > 1 {
		ok = ok[:1]
	}
	return ok
}

// Order names the exits host's sessions may take now, preferred first
// (politeness.Gate.Exits): none when every exit is out of rotation.
func (x *Exits) Order(host string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var names []string
	for _, i := range x.order(host) {
		names = append(names, x.exits[i].name)
	}
	return names
}

// SetAvoid replaces ExitsConfig.Avoid: the egress watch of evs serve,
// which is made after the dialer, steers it. avoid is called with the
// Exits' lock held and must not call back.
func (x *Exits) SetAvoid(avoid func(exit int, host string) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.avoid = avoid
}

// For returns the index of the exit host's sessions prefer now, or -1
// when every exit is out of rotation. It probes nothing.
func (x *Exits) For(host string) int { return x.Through(context.Background(), host) }

// pick chooses the exit of a dial, first probing the exits out of
// rotation that are due: at once when none is in rotation (the dial
// waits for the answer), else in the background.
func (x *Exits) pick(ctx context.Context, host string) (int, error) {
	now := x.cfg.Now()
	x.mu.Lock()
	var due []int
	anyUp := false
	for i, e := range x.exits {
		anyUp = anyUp || e.up
		if !e.up && now.Sub(e.lastProbe) >= x.cfg.Retry && x.claim(i) {
			due = append(due, i)
		}
	}
	x.mu.Unlock()
	if len(due) > 0 {
		if anyUp {
			go func() {
				for _, i := range due {
					x.probeOne(context.Background(), i)
				}
			}()
		} else {
			for _, i := range due {
				x.probeOne(ctx, i)
			}
		}
	}
	if i := x.Through(ctx, host); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("%w: every SMTP exit is out of rotation", ErrExit)
}

// Through returns the index of the exit a dial with ctx to host goes
// through now (WithExit's, else For's), or -1 when every exit is out of
// rotation. It probes nothing.
func (x *Exits) Through(ctx context.Context, host string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if name, _ := ctx.Value(exitKey{}).(string); name != "" {
		if i := slices.IndexFunc(x.exits, func(e *exit) bool { return e.name == name && e.up }); i >= 0 {
			return i
		}
	}
	if o := x.order(host); len(o) > 0 {
		return o[0]
	}
	return -1
}

// fault counts one fault of exit i and reports whether it is still in
// rotation.
func (x *Exits) fault(i int, err error) (up bool) {
	now := x.cfg.Now()
	x.mu.Lock()
	e := x.exits[i]
	if e.faults == 0 || now.Sub(e.firstFault) > x.cfg.FaultWindow {
		e.faults, e.firstFault = 0, now
	}
	e.faults++
	e.detail = err.Error()
	wasUp := e.up
	if e.faults >= x.cfg.DownAfter {
		e.up = false
		if wasUp {
			e.since, e.lastProbe = now, now
		}
	}
	up = e.up
	x.mu.Unlock()
	if wasUp && !up {
		x.observe(i, false)
	}
	return up
}

// passed records a proof of exit i's health (a dial or a probe that
// worked), bringing it back into rotation.
func (x *Exits) passed(i int) {
	x.mu.Lock()
	e := x.exits[i]
	back := !e.up
	e.faults, e.detail = 0, ""
	if back {
		e.up, e.since = true, x.cfg.Now()
	}
	x.mu.Unlock()
	if back {
		x.observe(i, true)
	}
}

func (x *Exits) observe(i int, up bool) {
	if x.cfg.Observe != nil {
		x.cfg.Observe(i, x.exits[i].name, up)
	}
}

// Probe runs one health probe of every exit, side by side, and returns
// when all are done.
func (x *Exits) Probe(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range x.exits {
		x.mu.Lock()
		mine := x.claim(i)
		x.mu.Unlock()
		if !mine {
			continue
		}
		wg.Go(func() { x.probeOne(ctx, i) })
	}
	wg.Wait()
}

// Run probes every exit every interval until ctx ends.
func (x *Exits) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			x.Probe(ctx)
		}
	}
}

// probeOne runs exit i's health probe, whose probing flag the caller set,
// and records the verdict: a failure takes the exit out at once.
func (x *Exits) probeOne(ctx context.Context, i int) {
	e := x.exits[i]
	to := cmp.Or(x.cfg.Canary, selfCanary)
	c, err := e.dialer.connect(ctx, to)
	if err == nil {
		c.Close()
	} else if !x.cfg.Canary.IsValid() && reply(err) != "" {
		err = nil // it answered
	}
	x.mu.Lock()
	e.probing = false
	x.mu.Unlock()
	if err == nil {
		x.passed(i)
		return
	}
	if ctx.Err() != nil {
		return // ours ended, not the exit
	}
	now := x.cfg.Now()
	x.mu.Lock()
	wasUp := e.up
	e.up, e.detail = false, "health probe: "+err.Error()
	if wasUp {
		e.since = now
	}
	x.mu.Unlock()
	x.observe(i, false)
}

// Status returns every exit's state, in the configured order.
func (x *Exits) Status() []ExitStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]ExitStatus, len(x.exits))
	for i, e := range x.exits {
		out[i] = ExitStatus{Index: i, Name: e.name, Up: e.up, Since: e.since}
		if !e.up {
			out[i].Detail = e.detail
		}
	}
	return out
}

// selfCanary is where a health probe CONNECTs without a canary: the exit's
// own loopback, which answers at once, refused or not.
var selfCanary = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 25)
