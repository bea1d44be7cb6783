package politeness_test

import (
	"math"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/politeness"
)

func TestDouble(t *testing.T) {
	tests := []struct {
		base, most time.Duration
		n          int
		want       time.Duration
	}{
		{time.Minute, 15 * time.Minute, 0, time.Minute},
		{time.Minute, 15 * time.Minute, -3, time.Minute},
		{time.Minute, 15 * time.Minute, 1, 2 * time.Minute},
		{time.Minute, 15 * time.Minute, 3, 8 * time.Minute},
		{time.Minute, 15 * time.Minute, 4, 15 * time.Minute},
		{time.Minute, 15 * time.Minute, 1000, 15 * time.Minute},
		{5 * time.Minute, 0, 2, 20 * time.Minute},
		{5 * time.Minute, 0, 200, math.MaxInt64},
		{20 * time.Minute, 15 * time.Minute, 0, 15 * time.Minute},
	}
	for _, tt := range tests {
		if got := politeness.Double(tt.base, tt.most, tt.n); got != tt.want {
			t.Errorf("Double(%v, %v, %d) = %v, want %v", tt.base, tt.most, tt.n, got, tt.want)
		}
	}
}
