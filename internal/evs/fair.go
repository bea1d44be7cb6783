package evs

import (
	"slices"
	"sync"
)

// Fair shares a pool of slots between accounts, the one rule `evs serve`'s
// batch lanes and webhook deliveries follow: a free slot goes to the next
// account in round-robin order, and inside it to its next group (a batch)
// in round-robin order, so an account with one batch gets as many slots as
// one with ten. Slots cannot be taken back, so round-robin alone would let
// an account that came first fill every slot with work to a server that
// never answers: an account holds at most perAccount slots, a group at
// most perGroup.
type Fair[T any] struct {
	mu                          sync.Mutex
	slots, perAccount, perGroup int
	busy                        int
	accounts                    []*fairAccount[T]
	next                        int // index in accounts of the account served next
	start                       func(T)
}

// fairAccount is one account's groups that have values queued or running.
type fairAccount[T any] struct {
	id             string
	groups         []*fairGroup[T]
	next, inflight int
}

// fairGroup is one group's queued values.
type fairGroup[T any] struct {
	id       string
	ready    []T
	inflight int
}

// NewFair returns a Fair that hands each value it starts to start (which
// must not block) and expects Done once its work is over.
func NewFair[T any](slots, perAccount, perGroup int, start func(T)) *Fair[T] {
	return &Fair[T]{slots: slots, perAccount: max(1, perAccount), perGroup: max(1, perGroup), start: start}
}

// Push queues v in account's group and starts what the free slots allow.
func (f *Fair[T]) Push(account, group string, v T) {
	f.Offer(account, group, v, 0)
	f.Dispatch()
}

// Offer queues v for a later Dispatch. With maxQueued, v stands for its
// whole group: it is not queued when the group has a value queued or
// running, or the account has maxQueued.
func (f *Fair[T]) Offer(account, group string, v T, maxQueued int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.accounts, func(a *fairAccount[T]) bool { return a.id == account })
	if i < 0 {
		i = len(f.accounts)
		f.accounts = append(f.accounts, &fairAccount[T]{id: account})
	}
	a := f.accounts[i]
	j := slices.IndexFunc(a.groups, func(g *fairGroup[T]) bool { return g.id == group })
	if maxQueued > 0 {
		queued := a.inflight
		for _, g := range a.groups {
			queued += len(g.ready)
		}
		if j >= 0 || queued >= maxQueued {
			return
		}
	}
	if j < 0 {
		j = len(a.groups)
		a.groups = append(a.groups, &fairGroup[T]{id: group})
	}
	a.groups[j].ready = append(a.groups[j].ready, v)
}

// Done gives back the slot of a started value of account's group, forgets
// the group and account it leaves with nothing, and starts the next ones.
func (f *Fair[T]) Done(account, group string) {
	f.mu.Lock()
	f.busy--
	if i := slices.IndexFunc(f.accounts, func(a *fairAccount[T]) bool { return a.id == account }); i >= 0 {
		a := f.accounts[i]
		a.inflight--
		if j := slices.IndexFunc(a.groups, func(g *fairGroup[T]) bool { return g.id == group }); j >= 0 {
			g := a.groups[j]
			if g.inflight--; g.inflight == 0 && len(g.ready) == 0 {
				a.groups = slices.Delete(a.groups, j, j+1)
				if a.next > j {
					a.next--
				}
			}
		}
		if len(a.groups) == 0 && a.inflight == 0 {
			f.accounts = slices.Delete(f.accounts, i, i+1)
			if f.next > i {
				f.next--
			}
		}
	}
	f.mu.Unlock()
	f.Dispatch()
}

// Dispatch starts queued values while slots are free.
func (f *Fair[T]) Dispatch() {
	for {
		f.mu.Lock()
		v, ok := f.pick()
		f.mu.Unlock()
		if !ok {
			return
		}
		f.start(v)
	}
}

// pick takes the next value in fair order and counts its slot; the caller
// holds mu.
func (f *Fair[T]) pick() (v T, ok bool) {
	if f.busy >= f.slots || len(f.accounts) == 0 {
		return v, false
	}
	if f.next >= len(f.accounts) {
		f.next = 0
	}
	for i := range f.accounts {
		ai := (f.next + i) % len(f.accounts)
		a := f.accounts[ai]
		if a.inflight >= f.perAccount {
			continue
		}
		for j := range a.groups {
			gi := (a.next + j) % len(a.groups)
			g := a.groups[gi]
			if len(g.ready) == 0 || g.inflight >= f.perGroup {
				continue
			}
			v = g.ready[0]
			clear(g.ready[:1]) // what the value holds goes with it
			g.ready = g.ready[1:]
			g.inflight++
			a.inflight++
			f.busy++
			a.next, f.next = gi+1, ai+1
			return v, true
		}
	}
	return v, false
}
