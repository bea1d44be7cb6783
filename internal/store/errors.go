package store

import "github.com/evs-dev/evs/internal/evs"

// The errors both stores return for the same refusal, written once so a
// client reads the same code and message whichever deployment answers.
// Each call returns a new *evs.Error: callers may wrap or change it.

// NoBatch is the error of a batch that does not exist, is another
// account's, or has expired.
func NoBatch() error { return evs.Errorf(evs.CodeNotFound, "No such request.") }

// BatchExists is the error of a creation whose batch ID is taken.
func BatchExists() error { return evs.Errorf(evs.CodeInvalidState, "The request already exists.") }

// NoAccount is the error of an unknown account.
func NoAccount() error { return evs.Errorf(evs.CodeNotFound, "No such account.") }

// AccountExists is the error of a creation whose account ID is taken.
func AccountExists() error { return evs.Errorf(evs.CodeInvalidState, "The account already exists.") }

// AccountNameTaken is the error of a creation whose account name another
// account has: a name picks one account (`evs keys create --account`).
func AccountNameTaken() error {
	return evs.Errorf(evs.CodeInvalidState, "The account name is taken.")
}

// NoKey is the error of an unknown API key.
func NoKey() error { return evs.Errorf(evs.CodeNotFound, "No such key.") }

// KeyExists is the error of a creation whose key hash or ID is taken.
func KeyExists() error { return evs.Errorf(evs.CodeInvalidState, "The key already exists.") }

// NoUpload is the error of an upload that is unknown, expired or another
// account's.
func NoUpload() error {
	return evs.Errorf(evs.CodeNotFound, "No such upload (unknown, expired, or of another account).")
}

// NoSuchItem is the error of a result whose Seq is none of its batch's items.
func NoSuchItem() error {
	return evs.Errorf(evs.CodeInvalidRequest, "A result is for an item the request does not have.")
}

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

// EncodeResults checks that every result has a known reason and encodes
// each one's decision (EncodeDecision), in the order given.
func EncodeResults(results []evs.Result) ([][]byte, error) {
	out := make([][]byte, len(results))
	for i, r := range results {
		if !r.Decision.Reason.Valid() {
			return nil, evs.Errorf(evs.CodeInvalidRequest, "Unknown result reason %q.", r.Decision.Reason)
		}
		b, err := EncodeDecision(r.Decision)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
