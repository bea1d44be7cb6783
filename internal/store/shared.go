package store

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// refusal makes a constructor of one refusal: each call returns a new
// *evs.Error, which a caller may wrap or change.
func refusal(code, msg string) func() error {
	return func() error { return &evs.Error{Code: code, Message: msg} }
}

// The refusals both stores give, written once so a client reads the same
// code and message whichever deployment answers.
var (
	NoBatch          = refusal(evs.CodeNotFound, "No such request.") // unknown, another account's, or expired
	BatchExists      = refusal(evs.CodeInvalidState, "The request already exists.")
	NoSuchItem       = refusal(evs.CodeInvalidRequest, "A result is for an item the request does not have.")
	NoAccount        = refusal(evs.CodeNotFound, "No such account.")
	AccountExists    = refusal(evs.CodeInvalidState, "The account already exists.")
	AccountNameTaken = refusal(evs.CodeInvalidState, "The account name is taken.") // a name picks one account
	NoKey            = refusal(evs.CodeNotFound, "No such key.")
	KeyExists        = refusal(evs.CodeInvalidState, "The key already exists.")
	NoUpload         = refusal(evs.CodeNotFound, "No such upload (unknown, expired, or of another account).")
	NothingUploaded  = refusal(evs.CodeInvalidState, "Nothing was uploaded yet: PUT the list to the upload's URL first.")
	NoClaim          = refusal(evs.CodeNotFound, "No idempotency record in progress.")
	NoDelivery       = refusal(evs.CodeNotFound, "The request has no webhook delivery.") // none asked for, or not final yet
	DeliveryNotDue   = refusal(evs.CodeInvalidState, "The delivery is not due or was claimed by another worker.")
	DeliveryMovedOn  = refusal(evs.CodeInvalidState, "The delivery moved on since this attempt.")
	NoWebhookSecret  = refusal(evs.CodeNotFound, "The account has no webhook secret.")
	SecretChanged    = refusal(evs.CodeInvalidState, "The webhook secret changed meanwhile.")
)

// Unavailable is the error of a dependency fault worth a retry; cause is
// kept for the logs.
func Unavailable(cause error) error {
	return evs.Wrap(cause, evs.CodeUnavailable, "The store is unavailable; retry.")
}

// CheckAccount is what every store requires of an account it creates: a
// name an operator can type and read back in a log line or a shell, 1–128
// letters, digits, dots, underscores or hyphens, starting with a letter or
// digit.
func CheckAccount(a evs.Account) error {
	if !accountNameRe.MatchString(a.Name) {
		return evs.Errorf(evs.CodeInvalidRequest, "An account name is 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit; %q is not one.", a.Name)
	}
	return nil
}

var accountNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckNewBatch is what every store requires of a batch it creates: an ID
// and an account, and items numbered by distinct, non-negative Seqs.
func CheckNewBatch(b evs.Batch, items []evs.Item) error {
	if b.ID == "" || b.AccountID == "" {
		return evs.Errorf(evs.CodeInvalidRequest, "A request needs an ID and an account.")
	}
	seen := make(map[int]struct{}, len(items))
	for _, it := range items {
		if it.Seq < 0 {
			return evs.Errorf(evs.CodeInvalidRequest, "An item of the request has a negative sequence number.")
		}
		if _, dup := seen[it.Seq]; dup {
			return evs.Errorf(evs.CodeInvalidRequest, "Two items of the request have the same sequence number.")
		}
		seen[it.Seq] = struct{}{}
	}
	return nil
}

// MaxAgeMillis is the stored form of a batch's MaxAge: whole milliseconds
// (at least 1, so a bound never reads back as none), -1 for evs.NoReuse, 0
// for no bound.
func MaxAgeMillis(d time.Duration) int64 {
	if d <= 0 {
		return max(int64(d), -1)
	}
	return max(d.Milliseconds(), 1)
}

// MaxAgeOf reads MaxAgeMillis's form.
func MaxAgeOf(ms int64) time.Duration {
	if ms < 0 {
		return evs.NoReuse
	}
	return time.Duration(ms) * time.Millisecond
}

// EncodeResults checks that every result has a known reason and encodes
// each one's decision (AppendDecision), in the order given.
func EncodeResults(results []evs.Result) ([][]byte, error) {
	out := make([][]byte, len(results))
	for i, r := range results {
		if !r.Decision.Reason.Valid() {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "Unknown result reason %q.", r.Decision.Reason)
		}
		out[i] = AppendDecision(make([]byte, 0, 64), r.Decision)
	}
	return out, nil
}

// EncodeRetired is the stored form of a webhook secret's retired secrets:
// a JSON array, newest first; "" for none.
func EncodeRetired(rs []evs.RetiredSecret) (string, error) {
	if len(rs) == 0 {
		return "", nil
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return "", fmt.Errorf("store: encode retired webhook secrets: %w", err)
	}
	return string(b), nil
}

// DecodeRetired reads EncodeRetired's form. A record written before
// retired secrets were kept as a list has none there but one plain secret,
// legacy, retired at legacyAt.
func DecodeRetired(stored, legacy string, legacyAt time.Time) ([]evs.RetiredSecret, error) {
	if strings.HasPrefix(stored, "[") {
		var rs []evs.RetiredSecret
		if err := json.Unmarshal([]byte(stored), &rs); err != nil {
			return nil, fmt.Errorf("store: decode retired webhook secrets: %w", err)
		}
		return rs, nil
	}
	if legacy != "" {
		return []evs.RetiredSecret{{Secret: legacy, RetiredAt: legacyAt}}, nil
	}
	return nil, nil
}
