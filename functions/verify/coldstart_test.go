package main_test

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkColdStart measures each function's init as Lambda counts it:
// from the process's start to its first ask for an invocation, side by side
// with the smallest Go function (testdata/hello) in the same run. Each
// function does at init what it does on AWS (reads its settings, checks
// its tables and queue, here on moto), so the difference to hello is ours.
// Read the ratio, or the difference in ms, not the absolute figures.
func BenchmarkColdStart(b *testing.B) {
	w := newAWSWorld(b)
	for _, name := range []string{"verify/testdata/hello", "verify", "requests", "authorizer", "worker"} {
		bin := build(b, name)
		b.Run(filepath.Base(name), func(b *testing.B) {
			for b.Loop() {
				start := time.Now()
				rt, stop := w.run(b, bin)
				select {
				case <-rt.Ready():
				case <-time.After(30 * time.Second):
					b.Fatalf("%s: no init within 30 s", name)
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-init")
				stop()
			}
		})
	}
}
