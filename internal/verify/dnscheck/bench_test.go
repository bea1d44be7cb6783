package dnscheck

import (
	"context"
	"testing"

	"github.com/evs-dev/evs/internal/testkit"
)

func benchResolver(b *testing.B, cacheSize int) *Resolver {
	srv := testkit.StartDNS(b)
	srv.AddRecord("corp.example. 300 IN MX 10 mx1.corp.example.")
	srv.AddRecord("corp.example. 300 IN MX 20 mx2.corp.example.")
	srv.AddRecord("aonly.example. 300 IN A 192.0.2.1")
	return newResolver(b, Config{Servers: []string{srv.Addr}, CacheSize: cacheSize})
}

func BenchmarkLookupMailCached(b *testing.B) {
	r := benchResolver(b, 0)
	ctx := context.Background()
	if res := r.LookupMail(ctx, "corp.example"); res.Outcome != OutcomeOK {
		b.Fatalf("%+v", res)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.LookupMail(ctx, "corp.example")
	}
}

func BenchmarkLookupMailCachedParallel(b *testing.B) {
	r := benchResolver(b, 0)
	ctx := context.Background()
	r.LookupMail(ctx, "corp.example")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.LookupMail(ctx, "corp.example")
		}
	})
}

// One MX query over loopback UDP per lookup.
func BenchmarkLookupMailUncached(b *testing.B) {
	r := benchResolver(b, -1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := r.LookupMail(ctx, "corp.example"); res.Outcome != OutcomeOK {
			b.Fatalf("%+v", res)
		}
	}
}

// An MX query, then A and AAAA in parallel.
func BenchmarkLookupMailImplicitUncached(b *testing.B) {
	r := benchResolver(b, -1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := r.LookupMail(ctx, "aonly.example"); !res.Implicit {
			b.Fatalf("%+v", res)
		}
	}
}
