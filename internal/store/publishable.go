package store

import "time"

// CallCharge is what one publishable key's call of /v1/verify charges in
// one conditional write, where a store can (DynamoDB): a call to the key's
// minute, and N addresses to the account's address quota and to its
// publishable keys' share of it. A call over any of them charges nothing.
type CallCharge struct {
	AccountID, KeyID string
	// Minute names the key's minute ("2006-01-02T15:04"); PerKey is the
	// key's calls allowed in it.
	Minute string
	PerKey int
	// Period names the quota's period; Limit and Share are its addresses
	// and the publishable keys' part of them (Limit 0: no quota, nothing
	// charged but the call).
	Period       string
	N            int
	Limit, Share int
	// Expires is when the counters may be forgotten.
	Expires time.Time
}

// Which limit refused a CallCharge.
const (
	RefusedKey   = "key"
	RefusedShare = "share"
	RefusedQuota = "quota"
)
