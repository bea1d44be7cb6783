package batch

import "github.com/evs-dev/evs/internal/evs"

// The LocalQueue shares its slots between tenants (evs.Fair): a slot runs
// one delivery (for work, one domain group of a batch), round-robin across
// accounts and then across each account's batches, an account holding at
// most perAccount slots of a lane and a batch at most perBatch. Test-mode
// work has a lane of its own, so it never waits behind SMTP work.

// delivery is a message on its way to the Worker; fails counts the
// handlings of it that failed, lane is the lane it was pushed to.
type delivery struct {
	m     Message
	fails int
	lane  *lane
}

// lane is one pool of slots and the queues that feed it.
type lane struct{ fair *evs.Fair[delivery] }

func newLane(slots, perAccount, perBatch int, start func(delivery)) *lane {
	return &lane{evs.NewFair(slots, perAccount, perBatch, start)}
}

// push queues d and starts what the free slots allow.
func (l *lane) push(d delivery) {
	d.lane = l
	l.fair.Push(d.m.AccountID, d.m.BatchID, d)
}

// done gives back the slot of a handled delivery and starts the next ones.
func (l *lane) done(d delivery) { l.fair.Done(d.m.AccountID, d.m.BatchID) }
