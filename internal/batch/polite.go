package batch

import (
	"github.com/evs-dev/evs/internal/evs"
)

// RcptBound is the most RCPT commands a group of n addresses sends: one
// per address, and at most one accept-all probe per session (the engine
// sends it only when an address was accepted and the domain's answer is
// not known to the engine's domain facts), with a session per PerConnection addresses.
func (p *Processor) RcptBound(n int) int {
	if n <= 0 {
		return 0
	}
	per := p.perConnection()
	return n + (n+per-1)/per
}

// ItemsWithin is the most addresses of a group whose RcptBound fits in
// budget RCPT commands.
func (p *Processor) ItemsWithin(budget int) int {
	per := p.perConnection()
	// n + ceil(n/per) <= budget  ⇐  n = budget - ceil(budget/(per+1))
	n := budget - (budget+per)/(per+1)
	for n > 0 && p.RcptBound(n) > budget {
		n--
	}
	return max(n, 0)
}

// Fit splits a group larger than a whole RCPT window's budget (limit
// commands) into the part that may run now and the rest, which runs in a
// later window: at least one address runs, so that a budget below one
// address's RCPT commands still lets the group through, one by one.
func (p *Processor) Fit(items []evs.Item, limit int) (run, rest []evs.Item) {
	if p.RcptBound(len(items)) <= limit {
		return items, nil
	}
	n := max(p.ItemsWithin(limit), 1)
	return items[:n], items[n:]
}

func (p *Processor) perConnection() int {
	if p.PerConnection <= 0 {
		return 50
	}
	return p.PerConnection
}
