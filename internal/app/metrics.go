// What the runtime counts: the metric names, Observer, and Count. The
// Prometheus client stays out of this package: it would add 0.6 MB to each
// Lambda zip and its registrations to every cold start.

package app

import (
	"context"
	"strconv"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// Metric names, shared by EMF and server.Prometheus.
const (
	HttpRequests          = "evs_http_requests_total"
	HttpRequestDuration   = "evs_http_request_duration_seconds"
	Verifications         = "evs_verifications_total"
	SmtpReplies           = "evs_smtp_replies_total"
	DnsLookupDuration     = "evs_dns_lookup_duration_seconds"
	BatchAddressesPending = "evs_batch_addresses_pending"
	WebhookDeliveries     = "evs_webhook_deliveries_total"
	// SmtpConnectionFailures counts verifications whose SMTP stage got no
	// reply at all (label result: unreachable or timeout).
	SmtpConnectionFailures = "evs_smtp_connection_failures_total"
	// SmtpExitDown counts the health verdicts that took a SOCKS exit out
	// of rotation or kept it out (label exit).
	SmtpExitDown = "evs_smtp_exit_down_total"
	// EgressListed is 1 when the last self-check found the egress address
	// on a DNS blocklist (labels egress, list; absent without an answer).
	EgressListed = "evs_egress_listed"
	// EgressHELOConfirmed is 1 when the last self-check found the HELO
	// name and the egress address naming each other in DNS (label egress).
	EgressHELOConfirmed = "evs_egress_helo_confirmed"
	// SmtpAnswered and SmtpBlocked count, per egress and provider (never a
	// domain), the live verdicts whose SMTP stage got a reply, and those
	// that refused us; on AWS their sums over a period give the blocked
	// share by metric math, as each instance keeps its own window.
	SmtpAnswered  = "evs_smtp_answered_total"
	SmtpBlocked   = "evs_smtp_blocked_total"
	StoreErrors   = "evs_store_errors_total"   // label source: api, batch or readyz
	CacheRequests = "evs_cache_requests_total" // label result: hit, miss or stale
	DomainFacts   = "evs_domain_facts_total"   // accept-all lookups; label result: hit or miss
)

// ModeTest is the mode label of test-mode verdicts: they are no DNS or
// SMTP work, and counted with it they would make the live figures lie.
const ModeTest evs.Mode = "test"

// Observer is told what the service does.
type Observer interface {
	// HTTPRequest counts one reply; route is the route template
	// (/v1/requests/{id}), never the raw path.
	HTTPRequest(route string, code int, d time.Duration)
	// Verification counts one verdict.
	Verification(mode evs.Mode, status evs.Status, reason evs.Reason)
	// SMTPReply counts the RCPT reply of one verification by class (2xx,
	// 4xx, 5xx).
	SMTPReply(class string)
	// DNSLookup times one mail-domain lookup.
	DNSLookup(d time.Duration)
	// WebhookDelivery counts one delivery attempt's result.
	WebhookDelivery(result string)
	// SMTPConnectionFailure counts one verification whose SMTP stage got
	// no reply, or could not start because our own exit failed (ExitFailure).
	SMTPConnectionFailure(result string)
	// StoreError counts one failed store operation seen by source.
	StoreError(source string)
}

// Nop observes nothing.
type Nop struct{}

// HTTPRequest implements Observer.
func (Nop) HTTPRequest(string, int, time.Duration) {}

// Verification implements Observer.
func (Nop) Verification(evs.Mode, evs.Status, evs.Reason) {}

// SMTPReply implements Observer.
func (Nop) SMTPReply(string) {}

// DNSLookup implements Observer.
func (Nop) DNSLookup(time.Duration) {}

// WebhookDelivery implements Observer.
func (Nop) WebhookDelivery(string) {}

// SMTPConnectionFailure implements Observer.
func (Nop) SMTPConnectionFailure(string) {}

// StoreError implements Observer.
func (Nop) StoreError(string) {}

// ExitFailure is the result label of a connection our SMTP exit (the
// SOCKS5 proxy) could not make: the deployment's failure, not a server's.
const ExitFailure = "exit"

// ReplyClass is the class label of an SMTP reply code ("" for none).
func ReplyClass(code int) string {
	if code < 200 || code > 599 {
		return ""
	}
	return strconv.Itoa(code/100) + "xx"
}

// observeDecision counts one decision. A test-mode decision is counted
// under ModeTest and nowhere else: its SMTP evidence is made up.
func observeDecision(o Observer, d evs.Decision) {
	if d.TestMode {
		o.Verification(ModeTest, d.Status(), d.Reason)
		return
	}
	smtp := d.Checks.SMTP
	if verify.ExitDown(smtp) {
		// Our SMTP exit failed: no verdict to count, and the failure is
		// ours, under its own result, which an alarm watches.
		o.SMTPConnectionFailure(ExitFailure)
		return
	}
	o.Verification(d.Mode, d.Status(), d.Reason)
	if c := ReplyClass(smtp.Code); c != "" {
		o.SMTPReply(c)
	} else if smtp.Result == evs.SMTPUnreachable || smtp.Result == evs.SMTPTimeout {
		o.SMTPConnectionFailure(smtp.Result)
	}
}

// Engine is a verifier of single addresses and of domain groups: the live
// engine and the sandbox are both.
type Engine interface {
	Verify(ctx context.Context, in verify.Inspection, mode evs.Mode) evs.Decision
	VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision
}

// Count returns e with every decision it makes counted by o.
func Count(e Engine, o Observer) Engine { return counting{e, o} }

type counting struct {
	e Engine
	o Observer
}

func (c counting) Verify(ctx context.Context, in verify.Inspection, mode evs.Mode) evs.Decision {
	d := c.e.Verify(ctx, in, mode)
	observeDecision(c.o, d)
	return d
}

func (c counting) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	ds := c.e.VerifyDomain(ctx, emails, mode)
	if ctx.Err() == nil { // cut-short verdicts are redone, not kept
		for _, d := range ds {
			observeDecision(c.o, d)
		}
	}
	return ds
}
