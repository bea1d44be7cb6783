package dnscheck

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ednsSize is the EDNS0 UDP payload size recommended by DNS Flag Day 2020:
// large enough for MX sets, small enough to avoid IP fragmentation.
const ednsSize = 1232

// Short failure kinds reported in MailResult.Err.
const (
	errServfail = "servfail"
	errRefused  = "refused"
	errTimeout  = "timeout"
	errNetwork  = "network"
	errInvalid  = "invalid"
)

// failure says why no server gave a usable answer.
type failure struct {
	rcode string // "SERVFAIL", "REFUSED", ...; "" when no reply arrived
	kind  string // one of the err* kinds
}

// query asks the configured servers for name/qtype until one gives an
// authoritative-for-our-purposes answer (NOERROR or NXDOMAIN). Servers are
// tried in order within each attempt, like the stub resolver in libc, so one
// dead or refusing resolver does not fail the lookup.
func (r *Resolver) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, *failure) {
	var fail *failure
	refused := make(map[string]bool)
	for range r.attempts {
		for _, srv := range r.servers {
			if ctx.Err() != nil {
				return nil, &failure{kind: errTimeout}
			}
			if refused[srv] {
				// Refusal is policy; asking again will not change it.
				continue
			}
			resp, err := r.exchange(ctx, name, qtype, srv)
			if err != nil {
				f := &failure{kind: errNetwork}
				if isTimeout(ctx, err) {
					f.kind = errTimeout
				}
				// A reply with an rcode says more than silence does.
				if fail == nil || fail.rcode == "" {
					fail = f
				}
				continue
			}
			switch resp.Rcode {
			case dns.RcodeSuccess, dns.RcodeNameError:
				return resp, nil
			case dns.RcodeRefused:
				refused[srv] = true
				fail = &failure{rcode: rcodeString(resp.Rcode), kind: errRefused}
			default:
				fail = &failure{rcode: rcodeString(resp.Rcode), kind: errServfail}
			}
		}
	}
	if fail == nil {
		fail = &failure{kind: errNetwork}
	}
	return nil, fail
}

// exchange runs one attempt against one server: UDP first, TCP when the
// UDP answer is truncated, and once more without EDNS0 if the server
// rejects it with FORMERR (RFC 6891 section 7).
func (r *Resolver) exchange(ctx context.Context, name string, qtype uint16, srv string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(ednsSize, false)

	resp, err := r.exchangeOn(ctx, "udp", m, srv)
	if err == nil && resp.Rcode == dns.RcodeFormatError && resp.IsEdns0() == nil {
		m.Extra = nil
		resp, err = r.exchangeOn(ctx, "udp", m, srv)
	}
	if err == nil && resp.Truncated {
		resp, err = r.exchangeOn(ctx, "tcp", m, srv)
	}
	return resp, err
}

// exchangeOn sends m over network and waits for the matching reply, within
// the per-attempt timeout and the caller's context, whichever ends first.
// It drives dns.Conn itself so that cancelling ctx unblocks the read at
// once instead of at the deadline.
func (r *Resolver) exchangeOn(ctx context.Context, network string, m *dns.Msg, srv string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	nc, err := r.dial(ctx, network, srv)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	deadline, _ := ctx.Deadline()
	if err := nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	co := &dns.Conn{Conn: nc, UDPSize: ednsSize}
	m.Id = dns.Id()
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	for {
		resp, err := co.ReadMsg()
		if err != nil {
			if resp != nil && resp.Truncated && resp.Id == m.Id {
				// A cut-off answer may not unpack; TC is all we need.
				return resp, nil
			}
			if _, netErr := errors.AsType[net.Error](err); network == "udp" && !netErr {
				// An unparsable datagram is ignored like a stray one.
				continue
			}
			return nil, err
		}
		if resp.Id == m.Id && sameQuestion(resp, m) {
			return resp, nil
		}
		if network != "udp" {
			return nil, errors.New("dnscheck: reply does not match the query")
		}
		// Over UDP a late reply to an earlier attempt, or a spoofed one,
		// may arrive first; keep waiting for ours.
	}
}

func (r *Resolver) dial(ctx context.Context, network, srv string) (net.Conn, error) {
	if r.dialer != nil {
		return r.dialer.DialContext(ctx, network, srv)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, srv)
}

func sameQuestion(resp, m *dns.Msg) bool {
	if len(resp.Question) != 1 {
		// Some servers omit the question in error replies.
		return len(resp.Question) == 0 && resp.Rcode != dns.RcodeSuccess
	}
	a, b := resp.Question[0], m.Question[0]
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}

func isTimeout(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

func rcodeString(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return "RCODE" + strconv.Itoa(rcode)
}
