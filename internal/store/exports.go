package store

import "time"

// On AWS a CSV result list that does not fit a reply, and every export, is
// a job the worker writes to S3. The api, the batch worker and the store
// share its record.

// ExportState is where an export job is.
type ExportState string

// Export job states.
const (
	ExportRunning ExportState = "running"
	ExportDone    ExportState = "done"
	ExportFailed  ExportState = "failed"
)

// ExportJob is one export job: the CSV of an account's batch under a set
// of filters, written once per Token. One job exists per account, batch
// and Filters; starting it again replaces it with a new Token.
type ExportJob struct {
	AccountID string `json:"accountId"`
	BatchID   string `json:"batchId"`
	// Filters is the results filters as a canonical query string
	// ("minScore=90&status=deliverable"), "" for none.
	Filters string `json:"filters,omitempty"`
	// Token names this run of the job: a message or a write of an earlier
	// run never touches a later one.
	Token string `json:"token"`

	// The rest is the record's, not the message's.

	State ExportState `json:"-"`
	// Version is the batch's state and progress when the job started:
	// an unchanged batch finds the same job.
	Version string `json:"-"`
	// Deadline is when a running job is given up: asking again then
	// starts it anew.
	Deadline time.Time `json:"-"`
	// DoneAt is when the job ended (done or failed).
	DoneAt time.Time `json:"-"`
	// URL is, on a done job, a pre-signed GET of the CSV that works until
	// ExpiresAt.
	URL       string    `json:"-"`
	ExpiresAt time.Time `json:"-"`
}
