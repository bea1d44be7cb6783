package testkit

import "sync"

// BatchLog records the batches a store really created, for tests that
// count a call's effects rather than its answers (a 5xx whose batch was
// made anyway). It is safe for concurrent use.
type BatchLog struct {
	mu  sync.Mutex
	ids []string
}

// Created records id when err, the creation's outcome, is nil, and
// returns err.
func (l *BatchLog) Created(id string, err error) error {
	if err == nil {
		l.mu.Lock()
		l.ids = append(l.ids, id)
		l.mu.Unlock()
	}
	return err
}

// IDs returns the created batches' IDs in creation order.
func (l *BatchLog) IDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}
