package batch

import "github.com/evs-dev/evs/internal/evs"

// The LocalQueue shares its slots between tenants (evs.Fair): a slot runs
// one delivery (for work, one domain group of a batch), round-robin across
// accounts and then across each account's batches, an account holding at
// most perAccount slots of a lane and a batch at most perBatch. Test-mode
// work has a lane of its own, so it never waits behind SMTP work.

// A lane is one pool of slots and the queues that feed it.
type lane = evs.Fair[delivery]

// delivery is a message on its way to the Worker; fails counts the
// handlings of it that failed, lane is the lane it was pushed to.
type delivery struct {
	m     Message
	fails int
	lane  *lane
}
