package address

import (
	"net/mail"
	"testing"
)

// sink keeps the compiler from discarding the benchmarked calls.
var sink Address

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := Parse("john.doe+newsletter@mail.example.com")
		if err != nil {
			b.Fatal(err)
		}
		sink = a
	}
}

func BenchmarkParseUpperDomain(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := Parse("John.Doe@Mail.Example.COM")
		if err != nil {
			b.Fatal(err)
		}
		sink = a
	}
}

func BenchmarkParseIDN(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := Parse("user@bücher.example")
		if err != nil {
			b.Fatal(err)
		}
		sink = a
	}
}

func BenchmarkParseReject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("john..doe@mail.example.com"); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkNetMailParseAddress is the reference point: the standard
// library's RFC 5322 parser on the same address as BenchmarkParse.
func BenchmarkNetMailParseAddress(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		a, err := mail.ParseAddress("john.doe+newsletter@mail.example.com")
		if err != nil {
			b.Fatal(err)
		}
		sink.Local = a.Address
	}
}
