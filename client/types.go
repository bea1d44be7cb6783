package client

// The contract's replies (api/openapi.yaml), as the client reads them.

// VerifyResult is the reply of POST /v1/verify.
type VerifyResult struct {
	Status    string   `json:"status"` // deliverable, undeliverable, risky or unknown
	RequestID string   `json:"requestId"`
	Decision  Decision `json:"decision"`
}

// Decision is the verdict on one address and its evidence.
type Decision struct {
	Email      string  `json:"email"`
	Normalized string  `json:"normalized"`
	Reason     string  `json:"reason"` // one code of the contract's reason table
	Score      int     `json:"score"`
	Mode       string  `json:"mode"`
	Suggestion *string `json:"suggestion"`
	Flags      Flags   `json:"flags"`
	Checks     Checks  `json:"checks"`
	CheckedAt  string  `json:"checkedAt"`
	DurationMs int     `json:"durationMs"`
	TestMode   bool    `json:"testMode,omitempty"`
	Cached     bool    `json:"cached"`
}

// Flags are the address's traits.
type Flags struct {
	Disposable bool `json:"disposable"`
	Role       bool `json:"role"`
	Free       bool `json:"free"`
	// AcceptAll is nil when the accept-all probe was inconclusive.
	AcceptAll *bool `json:"acceptAll"`
	SMTPUTF8  bool  `json:"smtputf8,omitempty"`
}

// Checks is the evidence of each check.
type Checks struct {
	Syntax struct {
		Valid bool   `json:"valid"`
		Error string `json:"error,omitempty"`
	} `json:"syntax"`
	DNS struct {
		Result     string   `json:"result"`
		MX         []string `json:"mx"`
		ImplicitMX bool     `json:"implicitMx"`
		Rcode      string   `json:"rcode,omitempty"`
		Error      string   `json:"error,omitempty"`
	} `json:"dns"`
	SMTP struct {
		Result       string  `json:"result"`
		Host         string  `json:"host,omitempty"`
		Provider     *string `json:"provider"`
		Code         int     `json:"code,omitempty"`
		EnhancedCode string  `json:"enhancedCode,omitempty"`
		Message      string  `json:"message,omitempty"`
		TLS          bool    `json:"tls"`
		CatchAll     string  `json:"catchAll,omitempty"`
		Detail       string  `json:"detail,omitempty"`
	} `json:"smtp"`
	// History is the outcome the account reported for the address that
	// decided the verdict, or the latest; nil when it reported none.
	History *History `json:"history,omitempty"`
}

// History is the evidence of reported outcomes (POST /v1/outcomes).
type History struct {
	Result     string `json:"result"` // known_bounce, delivered or noted
	Outcome    string `json:"outcome"`
	At         string `json:"at"`
	BounceType string `json:"bounceType,omitempty"`
	SMTPReply  string `json:"smtpReply,omitempty"`
	Detail     string `json:"detail"`
}

// Batch is a batch request and its counters (the contract's
// BatchEnvelope).
type Batch struct {
	Request   BatchRequest `json:"request"`
	Counters  Counters     `json:"counters"`
	RequestID string       `json:"requestId,omitempty"`
	Replayed  bool         `json:"replayed,omitempty"`
}

// Final reports whether the batch will change no more.
func (b Batch) Final() bool {
	switch b.Request.State {
	case "completed", "cancelled", "failed":
		return true
	}
	return false
}

// BatchRequest is a batch's own fields.
type BatchRequest struct {
	ID          string    `json:"id"`
	Mode        string    `json:"mode"`
	State       string    `json:"state"` // queued, running, completed, cancelled or failed
	Error       string    `json:"error,omitempty"`
	CreatedAt   string    `json:"createdAt"`
	CompletedAt string    `json:"completedAt,omitempty"`
	CallbackURL string    `json:"callbackUrl,omitempty"`
	Callback    *Callback `json:"callback,omitempty"`
	Name        string    `json:"name,omitempty"`
}

// Callback is the delivery of a batch's final event to its callbackUrl.
type Callback struct {
	State    string `json:"state"` // pending, delivered or failed
	Attempts int    `json:"attempts"`
	// LastStatus is nil when no attempt was answered.
	LastStatus *int `json:"lastStatus"`
}

// Counters count a batch's addresses.
type Counters struct {
	Total         int `json:"total"`
	Duplicates    int `json:"duplicates"`
	Processed     int `json:"processed"`
	Deliverable   int `json:"deliverable"`
	Undeliverable int `json:"undeliverable"`
	Risky         int `json:"risky"`
	Unknown       int `json:"unknown"`
}

// Result is one address's verdict in a batch.
type Result struct {
	Email    string   `json:"email"`
	Status   string   `json:"status"`
	Decision Decision `json:"decision"`
}
