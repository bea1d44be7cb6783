package server_test

import "sync"

// rcptGate decides when the scripted SMTP server answers a RCPT: a budget
// of them is answered at once, the rest are held until release, which is
// what lets a test prove that work is unfinished rather than hope it is.
type rcptGate struct {
	mu       sync.Mutex
	budget   int // RCPTs not exempt that are still answered at once
	holding  int
	released chan struct{}
	once     sync.Once
}

func newRcptGate(budget int) *rcptGate {
	return &rcptGate{budget: budget, released: make(chan struct{})}
}

// wait returns at once for an exempt RCPT, for one within the budget and
// after release; otherwise it counts the RCPT as held and blocks.
func (g *rcptGate) wait(exempt bool) {
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

// held returns how many RCPTs were held before the release; it never goes
// down, as nothing but release lets a held RCPT be answered.
func (g *rcptGate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

// release answers every held RCPT and every later one.
func (g *rcptGate) release() { g.once.Do(func() { close(g.released) }) }
