package evs

import "time"

// CallbackState is where the delivery of a batch's final event stands.
type CallbackState string

// Callback states. Pending holds from the moment the batch is final until a
// receiver answers 2xx (Delivered) or 410, or the retries run out (Failed).
const (
	CallbackPending   CallbackState = "pending"
	CallbackDelivered CallbackState = "delivered"
	CallbackFailed    CallbackState = "failed"
)

// Delivery is the webhook delivery of one batch's final event. It is written
// with the batch (when the batch has a callback URL) and becomes due when the
// batch becomes final, so the final state and the pending delivery are one
// write: a crash between them cannot lose the event.
type Delivery struct {
	AccountID string
	BatchID   string
	URL       string
	State     CallbackState
	Attempts  int // attempts started, including one in flight
	// LastStatus is the HTTP status of the last answered attempt; 0 when
	// none answered (timeout, refused connection) or none was made.
	LastStatus int
	// NextAt is when the next attempt is due. While an attempt is in flight
	// it is the end of that attempt's lease: a worker that dies mid-attempt
	// leaves a delivery that is due again once the lease has passed.
	NextAt time.Time
}

// WebhookSecret is an account's webhook signing secret, "whsec_" and the
// base64 of 32 random bytes, with the secrets it replaced: each still
// signs, beside the current one, until its RetiredAt plus 24 hours, so a
// second rotation within the day does not cut off the first one's secret.
type WebhookSecret struct {
	AccountID string
	Current   string
	// Retired holds the replaced secrets, the most recently retired first.
	Retired []RetiredSecret
}

// RetiredSecret is a secret a rotation replaced, and when.
type RetiredSecret struct {
	Secret    string    `json:"secret"`
	RetiredAt time.Time `json:"retiredAt"`
}
