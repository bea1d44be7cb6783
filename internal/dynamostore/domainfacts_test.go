package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// The engine takes it as its domain facts.
var _ verify.DomainFacts = (*dynamostore.DomainFacts)(nil)

// TestDomainFactsSharedByInstances: what one instance's probe learned is
// read by another from the domain's item, then from its own memory until
// the item's expiry; only conclusive answers are written, with the TTL
// attribute.
func TestDomainFactsSharedByInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testkit.NewClock(t0)
	var gets atomic.Int64
	c := testkit.DynamoDB(t, inject(hook{before: func(in any) error {
		if _, ok := in.(*dynamodb.GetItemInput); ok {
			gets.Add(1)
		}
		return nil
	}}))
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clock.Now})
	instance := func(counts map[string]int) *dynamostore.DomainFacts {
		return st.DomainFacts(dynamostore.DomainFactsConfig{
			Memory: cache.NewFacts(cache.FactsConfig{TTL: time.Hour, Now: clock.Now}),
			Count:  func(r string) { counts[r]++ },
		})
	}
	a := instance(map[string]int{})
	a.KeepAcceptAll(ctx, "all.example", evs.SMTPAccepted)
	a.KeepAcceptAll(ctx, "strict.example", evs.SMTPRejected)
	a.KeepAcceptAll(ctx, "grey.example", evs.SMTPGreylisted) // says nothing about the domain

	counts := map[string]int{}
	b := instance(counts)
	clock.Advance(10 * time.Minute)
	for _, tc := range []struct {
		domain, want string
		ok           bool
	}{
		{"all.example", evs.SMTPAccepted, true},
		{"strict.example", evs.SMTPRejected, true},
		{"grey.example", "", false},
		{"new.example", "", false},
	} {
		for range 2 { // the second read comes from b's memory when found
			if got, ok := b.AcceptAll(ctx, tc.domain); got != tc.want || ok != tc.ok {
				t.Fatalf("AcceptAll(%s) = %q, %v; want %q, %v", tc.domain, got, ok, tc.want, tc.ok)
			}
		}
	}
	if gets.Load() != 6 || counts["hit"] != 4 || counts["miss"] != 4 {
		t.Fatalf("%d item reads, counted %v; want 6 reads (a known domain is read once), 4 hits, 4 misses", gets.Load(), counts)
	}

	// The item: the answer, its expiry and the TTL attribute, on a
	// partition of its own.
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables.Results), Key: map[string]types.AttributeValue{
		"batchId": &types.AttributeValueMemberS{Value: "~domain#all.example"}, "seq": &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	exp := t0.Add(time.Hour)
	for name, want := range map[string]types.AttributeValue{
		"catchAll":    &types.AttributeValueMemberS{Value: "accepted"},
		"expiresAtMs": &types.AttributeValueMemberN{Value: itoa(exp.UnixMilli())},
		"expiresAt":   &types.AttributeValueMemberN{Value: itoa(exp.Unix())},
	} {
		if got := out.Item[name]; !sameAV(got, want) {
			t.Errorf("item %s = %#v, want %#v", name, got, want)
		}
	}
	if len(out.Item) != 5 {
		t.Errorf("item holds %d attributes, want 5: %v", len(out.Item), out.Item)
	}

	// Past the TTL neither tier answers, though the item may linger until
	// DynamoDB's TTL deletes it.
	clock.Advance(50 * time.Minute)
	for _, f := range []*dynamostore.DomainFacts{b, instance(map[string]int{})} {
		if r, ok := f.AcceptAll(ctx, "all.example"); ok {
			t.Fatalf("expired answer read: %q", r)
		}
	}
}

// TestDomainFactsBothFacts: the accept-all answer and the greylisting
// delay of a domain share its item, and writing one, in either order and
// from either instance, leaves the other as it was; a new instance reads
// both, each until its own expiry.
func TestDomainFactsBothFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testkit.NewClock(t0)
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clock.Now})
	instance := func() *dynamostore.DomainFacts {
		return st.DomainFacts(dynamostore.DomainFactsConfig{Memory: cache.NewFacts(cache.FactsConfig{TTL: time.Hour, Now: clock.Now})})
	}
	for _, tc := range []struct {
		name      string
		greyFirst bool
	}{{"answer then delay", false}, {"delay then answer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			domain := testkit.UniqueName(t, "d") + ".example"
			a, b := instance(), instance()
			keep := []func(){
				func() { a.KeepAcceptAll(ctx, domain, evs.SMTPRejected) },
				func() { b.KeepGreyDelay(ctx, domain, 7*time.Minute) },
			}
			if tc.greyFirst {
				keep[0], keep[1] = keep[1], keep[0]
			}
			start := clock.Now()
			keep[0]()
			clock.Advance(20 * time.Minute)
			keep[1]()
			first, second := start.Add(time.Hour), start.Add(80*time.Minute) // each fact's expiry

			fresh := instance()
			if r, ok := fresh.AcceptAll(ctx, domain); !ok || r != evs.SMTPRejected {
				t.Fatalf("AcceptAll = %q, %v; want rejected", r, ok)
			}
			if d, ok := fresh.GreyDelay(ctx, domain); !ok || d != 7*time.Minute {
				t.Fatalf("GreyDelay = %v, %v; want 7m", d, ok)
			}

			// Each fact keeps its own expiry; the TTL attribute is the later.
			out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables.Results), Key: map[string]types.AttributeValue{
				"batchId": &types.AttributeValueMemberS{Value: "~domain#" + domain}, "seq": &types.AttributeValueMemberN{Value: "0"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			answerExp, greyExp := first, second
			if tc.greyFirst {
				answerExp, greyExp = second, first
			}
			for name, want := range map[string]types.AttributeValue{
				"catchAll":        &types.AttributeValueMemberS{Value: "rejected"},
				"expiresAtMs":     &types.AttributeValueMemberN{Value: itoa(answerExp.UnixMilli())},
				"greyDelayMs":     &types.AttributeValueMemberN{Value: itoa((7 * time.Minute).Milliseconds())},
				"greyExpiresAtMs": &types.AttributeValueMemberN{Value: itoa(greyExp.UnixMilli())},
				"expiresAt":       &types.AttributeValueMemberN{Value: itoa(second.Unix())},
			} {
				if got := out.Item[name]; !sameAV(got, want) {
					t.Errorf("item %s = %#v, want %#v", name, got, want)
				}
			}

			// Past the first expiry only the later fact is read.
			clock.Advance(time.Hour - 20*time.Minute)
			late := instance()
			_, answered := late.AcceptAll(ctx, domain)
			_, delayed := late.GreyDelay(ctx, domain)
			if answered != tc.greyFirst || delayed == tc.greyFirst {
				t.Fatalf("past the first expiry: answer read %v, delay read %v; want only the later fact", answered, delayed)
			}
		})
	}
}

// TestDomainFactsFault: a DynamoDB fault reads as "not known" and is
// reported, never failing the caller.
func TestDomainFactsFault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t, inject(hook{before: func(any) error { return errFault }}))
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: dynamostore.Tables{Results: "r"}, Now: clock})
	var faults []error
	f := st.DomainFacts(dynamostore.DomainFactsConfig{Fault: func(err error) { faults = append(faults, err) }})
	f.KeepAcceptAll(ctx, "all.example", evs.SMTPAccepted)
	if r, ok := f.AcceptAll(ctx, "other.example"); ok {
		t.Fatalf("read %q through a fault", r)
	}
	// What this instance learned stays in its memory despite the fault.
	if r, ok := f.AcceptAll(ctx, "all.example"); !ok || r != evs.SMTPAccepted {
		t.Fatalf("memory lost the answer: %q %v", r, ok)
	}
	if len(faults) != 2 || !errors.Is(faults[0], errFault) || evs.ErrorCode(faults[1]) != evs.CodeUnavailable {
		t.Fatalf("faults %v: want the write's and the read's, unavailable, wrapping the cause", faults)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func sameAV(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberN:
		y, ok := b.(*types.AttributeValueMemberN)
		return ok && x.Value == y.Value
	}
	return false
}
