package batch

import (
	"sync"
)

// The in-process runner shares its worker slots between tenants. Work is a
// task: one domain group of a batch, whose SMTP sessions (PerConnection
// addresses each) run one after another. Tasks wait in their batch's queue; a free slot goes to the
// next account in round-robin order that has a task ready, and inside that
// account to its next batch in round-robin order. So an account with one
// batch gets as many slots as an account with ten, and a batch of 50,000
// addresses gets as many as a batch of three.
//
// There are two lanes with slots of their own: test-mode work (the sandbox
// needs no network and answers at once) never waits behind SMTP work, which
// may sit for minutes on a slow receiving server.
//
// Slots cannot be taken back from a task that holds one, so round-robin
// alone would let an account that came first fill every slot with sessions
// to a server that never answers. An account therefore holds at most
// perAccount slots of a lane (by default three quarters), and a batch at
// most perBatch: the rest stay free for accounts that arrive later.

// lane is one pool of worker slots and the queues that feed it.
type lane struct {
	mu         sync.Mutex
	slots      int
	perAccount int
	perBatch   int
	busy       int
	accounts   []*accountQueue
	next       int // index in accounts of the account served next
	start      func(task)
}

// accountQueue is one account's batches that have work in a lane.
type accountQueue struct {
	id       string
	batches  []*batchRun
	next     int
	inflight int
}

func newLane(slots, perAccount, perBatch int, start func(task)) *lane {
	return &lane{slots: slots, perAccount: max(1, perAccount), perBatch: max(1, perBatch), start: start}
}

// add registers a batch with the lane; its tasks are pushed with push.
func (l *lane) add(br *batchRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.accounts {
		if a.id == br.b.AccountID {
			a.batches = append(a.batches, br)
			return
		}
	}
	l.accounts = append(l.accounts, &accountQueue{id: br.b.AccountID, batches: []*batchRun{br}})
}

// remove forgets a batch whose work is over.
func (l *lane) remove(br *batchRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, a := range l.accounts {
		if a.id != br.b.AccountID {
			continue
		}
		for j, x := range a.batches {
			if x == br {
				a.batches = append(a.batches[:j], a.batches[j+1:]...)
				if a.next > j {
					a.next--
				}
				break
			}
		}
		if len(a.batches) == 0 && a.inflight == 0 {
			l.accounts = append(l.accounts[:i], l.accounts[i+1:]...)
			if l.next > i {
				l.next--
			}
		}
		return
	}
}

// push queues a task and starts what the free slots allow.
func (l *lane) push(t task) {
	l.mu.Lock()
	t.run.ready = append(t.run.ready, t)
	l.mu.Unlock()
	l.dispatch()
}

// drop removes the ready tasks of a batch (cancelled, deadline, shutdown)
// and returns how many there were.
func (l *lane) drop(br *batchRun) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(br.ready)
	br.ready = nil
	return n
}

// done gives back the slot of a finished task and starts the next ones.
func (l *lane) done(t task) {
	l.mu.Lock()
	l.busy--
	t.run.inflight--
	for i, a := range l.accounts {
		if a.id == t.run.b.AccountID {
			a.inflight--
			if len(a.batches) == 0 && a.inflight == 0 {
				l.accounts = append(l.accounts[:i], l.accounts[i+1:]...)
				if l.next > i {
					l.next--
				}
			}
			break
		}
	}
	l.mu.Unlock()
	l.dispatch()
}

// dispatch starts ready tasks while slots are free.
func (l *lane) dispatch() {
	for {
		l.mu.Lock()
		t, ok := l.pick()
		l.mu.Unlock()
		if !ok {
			return
		}
		l.start(t)
	}
}

// pick takes the next task in fair order and accounts for its slot; the
// caller holds mu.
func (l *lane) pick() (task, bool) {
	if l.busy >= l.slots || len(l.accounts) == 0 {
		return task{}, false
	}
	if l.next >= len(l.accounts) {
		l.next = 0
	}
	for i := range l.accounts {
		ai := (l.next + i) % len(l.accounts)
		a := l.accounts[ai]
		if a.inflight >= l.perAccount || len(a.batches) == 0 {
			continue
		}
		for j := range a.batches {
			bi := (a.next + j) % len(a.batches)
			br := a.batches[bi]
			if len(br.ready) == 0 || br.inflight >= l.perBatch {
				continue
			}
			t := br.ready[0]
			br.ready = br.ready[1:]
			br.inflight++
			a.inflight++
			l.busy++
			a.next = bi + 1
			l.next = ai + 1
			return t, true
		}
	}
	return task{}, false
}
