// Package backoff computes capped exponential waits: one rule for every
// place that waits longer each time it is refused (a provider's pause on
// evs serve and on DynamoDB, greylisting retries, retries after a store
// fault), so they cannot drift apart.
package backoff

import (
	"math"
	"time"
)

// Double returns base doubled n times, at most most (most <= 0: no bound
// but the largest Duration). n <= 0 gives base.
func Double(base, most time.Duration, n int) time.Duration {
	if most <= 0 {
		most = math.MaxInt64
	}
	d := base
	for i := 0; i < n && d < most; i++ {
		if d > math.MaxInt64/2 {
			return most
		}
		d *= 2
	}
	return min(d, most)
}
