package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/webhook"
)

// The published Standard Webhooks test vector (the scheme's reference
// libraries all check it).
func TestSignVector(t *testing.T) {
	got, err := webhook.Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}

func TestRotationSignsWithBoth(t *testing.T) {
	now := time.Now()
	old, cur := webhook.NewSecret(), webhook.NewSecret()
	s := evs.WebhookSecret{Current: cur, Retired: []evs.RetiredSecret{{Secret: old, RetiredAt: now.Add(-time.Hour)}}}
	body := []byte(`{"a":1}`)
	sig, err := webhook.Sign(webhook.Signers(s, now), "msg_x", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(sig)); n != 2 {
		t.Fatalf("%d signatures within the overlap, want 2", n)
	}
	for _, sec := range []string{old, cur} {
		wh, _ := standardwebhooks.NewWebhook(sec)
		h := http.Header{}
		h.Set("webhook-id", "msg_x")
		h.Set("webhook-timestamp", strconvUnix(now))
		h.Set("webhook-signature", sig)
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("a receiver with one of the two secrets cannot verify: %v", err)
		}
	}
	if n := len(webhook.Signers(s, now.Add(24*time.Hour))); n != 1 {
		t.Errorf("%d signers a day after the rotation, want 1", n)
	}
	if !strings.HasPrefix(cur, "whsec_") || len(cur) != len("whsec_")+44 {
		t.Errorf("secret %q is not whsec_ and 32 bytes of base64", cur[:8])
	}
}

func strconvUnix(t time.Time) string { return itoa(t.Unix()) }

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func TestRetryDelay(t *testing.T) {
	want := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour}
	for i, w := range want {
		if d, ok := webhook.RetryDelay(i+1, false); !ok || d != w {
			t.Errorf("after attempt %d: %v %v, want %v", i+1, d, ok, w)
		}
		if d, ok := webhook.RetryDelay(i+1, true); !ok || d != time.Second {
			t.Errorf("test mode after attempt %d: %v %v, want 1s", i+1, d, ok)
		}
	}
	if _, ok := webhook.RetryDelay(10, false); ok {
		t.Error("a retry after the tenth attempt")
	}
}

// receiver answers the statuses in order (then 200) and records requests.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b := make([]byte, req.ContentLength)
	_, _ = req.Body.Read(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	r.bodies = append(r.bodies, b)
	code := http.StatusOK
	if len(r.statuses) > 0 {
		code, r.statuses = r.statuses[0], r.statuses[1:]
	}
	w.WriteHeader(code)
}

type env struct {
	st    *sqlitestore.Store
	clock *testkit.Clock
	d     *webhook.Deliverer
}

func newEnv(t *testing.T, test bool, url string) (*env, evs.Batch) {
	t.Helper()
	clock := testkit.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	st, err := sqlitestore.Open(context.Background(), freshStoreDir(t), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	acct := evs.Account{ID: "acct1", Name: "a", Test: test, CreatedAt: clock.Now()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		t.Fatal(err)
	}
	b := evs.Batch{ID: "b1", AccountID: "acct1", Mode: evs.ModeQuick, State: evs.StateQueued, CreatedAt: clock.Now(),
		ExpiresAt: clock.Now().Add(time.Hour), Counters: evs.Counters{Total: 1}, CallbackURL: url}
	if err := st.CreateBatch(ctx, b, []evs.Item{{Seq: 0, Email: "a@x.example", Domain: "x.example"}}); err != nil {
		t.Fatal(err)
	}
	pol, _ := config.ParseEgress("127.0.0.0/8")
	return &env{st: st, clock: clock, d: &webhook.Deliverer{Store: st, Client: webhook.NewClient(pol), Now: clock.Now, Body: api.EventBody}}, b
}

func TestAttemptRetriesThenDelivers(t *testing.T) {
	rc := &receiver{statuses: []int{500, 503}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	e, b := newEnv(t, false, srv.URL+"/hook")
	ctx := context.Background()
	if _, did, err := e.d.Attempt(ctx, b.AccountID, b.ID); err != nil || did {
		t.Fatalf("attempt before the batch is final: %v %v", did, err)
	}
	at := e.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	// The contract's event (section 10), byte for byte: every attempt
	// sends these bytes, whatever the clock says by then.
	want := `{"type":"batch.cancelled","timestamp":"` + at + `","data":{"request":{"id":"b1","mode":"quick","state":"cancelled",` +
		`"createdAt":"` + at + `","completedAt":"` + at + `"},"counters":{"total":1,"duplicates":0,"processed":0,` +
		`"deliverable":0,"undeliverable":0,"risky":0,"unknown":0}}}`
	if _, err := e.st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	del, did, err := e.d.Attempt(ctx, b.AccountID, b.ID)
	if err != nil || !did || del.State != evs.CallbackPending || del.Attempts != 1 || del.LastStatus != 500 {
		t.Fatalf("first attempt: %+v %v %v", del, did, err)
	}
	if !del.NextAt.Equal(e.clock.Now().Add(5 * time.Second)) {
		t.Errorf("next attempt at %v, want 5 s later", del.NextAt)
	}
	if _, did, _ := e.d.Attempt(ctx, b.AccountID, b.ID); did {
		t.Fatal("an attempt before the retry is due")
	}
	e.clock.Advance(5 * time.Second)
	if del, _, _ = e.d.Attempt(ctx, b.AccountID, b.ID); del.Attempts != 2 || del.LastStatus != 503 {
		t.Fatalf("second attempt: %+v", del)
	}
	e.clock.Advance(30 * time.Second)
	if del, _, _ = e.d.Attempt(ctx, b.AccountID, b.ID); del.State != evs.CallbackDelivered || del.Attempts != 3 || del.LastStatus != 200 {
		t.Fatalf("third attempt: %+v", del)
	}
	stored, err := e.st.Delivery(ctx, b.AccountID, b.ID)
	if err != nil || stored.State != evs.CallbackDelivered || stored.Attempts != 3 {
		t.Fatalf("stored delivery %+v %v", stored, err)
	}
	sec, err := e.st.WebhookSecret(ctx, b.AccountID)
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhook(sec.Current)
	ids := map[string]bool{}
	for i, r := range rc.got {
		ids[r.Header.Get("webhook-id")] = true
		if err := wh.VerifyIgnoringTimestamp(rc.bodies[i], r.Header); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
		if string(rc.bodies[i]) != want {
			t.Errorf("attempt %d body\n%s\nwant\n%s", i+1, rc.bodies[i], want)
		}
	}
	if len(ids) != 1 || len(rc.got) != 3 {
		t.Errorf("%d attempts with %d webhook-ids, want 3 with 1", len(rc.got), len(ids))
	}
}

func TestGoneStopsAndRedirectsAreNotFollowed(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		state  evs.CallbackState
	}{
		{"gone", http.StatusGone, evs.CallbackFailed},
		{"redirect", http.StatusFound, evs.CallbackPending},
	} {
		t.Run(c.name, func(t *testing.T) {
			hit := 0
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit++ }))
			defer other.Close()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", other.URL)
				w.WriteHeader(c.status)
			}))
			defer srv.Close()
			e, b := newEnv(t, true, srv.URL)
			ctx := context.Background()
			if _, err := e.st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateFailed, "x", e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			del, _, err := e.d.Attempt(ctx, b.AccountID, b.ID)
			if err != nil || del.State != c.state || del.LastStatus != c.status {
				t.Fatalf("%+v %v", del, err)
			}
			if hit != 0 {
				t.Error("the redirect was followed")
			}
			if c.state == evs.CallbackPending && !del.NextAt.Equal(e.clock.Now().Add(time.Second)) {
				t.Errorf("test-mode retry at %v, want 1 s later", del.NextAt)
			}
		})
	}
}

func TestEgressRefusedIsRetriedNotDialled(t *testing.T) {
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	defer srv.Close()
	e, b := newEnv(t, false, srv.URL)
	e.d.Client = webhook.NewClient(nil) // loopback not allowed
	ctx := context.Background()
	if _, err := e.st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	del, did, err := e.d.Attempt(ctx, b.AccountID, b.ID)
	if err != nil || !did || del.LastStatus != 0 || del.State != evs.CallbackPending {
		t.Fatalf("%+v %v %v", del, did, err)
	}
	if hit {
		t.Error("a refused address was dialled")
	}
}

func TestLastAttemptFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer srv.Close()
	e, b := newEnv(t, true, srv.URL)
	ctx := context.Background()
	if _, err := e.st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	var del evs.Delivery
	for i := 0; i < 12; i++ {
		del, _, _ = e.d.Attempt(ctx, b.AccountID, b.ID)
		e.clock.Advance(time.Second)
	}
	// The first attempt, then one per retry.
	if del.State != evs.CallbackFailed || del.Attempts != len(webhook.Schedule)+1 {
		t.Fatalf("after the schedule: %+v", del)
	}
}

// secretStore is what Secret and Rotate need of a store.
type secretStore interface {
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
	PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
}

// eachStore runs f on a fresh SQLite store and a fresh DynamoDB store
// (moto).
func eachStore(t *testing.T, f func(t *testing.T, st secretStore)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlitestore.Open(t.Context(), t.TempDir(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
	t.Run("dynamodb", func(t *testing.T) {
		c := testkit.DynamoDB(t)
		tables := dynamostore.Tables{
			Keys: testkit.UniqueName(t, "keys"), Batches: testkit.UniqueName(t, "batches"),
			Results: testkit.UniqueName(t, "results"), Idempotency: testkit.UniqueName(t, "idem"),
		}
		if err := dynamostore.CreateTables(t.Context(), c, tables); err != nil {
			t.Fatalf("create tables: %v", err)
		}
		f(t, dynamostore.New(dynamostore.Config{Client: c, Tables: tables, Now: time.Now}))
	})
}

// TestRotateTwiceKeepsTheDaysSecrets: rotating twice within a day keeps
// both replaced secrets signing, each for a day from its own rotation (the
// CLI promises 24 h; contract, section 10).
func TestRotateTwiceKeepsTheDaysSecrets(t *testing.T) {
	eachStore(t, func(t *testing.T, st secretStore) {
		ctx := t.Context()
		base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
		first, err := webhook.Secret(ctx, st, "acct-1")
		if err != nil {
			t.Fatal(err)
		}
		second, err := webhook.Rotate(ctx, st, "acct-1", base)
		if err != nil {
			t.Fatal(err)
		}
		third, err := webhook.Rotate(ctx, st, "acct-1", base.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.WebhookSecret(ctx, "acct-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Current != third.Current {
			t.Fatal("the current secret is not the last rotation's")
		}
		body := []byte(`{"a":1}`)
		verifies := func(at time.Time, secret string) bool {
			sig, err := webhook.Sign(webhook.Signers(got, at), "msg_x", at, body)
			if err != nil {
				t.Fatal(err)
			}
			wh, _ := standardwebhooks.NewWebhook(secret)
			h := http.Header{}
			h.Set("webhook-id", "msg_x")
			h.Set("webhook-timestamp", strconvUnix(at))
			h.Set("webhook-signature", sig)
			// Verify checks the timestamp against the real clock: verify
			// as of the signing time instead.
			return wh.VerifyIgnoringTimestamp(body, h) == nil
		}
		for _, c := range []struct {
			at                   time.Time
			first, second, third bool
		}{
			{base.Add(2 * time.Hour), true, true, true},
			{base.Add(24*time.Hour + time.Minute), false, true, true},
			{base.Add(25*time.Hour + time.Minute), false, false, true},
		} {
			if f, s, th := verifies(c.at, first.Current), verifies(c.at, second.Current), verifies(c.at, third.Current); f != c.first || s != c.second || th != c.third {
				t.Errorf("%v after the first rotation a receiver verifies with the first %v, second %v, third %v; want %v %v %v",
					c.at.Sub(base), f, s, th, c.first, c.second, c.third)
			}
		}
		// A rotation a day later keeps only the secret it replaces.
		fourth, err := webhook.Rotate(ctx, st, "acct-1", base.Add(25*time.Hour+time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(fourth.Retired) != 1 || fourth.Retired[0].Secret != third.Current {
			t.Errorf("a rotation a day later keeps %d retired secrets, want the one it replaced", len(fourth.Retired))
		}
	})
}

// TestConcurrentRotationsLoseNoSecret: concurrent rotations are serialised:
// each succeeds, and every secret any of them returned still signs.
func TestConcurrentRotationsLoseNoSecret(t *testing.T) {
	eachStore(t, func(t *testing.T, st secretStore) {
		ctx := t.Context()
		now := time.Now()
		first, err := webhook.Secret(ctx, st, "acct-1")
		if err != nil {
			t.Fatal(err)
		}
		const n = 6
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			news []string
			errs []error
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := webhook.Rotate(ctx, st, "acct-1", now)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				news = append(news, s.Current)
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d of %d concurrent rotations failed, first: %v", len(errs), n, errs[0])
		}
		got, err := st.WebhookSecret(ctx, "acct-1")
		if err != nil {
			t.Fatal(err)
		}
		signs := map[string]bool{}
		for _, s := range webhook.Signers(got, now.Add(time.Minute)) {
			signs[s] = true
		}
		for i, s := range append(news, first.Current) {
			if !signs[s] {
				t.Errorf("secret %d of %d (returned by a rotation, or the first) no longer signs", i+1, n+1)
			}
		}
		if len(signs) != n+1 {
			t.Errorf("%d secrets sign, want %d", len(signs), n+1)
		}
	})
}

// TestRotationBound: past MaxRetired rotations in a day a rotation is
// refused rather than dropping a secret promised a day.
func TestRotationBound(t *testing.T) {
	st, err := sqlitestore.Open(t.Context(), t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i := range webhook.MaxRetired {
		if _, err := webhook.Rotate(t.Context(), st, "acct-1", now); err != nil {
			t.Fatalf("rotation %d: %v", i+1, err)
		}
	}
	if _, err := webhook.Rotate(t.Context(), st, "acct-1", now); evs.ErrorCode(err) != evs.CodeRateLimited {
		t.Fatalf("rotation %d within a day: %v, want rate_limited", webhook.MaxRetired+1, err)
	}
	if _, err := webhook.Rotate(t.Context(), st, "acct-1", now.Add(webhook.RotationOverlap)); err != nil {
		t.Fatalf("a rotation a day later: %v", err)
	}
}

func TestMain(m *testing.M) { os.Exit(testkit.MotoMain(m)) }

// freshStoreDir is a new directory holding a fresh SQLite store's files.
func freshStoreDir(t testing.TB) string {
	return testkit.FreshDir(t, "sqlite", func(d string) (io.Closer, error) {
		return sqlitestore.Open(context.Background(), d, time.Now)
	})
}
