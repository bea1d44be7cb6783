package testkit

import "sync"

// RcptGate decides when the scripted SMTP server answers a RCPT: a budget
// of them is answered at once, the rest are held until release, which is
// what lets a test prove that work is unfinished rather than hope it is.
type RcptGate struct {
	mu       sync.Mutex
	budget   int // RCPTs not exempt that are still answered at once
	holding  int
	released chan struct{}
	once     sync.Once
}

// NewRcptGate answers budget RCPTs at once and holds the rest.
func NewRcptGate(budget int) *RcptGate {
	return &RcptGate{budget: budget, released: make(chan struct{})}
}

// Wait returns at once for an exempt RCPT, for one within the budget and
// after release; otherwise it counts the RCPT as held and blocks.
func (g *RcptGate) Wait(exempt bool) {
	g.mu.Lock()
	select {
	case <-g.released:
		g.mu.Unlock()
		return
	default:
	}
	if exempt || g.budget > 0 {
		if !exempt {
			g.budget--
		}
		g.mu.Unlock()
		return
	}
	g.holding++
	g.mu.Unlock()
	<-g.released
}

// Held returns how many RCPTs were held before the release; it never goes
// down, as nothing but release lets a held RCPT be answered.
func (g *RcptGate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

// Release answers every held RCPT and every later one.
func (g *RcptGate) Release() { g.once.Do(func() { close(g.released) }) }
