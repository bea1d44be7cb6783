package cache_test

import (
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/cache"
)

func TestLRU(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := cache.NewLRU[int](2)
	c.Put("a", 1, t0, time.Minute)
	c.Put("b", 2, t0, time.Minute)
	c.Get("a", t0)                 // a is now the most recently used
	c.Put("c", 3, t0, time.Minute) // evicts b
	c.Put("z", 9, t0, 0)           // a zero TTL keeps nothing
	for _, tc := range []struct {
		key  string
		at   time.Time
		want int
		ok   bool
	}{
		{"a", t0, 1, true},
		{"b", t0, 0, false},
		{"c", t0.Add(59 * time.Second), 3, true},
		{"z", t0, 0, false},
		{"c", t0.Add(time.Minute), 0, false},
	} {
		if got, ok := c.Get(tc.key, tc.at); got != tc.want || ok != tc.ok {
			t.Errorf("Get(%q, +%v) = %d, %v; want %d, %v", tc.key, tc.at.Sub(t0), got, ok, tc.want, tc.ok)
		}
	}
	if c.Len() != 1 || c.Cap() != 2 {
		t.Errorf("Len %d Cap %d after the expired entry was read, want 1 and 2", c.Len(), c.Cap())
	}
	var none *cache.LRU[int]
	none.Put("a", 1, t0, time.Minute)
	if _, ok := none.Get("a", t0); ok || none.Len() != 0 {
		t.Error("a nil cache kept something")
	}
}
