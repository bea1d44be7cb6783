package politeness

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// memory is the State of one process: evs serve opens every session
// itself. RCPT commands are paced by a token bucket per key, which refills
// smoothly, so that no sliding window sees more than the limit.
type memory struct {
	now  func() time.Time
	mu   sync.Mutex
	keys map[string]*memKey
}

type memKey struct {
	sessions    int
	freed       chan struct{} // closed and replaced when a session ends
	rcpt        *rate.Limiter
	pausedUntil time.Time
	level       int
}

// key returns key's entry, made on first use; m.mu is held.
func (m *memory) key(key string) *memKey {
	k := m.keys[key]
	if k == nil {
		k = &memKey{freed: make(chan struct{})}
		m.keys[key] = k
	}
	return k
}

// forget drops an entry that holds nothing worth keeping, so the map
// stays as small as the set of providers being probed; m.mu is held.
func (m *memory) forget(key string, k *memKey) {
	now := m.now()
	if k.sessions == 0 && k.level == 0 && (k.rcpt == nil || k.rcpt.TokensAt(now) >= float64(k.rcpt.Burst())) {
		delete(m.keys, key)
	}
}

// freed returns a channel closed when a session of key ends.
func (m *memory) freed(key string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.key(key).freed
}

func (m *memory) AcquireSlot(_ context.Context, key string, slots int, _ time.Duration) (func(), bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key(key)
	if k.sessions >= slots {
		return nil, false, nil
	}
	k.sessions++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		k.sessions--
		close(k.freed)
		k.freed = make(chan struct{})
		m.forget(key, k)
	}, true, nil
}

func (m *memory) ReserveRcpts(_ context.Context, key string, least, most, limit int, window time.Duration, now time.Time) (int, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key(key)
	if k.rcpt == nil {
		k.rcpt = rate.NewLimiter(rate.Limit(float64(limit)/window.Seconds()), limit)
	}
	if most > k.rcpt.Burst() { // more than a whole window's budget
		return 0, now.Add(window), nil
	}
	got := min(most, int(k.rcpt.TokensAt(now)))
	if got >= least {
		k.rcpt.ReserveN(now, got)
	} else {
		got = 0
	}
	r := k.rcpt.ReserveN(now, most) // when most fits, after got
	d := r.DelayFrom(now)
	r.CancelAt(now)
	return got, now.Add(d), nil
}

func (m *memory) PauseState(_ context.Context, key string) (time.Time, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key(key)
	return k.pausedUntil, k.level, nil
}

func (m *memory) Pause(_ context.Context, key string, now time.Time, length func(level int) time.Duration) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key(key)
	if !k.pausedUntil.After(now) {
		k.pausedUntil, k.level = now.Add(length(k.level)), k.level+1
	}
	return k.pausedUntil, nil
}

func (m *memory) ClearPause(_ context.Context, key string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.key(key); !k.pausedUntil.After(now) {
		k.level = 0
		m.forget(key, k)
	}
	return nil
}

// NewMemoryState returns a State in this process's memory, on clock now
// (nil: time.Now), as a Gate with no State uses.
func NewMemoryState(now func() time.Time) State {
	if now == nil {
		now = time.Now
	}
	return &memory{now: now, keys: map[string]*memKey{}}
}
