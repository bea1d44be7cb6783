// Package verify is the verification engine: it decides status, reason,
// flags, suggestion and checks for an address.
//
// The engine runs the stages in order (syntax, lists and typo suggestion,
// DNS, then the SMTP mailbox probe in full mode) and hands the evidence to
// Verdict, the one pure function that picks the reason; Score, another,
// gives its decision.score (docs/score.md). Its network dependencies are
// small interfaces injected by the caller, so tests run it against real
// DNS and SMTP peers on loopback.
package verify

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/address"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// Resolver is the DNS stage: the mail hosts of a domain, with the evidence.
type Resolver interface {
	LookupMail(ctx context.Context, domain string) dnscheck.MailResult
}

// Prober opens SMTP sessions to a domain's mail hosts; *smtpprobe.Prober
// is the one.
type Prober interface {
	Open(ctx context.Context, domain string, hosts []string) (*smtpprobe.Session, error)
}

// SMTP returns p as the engine's Prober.
func SMTP(p *smtpprobe.Prober) Prober { return p }

// Config holds the engine's dependencies.
type Config struct {
	Resolver Resolver // required
	// Prober runs the SMTP stage of full mode; nil: full mode behaves like
	// quick, saying why (SMTPOffDetail).
	Prober        Prober
	SMTPOffDetail string
	Now           func() time.Time
	// RandomLocal returns the local part of the accept-all probe address
	// (default: random base32 characters, which no real mailbox has).
	RandomLocal func() string
	// Facts remembers the accept-all probe's answers for every later
	// call (nil: each call still probes at most once).
	Facts DomainFacts
	// Gate, when set, is asked before Verify opens an SMTP session, so
	// /v1/verify keeps the limits per provider and egress address that
	// batches keep. VerifyDomain does not ask: its callers admit whole
	// groups themselves.
	Gate Gate
	// GateWait is the longest Verify waits for the gate (default 2 s)
	// before it answers unknown, deferred.
	GateWait time.Duration
}

// Gate keeps Verify's SMTP sessions within the limits per mail provider
// and egress address that the batches keep (politeness.Gate).
type Gate interface {
	// Session asks for a session of at most two RCPTs to MX host host,
	// waiting up to most. Admitted, it returns end, to call when the
	// session is over with whether the server throttled us; refused, end
	// is nil and why is the evidence.
	Session(ctx context.Context, host string, most time.Duration) (end func(throttled bool), why string)
}

// DomainFacts keeps public facts about mail domains (the accept-all
// probe's answer), shared by every account: facts about the domain, never
// about an address. One that cannot answer answers "not known".
type DomainFacts interface {
	// AcceptAll returns the remembered answer of domain's accept-all
	// probe (evs.SMTPAccepted or evs.SMTPRejected), if known.
	AcceptAll(ctx context.Context, domain string) (result string, ok bool)
	// KeepAcceptAll remembers a conclusive answer.
	KeepAcceptAll(ctx context.Context, domain, result string)
}

// Engine verifies addresses. It is safe for concurrent use.
type Engine struct {
	cfg Config
}

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("verify: a DNS resolver is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RandomLocal == nil {
		cfg.RandomLocal = randomLocal
	}
	cfg.SMTPOffDetail = cmp.Or(cfg.SMTPOffDetail, "SMTP probing is not available here")
	cfg.GateWait = cmp.Or(max(cfg.GateWait, 0), 2*time.Second)
	return &Engine{cfg: cfg}, nil
}

var probeEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func randomLocal() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return "evs-" + probeEncoding.EncodeToString(b[:])
}

// Inspection is what can be known about an address without the network:
// syntax, lists and the typo suggestion. It is the one parse of an
// address: callers key their caches by its Normalized form.
type Inspection struct {
	Email   string // as given
	Address address.Address
	// Normalized is Address.String(), the result cache's key; "" when the
	// syntax is invalid.
	Normalized      string
	Valid           bool
	SyntaxRule      string
	Flags           evs.Flags
	SuggestedDomain string // "" when none
}

// Inspect runs the network-free stages. It is the hot path of quick checks
// and batches, so it does not allocate for an ASCII address whose domain is
// already lower case.
func Inspect(email string) Inspection {
	a, err := address.Parse(email)
	if err != nil {
		// Parse returns its *SyntaxError values unwrapped; errors.As would
		// allocate per invalid address.
		rule := "invalid"
		if se, ok := err.(*address.SyntaxError); ok {
			rule = se.Rule
		}
		return Inspection{Email: email, SyntaxRule: rule}
	}
	in := Inspection{Email: email, Address: a, Normalized: normalized(email, a.Local, a.Domain), Valid: true}
	in.Flags.Disposable = address.Disposable(a.Domain)
	in.Flags.Free = address.Free(a.Domain)
	in.Flags.Role = address.Role(a.Local)
	in.Flags.SMTPUTF8 = a.UTF8Local
	if !in.Flags.Free { // address.Suggest never corrects a free provider's domain
		in.SuggestedDomain, _ = address.Suggest(a.Domain) // "" when none
	}
	return in
}

// normalized is local@domain, the normalized form of an address parsed
// from email, without allocating when email (trimmed) already reads so.
func normalized(email, local, domain string) string {
	s := strings.Trim(email, " \t")
	if len(s) == len(local)+1+len(domain) && s[len(local)] == '@' && s[:len(local)] == local && s[len(local)+1:] == domain {
		return s
	}
	return local + "@" + domain
}

func (in Inspection) decision(mode evs.Mode) evs.Decision {
	d := evs.Decision{
		Email:      in.Email,
		Normalized: in.Normalized,
		Mode:       mode,
		Flags:      in.Flags,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: in.Valid, Error: in.SyntaxRule},
			DNS:    evs.DNSCheck{Result: evs.DNSNotChecked, MX: []string{}},
			SMTP:   evs.SMTPCheck{Result: evs.SMTPSkipped},
		},
	}
	if in.SuggestedDomain != "" {
		s := in.Address.Local + "@" + in.SuggestedDomain
		d.Suggestion = &s
	}
	return d
}

// Verify verifies one inspected address (Inspect) in the given mode. It
// never fails: whatever could not be learned is an unknown outcome with its
// evidence. The context's deadline bounds the whole verification. Its SMTP
// session, if any, first passes Config.Gate.
func (e *Engine) Verify(ctx context.Context, in Inspection, mode evs.Mode) evs.Decision {
	return e.verify(ctx, in, mode, true)
}

// verify is Verify; gated says whether its session asks Config.Gate.
func (e *Engine) verify(ctx context.Context, in Inspection, mode evs.Mode, gated bool) evs.Decision {
	start := e.cfg.Now()
	d := in.decision(mode)
	if !in.Valid {
		d.Checks.SMTP.Detail = "skipped: invalid syntax"
		return e.finish(d, start)
	}
	e.check(ctx, in.Address.Domain, mode, []*evs.Decision{&d}, gated, start)
	return d
}

// VerifyDomain verifies several addresses that share one domain: one DNS
// lookup, one SMTP connection with a RCPT per address, and at most one
// accept-all probe, in the order of emails. Addresses whose syntax is
// invalid, or whose domain differs from the first valid one's, are
// verified alone.
func (e *Engine) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	start := e.cfg.Now()
	out := make([]evs.Decision, len(emails))
	var group []*evs.Decision
	domain := ""
	for i, email := range emails {
		in := Inspect(email)
		if !in.Valid || (domain != "" && in.Address.Domain != domain) {
			out[i] = e.verify(ctx, in, mode, false)
			continue
		}
		domain = in.Address.Domain
		out[i] = in.decision(mode)
		group = append(group, &out[i])
	}
	if len(group) > 0 {
		e.check(ctx, domain, mode, group, false, start)
	}
	return out
}

// check runs the DNS and SMTP stages for the decisions ds of addresses of
// domain, and finishes them.
func (e *Engine) check(ctx context.Context, domain string, mode evs.Mode, ds []*evs.Decision, gated bool, start time.Time) {
	mail := e.cfg.Resolver.LookupMail(ctx, domain)
	for _, d := range ds {
		d.Checks.DNS = dnsEvidence(mail)
		d.Checks.SMTP.Provider = providerOf(mail)
	}
	if mode == evs.ModeFull && mail.Outcome == dnscheck.OutcomeOK {
		e.probe(ctx, domain, mail, ds, gated)
	} else {
		detail := e.skipDetail(mode, mail)
		for _, d := range ds {
			d.Checks.SMTP.Detail = detail
		}
	}
	for _, d := range ds {
		*d = e.finish(*d, start)
	}
}

func (e *Engine) skipDetail(mode evs.Mode, mail dnscheck.MailResult) string {
	switch {
	case mode == evs.ModeQuick:
		return "skipped: quick mode"
	case mail.Outcome != dnscheck.OutcomeOK:
		return "skipped: no mail server to probe"
	default:
		return "skipped: " + e.cfg.SMTPOffDetail
	}
}

func (e *Engine) finish(d evs.Decision, start time.Time) evs.Decision {
	d.Reason = Verdict(Evidence{
		SyntaxValid:      d.Checks.Syntax.Valid,
		Disposable:       d.Flags.Disposable,
		DNS:              d.Checks.DNS.Result,
		SMTP:             d.Checks.SMTP.Result,
		SMTPReplied:      Replied(d.Checks.SMTP),
		SMTPBlocked:      Blocked(d.Checks.SMTP),
		AcceptAllUnknown: d.Checks.SMTP.AcceptAllUnknown(),
	})
	d.Flags.AcceptAll = d.Checks.SMTP.Result == evs.SMTPAcceptAll
	d.Flags.AcceptAllUnknown = d.Checks.SMTP.AcceptAllUnknown()
	d.Score = Score(d)
	now := e.cfg.Now()
	d.CheckedAt = evs.Time{Time: now.UTC()}
	d.DurationMs = now.Sub(start).Milliseconds()
	return d
}

func providerOf(m dnscheck.MailResult) evs.Provider {
	if m.Outcome != dnscheck.OutcomeOK || len(m.MX) == 0 {
		return ""
	}
	return evs.Provider(smtpprobe.ProviderOf(m.MX[0].Host))
}

func dnsEvidence(m dnscheck.MailResult) evs.DNSCheck {
	return evs.DNSCheck{Result: string(m.Outcome), MX: mxHosts(m), ImplicitMX: m.Implicit, Rcode: m.Rcode, Error: m.Err}
}

func mxHosts(m dnscheck.MailResult) []string {
	hosts := make([]string, len(m.MX))
	for i, mx := range m.MX {
		hosts[i] = mx.Host
	}
	return hosts
}

// probe runs the SMTP stage for addresses of one domain on one connection,
// with a single accept-all probe, into their decisions; gated asks
// Config.Gate first. DNS has found mail hosts.
func (e *Engine) probe(ctx context.Context, domain string, mail dnscheck.MailResult, ds []*evs.Decision, gated bool) {
	provider := providerOf(mail)
	if e.cfg.Prober == nil {
		setSMTP(ds, evs.SMTPCheck{Result: evs.SMTPSkipped, Provider: provider, Detail: "skipped: " + e.cfg.SMTPOffDetail})
		return
	}
	hosts := mxHosts(mail)
	if gated && e.cfg.Gate != nil {
		end, why := e.cfg.Gate.Session(ctx, hosts[0], e.cfg.GateWait)
		if end == nil {
			setSMTP(ds, evs.SMTPCheck{Result: evs.SMTPSkipped, Provider: provider, Detail: why})
			return
		}
		defer func() {
			end(slices.ContainsFunc(ds, func(d *evs.Decision) bool { t, _ := Throttled(d.Checks.SMTP); return t }))
		}()
	}
	opened := time.Now()
	sess, err := e.cfg.Prober.Open(ctx, domain, hosts)
	// The slowest reply seen so far sizes the session by time (AskUntil):
	// opening waited for at least three (banner, EHLO, MAIL).
	reply := time.Since(opened) / 3
	pe, _ := errors.AsType[*smtpprobe.ProbeError](err)
	switch {
	case pe != nil && pe.NotPublic:
		// What the DNS says, not a failure to connect.
		for _, d := range ds {
			d.Checks.DNS.Result = evs.DNSMXNotPublic
			d.Checks.SMTP = evs.SMTPCheck{Result: evs.SMTPSkipped, Provider: provider, Detail: "skipped: every address of the mail hosts is private or reserved (egress policy, EVS_EGRESS_ALLOW)"}
		}
		return
	case pe != nil && pe.Exit:
		// Our exit failed: no evidence about the mailbox (ExitDown).
		setSMTP(ds, evs.SMTPCheck{Result: evs.SMTPUnreachable, Provider: provider, Detail: DetailExitDown})
		return
	case err != nil:
		c := openFailure(ctx, err)
		c.Provider = cmp.Or(c.Provider, provider)
		setSMTP(ds, c)
		return
	}
	defer sess.Close()

	// The catch-all probe (and the facts' lookup) runs only when some
	// address is accepted: the only case where it changes a verdict.
	catchAll, remembered := "", false
	until, budgeted := askUntil(ctx)
	for i, d := range ds {
		if budgeted && !fits(until, reply, catchAll == "") {
			// Left unasked, for another session, rather than cut off.
			setSMTP(ds[i:], evs.SMTPCheck{Result: evs.SMTPTimeout, Host: sess.Host(), Provider: provider, TLS: sess.TLS(), Detail: detailOutOfTime})
			return
		}
		asked := time.Now()
		c := rcptCheck(ctx, sess, d.Normalized)
		reply = max(reply, time.Since(asked))
		if c.Result == evs.SMTPAccepted {
			if catchAll == "" {
				asked = time.Now()
				catchAll, remembered = e.acceptAll(ctx, sess, domain)
				reply = max(reply, time.Since(asked))
			}
			c.CatchAll = catchAll
			switch catchAll {
			case evs.SMTPAccepted:
				c.Result = evs.SMTPAcceptAll
				c.Detail = "the server also accepted a random address on the domain"
			case evs.SMTPRejected:
				c.Detail = "the server rejects unknown addresses"
			default:
				c.Detail = "accept-all probe inconclusive (" + catchAll + "): the server accepted this mailbox but did not show that it rejects unknown ones"
			}
			// Some receivers accept at RCPT what they bounce later.
			if c.Result == evs.SMTPAccepted {
				untrustedAccept(&c, catchAll)
			}
			if remembered {
				c.Detail += " (" + detailRemembered + ")"
			}
		}
		d.Checks.SMTP = c
		if t, _ := Throttled(c); t {
			// Asking the rest now would read a closed channel or press a
			// server that asked us to wait: left for the caller to run later.
			setSMTP(ds[i+1:], evs.SMTPCheck{Result: evs.SMTPGreylisted, Host: c.Host, Provider: c.Provider, TLS: c.TLS, Detail: detailNotAsked})
			return
		}
	}
}

func setSMTP(ds []*evs.Decision, c evs.SMTPCheck) {
	for _, d := range ds {
		d.Checks.SMTP = c
	}
}

// acceptAll returns the result of domain's accept-all probe: what the
// domain's facts remember (remembered true), or else the answer to a RCPT
// of a random address on sess, which is remembered when conclusive.
func (e *Engine) acceptAll(ctx context.Context, sess *smtpprobe.Session, domain string) (result string, remembered bool) {
	if e.cfg.Facts != nil {
		if r, ok := e.cfg.Facts.AcceptAll(ctx, domain); ok {
			return r, true
		}
	}
	r := rcptCheck(ctx, sess, e.cfg.RandomLocal()+"@"+domain).Result
	if e.cfg.Facts != nil && (r == evs.SMTPAccepted || r == evs.SMTPRejected) {
		e.cfg.Facts.KeepAcceptAll(ctx, domain, r)
	}
	return r, false
}

const detailRemembered = "the random-address probe's answer is remembered from an earlier session with this domain"

func openFailure(ctx context.Context, err error) evs.SMTPCheck {
	if pe, ok := errors.AsType[*smtpprobe.ProbeError](err); ok {
		c := evs.SMTPCheck{Host: pe.Host, Code: pe.Reply.Code, EnhancedCode: pe.Reply.Enhanced, Message: pe.Reply.Text}
		if pe.Host != "" {
			c.Provider = evs.Provider(smtpprobe.ProviderOfReply(pe.Host, pe.Reply))
		}
		switch {
		case pe.Timeout:
			c.Result, c.Detail = evs.SMTPTimeout, "no mail host answered in time"
		case pe.Class == smtpprobe.Blocked:
			// Before any recipient, a refusal is of us: at the banner our
			// address, at EHLO our HELO name, at MAIL our sender.
			c.Result, c.Detail = evs.SMTPUnreachable, detailBlocked+"the mail hosts refused our probe at "+cmp.Or(pe.Stage, "connect")+" (about us, not the mailbox)"
		case pe.Class == smtpprobe.Greylisted || pe.Class == smtpprobe.RateLimited:
			c.Result, c.Detail = evs.SMTPGreylisted, detailOpenTryLater
		case c.Code != 0:
			c.Result, c.Detail = evs.SMTPUnreachable, "the mail host refused the session; its reply says nothing about the mailbox"
		default:
			c.Result, c.Detail = evs.SMTPUnreachable, "no mail host accepted a connection"
		}
		return c
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return evs.SMTPCheck{Result: evs.SMTPTimeout, Detail: "the probe ran out of time"}
	}
	return evs.SMTPCheck{Result: evs.SMTPUnreachable, Detail: "no mail host accepted a connection"}
}

// rcptCheck asks the server about one recipient and maps its reading to
// an SMTP result: what is about us, or temporary, is never a verdict on
// the mailbox. The detail names the rule of REPLIES.md that decided.
func rcptCheck(ctx context.Context, s *smtpprobe.Session, rcpt string) evs.SMTPCheck {
	r, rd, err := s.Check(ctx, rcpt)
	c := evs.SMTPCheck{Host: s.Host(), Provider: evs.Provider(rd.ProviderAt(s.Host())), TLS: s.TLS(),
		Code: r.Code, EnhancedCode: r.Enhanced, Message: r.Text}
	if err != nil {
		if ctx.Err() != nil || isTimeout(err) {
			c.Result, c.Detail = evs.SMTPTimeout, "the server did not answer RCPT in time"
		} else {
			c.Result, c.Detail = evs.SMTPUnreachable, detailBrokeAtRCPT
		}
		return c
	}
	switch rd.Class {
	case smtpprobe.Accepted:
		c.Result = evs.SMTPAccepted
	case smtpprobe.Rejected:
		c.Result, c.Detail = evs.SMTPRejected, "the server rejected the mailbox"
	case smtpprobe.Full:
		c.Result, c.Detail = evs.SMTPFull, "the mailbox is over quota"
	case smtpprobe.Greylisted:
		c.Result, c.Detail = evs.SMTPGreylisted, "temporary failure: try again later"
	case smtpprobe.RateLimited:
		c.Result, c.Detail = evs.SMTPGreylisted, "the server limited our rate: not evidence against the mailbox"
	case smtpprobe.Blocked:
		c.Result, c.Detail = evs.SMTPUnreachable, detailBlocked+"the server refused our probe (about us, not the mailbox)"
		if rd.Rule != "about_us" && rd.Rule != "wrapper_about_us" || rd.Family == "relay" {
			// Whom it refuses is not said: no block we can name.
			c.Detail = "the server refused without saying whether the mailbox or we are the cause"
		}
	default:
		c.Result, c.Detail = evs.SMTPUnreachable, "the reply says nothing certain about the mailbox"
	}
	if rd.Class != smtpprobe.Accepted {
		c.Detail += " " + explain(rd)
	}
	return c
}

// explain renders what decided a reading, for the evidence: "(rule
// mailbox: text mailbox_unknown, wrapper postfix_recipient)".
func explain(rd smtpprobe.Reading) string {
	var b strings.Builder
	b.WriteString("(rule ")
	b.WriteString(rd.Rule)
	sep := ": "
	add := func(k, v string) {
		if v != "" {
			b.WriteString(sep + k + " " + v)
			sep = ", "
		}
	}
	add("text", rd.Family)
	add("wrapper", rd.Wrapper)
	add("provider", string(rd.Provider))
	b.WriteByte(')')
	return b.String()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// PreferredMX returns the mail host a full verification of domain would try
// first, lower case without the trailing dot; ok is false when the domain
// has no mail host to probe.
func (e *Engine) PreferredMX(ctx context.Context, domain string) (host string, ok bool) {
	mail := e.cfg.Resolver.LookupMail(ctx, domain)
	if mail.Outcome != dnscheck.OutcomeOK || len(mail.MX) == 0 {
		return "", false
	}
	return strings.ToLower(strings.TrimSuffix(mail.MX[0].Host, ".")), true
}

// NormalizedKey returns an address's normalized form (local part as given,
// domain lower-cased A-labels) and its domain, checking syntax only; ok is
// false for an invalid address.
func NormalizedKey(email string) (key, domain string, ok bool) {
	a, err := address.Parse(email)
	if err != nil {
		return "", "", false
	}
	return normalized(email, a.Local, a.Domain), a.Domain, true
}

// ItemKey returns a batch item's normalized address without parsing it
// again: batch creation kept its domain (NormalizedKey), and its local
// part is the text's up to the last "@". ok is false for an invalid one.
func ItemKey(it evs.Item) (key string, ok bool) {
	if it.Domain == "" {
		return "", false
	}
	s := strings.Trim(it.Email, " \t")
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return "", false
	}
	return normalized(s, s[:at], it.Domain), true
}
