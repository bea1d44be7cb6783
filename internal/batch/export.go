package batch

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/store"
)

// KindExport is the message of an export job (store.ExportJob): the
// worker writes the batch's CSV to S3 a page at a time and marks the job
// done, while the client polls the route it asked.
const KindExport = "export"

// ExportMessage is the message that runs export job j.
func ExportMessage(j store.ExportJob) Message {
	return Message{Kind: KindExport, AccountID: j.AccountID, BatchID: j.BatchID, Export: &store.ExportJob{
		AccountID: j.AccountID, BatchID: j.BatchID, Filters: j.Filters, Token: j.Token,
	}}
}

// ExportStore keeps export jobs and writes their objects.
type ExportStore interface {
	// ClaimExport takes j's run for this writer until until; false when
	// it is not running any more or another writer holds it.
	ClaimExport(ctx context.Context, j store.ExportJob, until time.Time) (bool, error)
	// WriteExport writes j's object as write writes it, in parts.
	WriteExport(ctx context.Context, j store.ExportJob, write func(w io.Writer) error) error
	// FinishExport marks j's run done, or failed.
	FinishExport(ctx context.Context, j store.ExportJob, failed bool) error
}

// exportReserve is what an export leaves of its invocation to record its
// end: the write stops this long before the deadline.
const exportReserve = 15 * time.Second

// exportClaim is how long a run is claimed when the invocation has no
// deadline (tests, a LocalQueue).
const exportClaim = 5 * time.Minute

// export runs an export job's message; a run that is done or held by
// another writer is left alone. A write that fails or runs out of time
// marks the run failed, so the client is told and can ask again; only a
// failure to record the end is left to a redelivery.
func (w *Worker) export(ctx context.Context, m Message) error {
	if w.Exports == nil || w.ExportCSV == nil || m.Export == nil {
		w.logger().WarnContext(ctx, "export message dropped: this worker writes no exports", slog.String("batchId", m.BatchID))
		return nil
	}
	j := *m.Export
	until, ok := ctx.Deadline()
	if !ok {
		until = w.now().Add(exportClaim)
	}
	claimed, err := w.Exports.ClaimExport(ctx, j, until)
	if err != nil || !claimed {
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, until.Add(-min(exportReserve, time.Until(until)/4)))
	defer cancel()
	start := w.now()
	werr := w.Exports.WriteExport(wctx, j, func(out io.Writer) error { return w.ExportCSV(wctx, j, out) })
	if werr != nil {
		w.logger().ErrorContext(ctx, "export failed", slog.String("batchId", j.BatchID), slog.String("error", werr.Error()))
	} else {
		w.logger().InfoContext(ctx, "export written", slog.String("batchId", j.BatchID), slog.Duration("took", w.now().Sub(start)))
	}
	return w.Exports.FinishExport(context.WithoutCancel(ctx), j, werr != nil)
}
