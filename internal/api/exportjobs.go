package api

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
)

// On AWS a CSV list that does not fit a reply, and every export, is a job:
// a million rows take longer than API Gateway's 29 s. The worker writes
// the CSV to S3; the client asks the same URL again, answered 202 with
// Retry-After until the job is done, then as a finished export.

// ExportJobStore keeps export jobs (dynamostore.Store).
type ExportJobStore interface {
	// ExportJob returns the job of an account's export of a batch under
	// filters (with its URL when done), or found false.
	ExportJob(ctx context.Context, accountID, batchID, filters string) (j store.ExportJob, found bool, err error)
	// StartExport records a new run of j until deadline, replacing the
	// run whose token is replace ("" for none), within max running runs
	// of the account (a *store.LimitError beyond). started is false when
	// another call started one first; that run is returned.
	StartExport(ctx context.Context, j store.ExportJob, replace string, deadline time.Time, max int) (out store.ExportJob, started bool, err error)
	// DropExport removes a run's record, so that the next ask starts anew.
	DropExport(ctx context.Context, j store.ExportJob) error
}

// ExportJobs makes CSV exports jobs the worker runs.
type ExportJobs struct {
	Store ExportJobStore
	Queue func(ctx context.Context, j store.ExportJob) error // sends batch.ExportMessage
	// MaxRunning is how many jobs of one account may run at once
	// (default DefaultExportJobs); one more is 429.
	MaxRunning int
	// Deadline is how long a run may take before asking again starts it
	// anew (default 15 min), so a crashed run is not "running" for ever.
	Deadline time.Duration
}

// DefaultExportJobs is the default of ExportJobs.MaxRunning.
const DefaultExportJobs = 4

const (
	// exportDeadline: three times the worker's timeout, for a message
	// queued behind batch work.
	exportDeadline = 15 * time.Minute
	// exportFresh is how long a done job of a batch changed since is still
	// the answer: enough for the poll that waited for it.
	exportFresh = time.Minute
	exportPoll  = "2" // Retry-After of a running job: a million rows take about a minute
	// exportFailedRetry is the Retry-After of a failed job.
	exportFailedRetry = "1"
)

// exportPending is the body of a 202 to a running export job.
type exportPending struct {
	State store.ExportState `json:"state"`
}

// exportJob answers a CSV export of batch b under f as a job; done makes
// the reply of a finished one. inline, when set, answers a list that fits
// a reply before a job is started.
func (h *Handler) exportJob(ctx context.Context, p evs.Principal, b evs.Batch, f filter,
	done func(j store.ExportJob) idempotency.Reply, inline func() (idempotency.Reply, bool, error)) (idempotency.Reply, error) {
	jobs := h.d.ExportJobs
	filters, version, now := f.query(), batchVersion(b), h.d.Now()
	j, found, err := jobs.Store.ExportJob(ctx, p.AccountID, b.ID, filters)
	if err != nil {
		return idempotency.Reply{}, err
	}
	if found {
		switch {
		case j.State == store.ExportRunning && now.Before(j.Deadline):
			return exportRunning(), nil
		case j.State == store.ExportDone && (j.Version == version || now.Sub(j.DoneAt) < exportFresh):
			return done(j), nil
		case j.State == store.ExportFailed:
			// Said once: the next ask starts the job again.
			if err := jobs.Store.DropExport(ctx, j); err != nil {
				return idempotency.Reply{}, err
			}
			return idempotency.Reply{}, &BusyError{Err: evs.Errorf(evs.CodeUnavailable,
				"The export could not be written; ask again to start it again."), RetryAfter: exportFailedRetry}
		}
	}
	if inline != nil {
		if r, ok, err := inline(); err != nil || ok {
			return r, err
		}
	}
	replace := ""
	if found {
		replace = j.Token // a run past its deadline, or an export of an older batch
	}
	deadline := cmp.Or(max(jobs.Deadline, 0), exportDeadline)
	maxRunning := cmp.Or(max(jobs.MaxRunning, 0), DefaultExportJobs)
	j, started, err := jobs.Store.StartExport(ctx, store.ExportJob{AccountID: p.AccountID, BatchID: b.ID, Filters: filters, Version: version},
		replace, now.Add(deadline), maxRunning)
	if err != nil {
		return idempotency.Reply{}, err
	}
	if started {
		if err := jobs.Queue(ctx, j); err != nil {
			if derr := jobs.Store.DropExport(context.WithoutCancel(ctx), j); derr != nil {
				h.d.Logger.ErrorContext(ctx, "could not drop an unqueued export", "batchId", b.ID, "error", derr.Error())
			}
			return idempotency.Reply{}, evs.Wrap(err, evs.CodeUnavailable, "The work queue is unavailable; retry.")
		}
	}
	if j.State == store.ExportDone {
		return done(j), nil
	}
	return exportRunning(), nil
}

// exportRunning is the reply to an export job under way.
func exportRunning() idempotency.Reply {
	r := jsonReply(http.StatusAccepted, exportPending{State: store.ExportRunning})
	r.Headers = map[string]string{"Retry-After": exportPoll}
	return r
}

// batchVersion is what tells an unchanged batch: its state and progress.
func batchVersion(b evs.Batch) string {
	return string(b.State) + "/" + strconv.Itoa(b.Counters.Processed)
}

// query is the filter as a canonical query string, which names the export
// job and which ExportCSV reads back.
func (f filter) query() string {
	q := url.Values{}
	if f.statuses != nil {
		q.Set("status", f.status)
	}
	if f.reasons != nil {
		q.Set("reason", f.reason)
	}
	if f.minScore > 0 {
		q.Set("minScore", strconv.Itoa(f.minScore))
	}
	if f.layout != "" {
		q.Set("layout", f.layout)
	}
	return q.Encode() // sorted by key
}

// ResultReader reads a batch's written results, a page at a time
// (BatchStore.Results).
type ResultReader interface {
	Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error)
}

// ExportCSV returns what writes an export job's CSV for the worker: the
// rows Accept: text/csv gives for the job's batch and filters, charged to
// the account's storage quota (l, nil for none) as they are written. A job
// refused midway gives its charge back.
func ExportCSV(results ResultReader, l Ledger) func(ctx context.Context, j store.ExportJob, w io.Writer) error {
	return func(ctx context.Context, j store.ExportJob, w io.Writer) error {
		q, err := url.ParseQuery(j.Filters)
		if err != nil {
			return err
		}
		f, err := parseFilter(lastValues(q))
		if err != nil {
			return err
		}
		rows := newCSVRows(results, j.AccountID, j.BatchID, f)
		defer rows.close()
		held := NewHold(l, evs.Principal{AccountID: j.AccountID}, time.Now().Add(evs.ExportTTL))
		if _, err = rows.writeUpTo(ctx, held.Writer(ctx, w), -1); err != nil {
			held.Undo(ctx)
			return err
		}
		held.Done(ctx)
		return nil
	}
}
