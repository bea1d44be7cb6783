package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestUploadsContract is not parallel: ConcurrentCreations queues twelve
// creations on one account's create lock, which DynamoDB's store waits 5 s
// for at most; a moto server busy with the other tests makes each turn
// too slow.
func TestUploadsContract(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		runUploadsContract(t, func(t *testing.T, now func() time.Time) api.Uploads { return sqliteStore(t, now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runUploadsContract(t, func(t *testing.T, now func() time.Time) api.Uploads { return dynamoStore(t, now) })
	})
}

// runUploadsContract pins the cap on an account's open uploads (contract,
// section 16): an upload is open from its creation until DropUpload (a
// batch was made from it) or its expiry; at maxOpen open uploads a
// creation is refused with a *store.LimitError whose RetryAfter is the
// time until the oldest open upload expires (at least a second), and
// records nothing; other accounts are not affected; concurrent creations
// never take an account past maxOpen.
func runUploadsContract(t *testing.T, newUploads func(t *testing.T, now func() time.Time) api.Uploads) {
	ctx := context.Background()
	upload := func(acct string, at time.Time) evs.Upload {
		return evs.Upload{
			ID: uuid.NewString(), AccountID: acct, ContentType: "text/csv",
			CreatedAt: at, ExpiresAt: at.Add(api.UploadTTL), MaxBytes: evs.UploadMaxBytes,
		}
	}
	// refused fails t unless err is the open-upload cap's refusal with
	// the given Retry-After.
	refused := func(t *testing.T, err error, retry time.Duration, what string) {
		t.Helper()
		wantCode(t, err, evs.CodeRateLimited, what)
		var le *store.LimitError
		if !errors.As(err, &le) {
			t.Fatalf("%s: %v is not a *store.LimitError", what, err)
		}
		if got := le.RetryAfter(); got != retry {
			t.Errorf("%s: RetryAfter = %v, want %v", what, got, retry)
		}
	}

	t.Run("CapFreedByUseAndExpiry", func(t *testing.T) {
		const maxOpen = 3
		clk := testkit.NewClock(base)
		st := newUploads(t, clk.Now)
		var open []evs.Upload
		for i := range maxOpen {
			u := upload("acct-a", clk.Now())
			if _, err := st.CreateUpload(ctx, u, "http://evs.test", maxOpen); err != nil {
				t.Fatalf("CreateUpload %d under the cap: %v", i, err)
			}
			open = append(open, u)
			clk.Advance(time.Minute)
		}
		// Full: the oldest expires UploadTTL after base, 3 minutes have gone.
		extra := upload("acct-a", clk.Now())
		_, err := st.CreateUpload(ctx, extra, "http://evs.test", maxOpen)
		refused(t, err, api.UploadTTL-3*time.Minute, "CreateUpload at the cap")
		// The refused upload was not recorded.
		if _, _, _, err := st.OpenUpload(ctx, "acct-a", extra.ID); evs.ErrorCode(err) != evs.CodeNotFound {
			t.Fatalf("OpenUpload of a refused upload: %v, want not_found", err)
		}
		// Another account has places of its own; no cap means none.
		must(t, ignoreURL(st.CreateUpload(ctx, upload("acct-b", clk.Now()), "http://evs.test", maxOpen)), "CreateUpload of another account")
		must(t, ignoreURL(st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", 0)), "CreateUpload with no cap")
		// That made acct-a 4 open: the cap now refuses with 4.
		_, err = st.CreateUpload(ctx, extra, "http://evs.test", maxOpen)
		refused(t, err, api.UploadTTL-3*time.Minute, "CreateUpload past the cap")

		// A used upload frees its place: drop two, one more than needed.
		must(t, st.DropUpload(ctx, "acct-a", open[0].ID), "DropUpload")
		must(t, st.DropUpload(ctx, "acct-a", open[1].ID), "DropUpload")
		must(t, ignoreURL(st.CreateUpload(ctx, extra, "http://evs.test", maxOpen)), "CreateUpload after two were used")
		// Open now: open[2] (the oldest), the uncapped one, extra.
		_, err = st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)
		refused(t, err, api.UploadTTL-time.Minute, "CreateUpload at the cap again")
		// Dropping another account's upload ID frees nothing.
		must(t, st.DropUpload(ctx, "acct-b", open[2].ID), "DropUpload by another account")
		_, err = st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)
		refused(t, err, api.UploadTTL-time.Minute, "CreateUpload after another account's drop")

		// Half a second before the oldest expires, a retry is still a
		// second away: Retry-After is never below one.
		clk.Set(open[2].ExpiresAt.Add(-500 * time.Millisecond))
		_, err = st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)
		refused(t, err, time.Second, "CreateUpload just before the oldest expires")
		// Expired, it is no longer open.
		clk.Set(open[2].ExpiresAt)
		must(t, ignoreURL(st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)), "CreateUpload once the oldest expired")
		_, err = st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)
		wantCode(t, err, evs.CodeRateLimited, "CreateUpload at the cap after an expiry")
	})

	t.Run("ConcurrentCreations", func(t *testing.T) {
		const maxOpen, tries = 4, 12
		clk := testkit.NewClock(base)
		st := newUploads(t, clk.Now)
		// One place taken before the race: three are left.
		must(t, ignoreURL(st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)), "CreateUpload before the race")
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			passed, limited int
		)
		for range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := upload("acct-a", clk.Now())
				_, err := st.CreateUpload(ctx, u, "http://evs.test", maxOpen)
				mu.Lock()
				defer mu.Unlock()
				switch evs.ErrorCode(err) {
				case "":
					passed++
				case evs.CodeRateLimited:
					limited++
				default:
					t.Errorf("concurrent CreateUpload: %v", err)
				}
			}()
		}
		wg.Wait()
		if passed != maxOpen-1 || limited != tries-passed {
			t.Fatalf("concurrent creations: %d passed, %d limited; want %d and %d", passed, limited, maxOpen-1, tries-maxOpen+1)
		}
		_, err := st.CreateUpload(ctx, upload("acct-a", clk.Now()), "http://evs.test", maxOpen)
		wantCode(t, err, evs.CodeRateLimited, "CreateUpload after the race")
	})
}

// ignoreURL drops CreateUpload's URL.
func ignoreURL(_ string, err error) error { return err }
