package smtpprobe

import (
	"fmt"
	"slices"
)

// ProbeError is what Open returns when no host gave a session. It describes
// the most telling failure: a host's SMTP reply rather than a connection
// failure, a refusal rather than a timeout, and among equals the last.
type ProbeError struct {
	// Host is the MX host the failure is about ("" when none was tried).
	Host string
	// Stage is where the conversation stopped: "banner", "ehlo" (which
	// includes STARTTLS) or "mail"; "" when no connection was made.
	Stage string
	// Reply is the server's refusal; zero when there was none.
	Reply Reply
	// Class classifies Reply (Unknown when there was none).
	Class Class
	// Timeout is true when every host failed by timing out.
	Timeout bool
	// Err is the I/O or context error, if any.
	Err error
	// NotPublic is true when the egress policy refused every address of
	// every host tried, so that no connection was attempted; Err then
	// wraps the first *config.EgressRefusedError.
	NotPublic bool
	// Exit is true when every host failed because our SMTP exit (the
	// SOCKS5 proxy) could not be reached or refused us (ErrExit): nothing
	// is known about the domain's servers.
	Exit bool

	// tlsFailed marks a failed TLS handshake: the address is worth a
	// second, plain attempt.
	tlsFailed bool
	// refused marks a host none of whose addresses the egress policy
	// allows.
	refused bool
	// firstContact marks a screening refusal (FirstContactRefusal): the
	// address is worth one reconnect.
	firstContact bool
}

// Error implements error.
func (e *ProbeError) Error() string {
	switch {
	case e.Reply.Code != 0:
		return fmt.Sprintf("smtpprobe: %s refused at %s: %d %s %s (%s)", e.Host, e.Stage, e.Reply.Code, e.Reply.Enhanced, e.Reply.Text, e.Class)
	case e.Err != nil:
		return "smtpprobe: " + e.Err.Error()
	default:
		return "smtpprobe: no mail host gave a session"
	}
}

// Unwrap exposes Err to errors.Is and errors.As.
func (e *ProbeError) Unwrap() error { return e.Err }

// rank orders failures by how much they tell: a reply explains more than
// a broken connection, and a broken connection more than silence.
func (e *ProbeError) rank() int {
	switch {
	case e.Reply.Code != 0 && e.Class == Blocked:
		return 5
	case e.Reply.Code != 0 && (e.Class == Greylisted || e.Class == RateLimited):
		return 4
	case e.Reply.Code != 0:
		return 3
	case !e.Timeout:
		return 2
	default:
		return 1
	}
}

// mostTelling picks the failure Open reports; Timeout holds only when all
// failures were timeouts.
func mostTelling(fails []*ProbeError) *ProbeError {
	var best *ProbeError
	for _, f := range fails {
		if best == nil || f.rank() >= best.rank() {
			best = f
		}
	}
	out := *best
	out.Timeout = !slices.ContainsFunc(fails, func(f *ProbeError) bool { return !f.Timeout })
	out.tlsFailed, out.firstContact = false, false
	return &out
}
