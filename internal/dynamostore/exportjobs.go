package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Export jobs (store.ExportJob): a CSV list the worker writes while the
// client polls, since API Gateway cuts a call off at 29 s.
//
// A job is an item of the Batches table in partition "~export#<account>",
// sort key "<batch>?<filters>"; its state is "exportState", not "state", so
// neither listings nor the sweep take it for a batch. Each run has a token:
// it writes exports/<account>/<batch>/<token>.csv, and every write of the
// record is conditional on it, so an earlier run's message never touches a
// later run.
//
// The per-account cap on running jobs is a set of slot items,
// "~slot#export#<account>", sort key the slot number, as in lease.go: a run
// takes one with a conditional put (free, or its lease ended) and gives it
// back when it ends; a crashed run holds it until the job's deadline.

const (
	exportPartitionPrefix = "~export#"
	exportSlotPrefix      = slotPartitionPrefix + "export#"

	attrExportState = "exportState"
	attrExportToken = "exportToken"
	attrVersion     = "version"
	attrFilters     = "filters"
	attrDeadline    = "deadline"
	attrDoneAt      = "doneAt"
	attrClaimUntil  = "claimUntil"
	attrSlot        = "slot"
)

// ExportJobLife is how long a job's record, and so its object, is served.
// The bucket keeps the object a day (template.yaml, expire-exports).
const ExportJobLife = time.Hour

// exportJobKey is the key of an export job's record.
func exportJobKey(accountID, batchID, filters string) item {
	return item{attrAccountID: avS(exportPartitionPrefix + accountID), attrID: avS(batchID + "?" + filters)}
}

// exportObject is the S3 key of a run's CSV.
func exportObject(j store.ExportJob) string {
	return "exports/" + j.AccountID + "/" + j.BatchID + "/" + j.Token + ".csv"
}

// ExportJob returns the job of accountID's export of batchID under
// filters, with a pre-signed URL when it is done; found is false when
// there is none (or its record has outlived ExportJobLife).
func (s *Store) ExportJob(ctx context.Context, accountID, batchID, filters string) (j store.ExportJob, found bool, err error) {
	it, err := s.get(ctx, s.t.Batches, exportJobKey(accountID, batchID, filters), "read export job")
	if err != nil || it == nil || !getTime(it, attrExpiresAtMs).After(s.now()) {
		return store.ExportJob{}, false, err
	}
	j = store.ExportJob{
		AccountID: accountID, BatchID: batchID, Filters: filters,
		Token: getS(it, attrExportToken), State: store.ExportState(getS(it, attrExportState)),
		Version: getS(it, attrVersion), Deadline: getTime(it, attrDeadline), DoneAt: getTime(it, attrDoneAt),
	}
	if j.State == store.ExportDone {
		if s.presign == nil {
			return store.ExportJob{}, false, errNoPresigner
		}
		req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(exportObject(j))},
			s3.WithPresignExpires(evs.ExportTTL))
		if err != nil {
			return store.ExportJob{}, false, wrapErr("sign export URL", err)
		}
		j.URL, j.ExpiresAt = req.URL, s.now().Add(evs.ExportTTL).UTC()
	}
	return j, true, nil
}

// StartExport records a new run of j until deadline and returns it with its
// token; replace is the token of the run it replaces ("" for none). Past max
// running runs of the account (0: no cap) it answers a *store.LimitError.
// When another call started a run first, that run is returned and started is
// false: the caller then queues nothing.
func (s *Store) StartExport(ctx context.Context, j store.ExportJob, replace string, deadline time.Time, max int) (out store.ExportJob, started bool, err error) {
	now := s.now()
	j.Token, j.State, j.Deadline, j.DoneAt = newToken(), store.ExportRunning, deadline, time.Time{}
	slot := -1
	if max > 0 {
		if slot, err = s.takeExportSlot(ctx, j, max, now); err != nil {
			return store.ExportJob{}, false, err
		}
	}
	key := exportJobKey(j.AccountID, j.BatchID, j.Filters)
	rec := item{
		attrAccountID: key[attrAccountID], attrID: key[attrID],
		attrExportToken: avS(j.Token), attrExportState: avS(j.State), attrVersion: avS(j.Version),
		attrFilters: avS(j.Filters), attrDeadline: avTime(deadline), attrSlot: avN(int64(slot)),
		attrExpiresAtMs: avTime(now.Add(ExportJobLife)), attrExpiresAt: ttlSeconds(now.Add(ExportJobLife)),
	}
	in := &dynamodb.PutItemInput{
		TableName: aws.String(s.t.Batches), Item: rec, ConditionExpression: aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": attrID},
	}
	if replace != "" {
		in.ConditionExpression, in.ExpressionAttributeNames = aws.String("#tk = :old"), map[string]string{"#tk": attrExportToken}
		in.ExpressionAttributeValues = item{":old": avS(replace)}
	}
	_, err = s.c.PutItem(ctx, in)
	if err == nil {
		return j, true, nil
	}
	if !isConditionFailed(err) {
		s.releaseExportSlot(ctx, j.AccountID, slot, j.Token)
		return store.ExportJob{}, false, wrapErr("start export", err)
	}
	cur, found, err := s.ExportJob(ctx, j.AccountID, j.BatchID, j.Filters)
	if err == nil && found && cur.Token == j.Token {
		// An SDK resend failed against this put: the run is this call's
		// to queue, or it would answer 202 until its deadline.
		return j, true, nil
	}
	s.releaseExportSlot(ctx, j.AccountID, slot, j.Token)
	if err == nil && !found {
		err = store.Unavailable(errExportRace)
	}
	// Another call replaced or started the job meanwhile.
	return cur, false, err
}

var errExportRace = errors.New("dynamostore: an export job was replaced while it was started")

// exportRetry is the Retry-After of a capped export when no slot says when
// it frees.
const exportRetry = 10 * time.Second

// takeExportSlot takes one of the account's max export slots for j's run
// until its deadline, or answers the cap's *store.LimitError, whose
// Retry-After is when the first slot's lease ends.
func (s *Store) takeExportSlot(ctx context.Context, j store.ExportJob, max int, now time.Time) (int, error) {
	retry := time.Duration(0)
	for slot := range max {
		k := item{attrAccountID: avS(exportSlotPrefix + j.AccountID), attrID: avS(strconv.Itoa(slot))}
		rec := item{
			attrAccountID: k[attrAccountID], attrID: k[attrID],
			attrLeaseUntil: avTime(j.Deadline), attrLeaseToken: avS(j.Token),
			attrExpiresAt: ttlSeconds(j.Deadline.Add(time.Hour)),
		}
		_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.t.Batches), Item: rec,
			ConditionExpression:       aws.String("attribute_not_exists(#id) OR #lu < :now"),
			ExpressionAttributeNames:  map[string]string{"#id": attrID, "#lu": attrLeaseUntil},
			ExpressionAttributeValues: item{":now": avTime(now)},
			// The lease comes back with the failure: an SDK resend finds its own.
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return slot, nil
		}
		cf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
		if !ok {
			return -1, wrapErr("take an export slot", err)
		}
		if getS(item(cf.Item), attrLeaseToken) == j.Token {
			return slot, nil
		}
		retry = cmp.Or(retry, exportRetry)
	}
	return -1, &store.LimitError{
		Err:   evs.Errorf(evs.CodeRateLimited, "The account has %d exports running, the most allowed at once; retry when one is done.", max),
		Retry: retry,
	}
}

// releaseExportSlot gives back the slot a run took (-1: none). Best
// effort: a slot not given back frees itself at the run's deadline.
func (s *Store) releaseExportSlot(ctx context.Context, accountID string, slot int, token string) {
	if slot < 0 {
		return
	}
	s.deleteIfToken(ctx, item{attrAccountID: avS(exportSlotPrefix + accountID), attrID: avS(strconv.Itoa(slot))}, attrLeaseToken, token)()
}

// ClaimExport takes j's run for one writer until until: ok is false when the
// run is no longer running or another writer holds it (a duplicate message).
// A crashed writer loses its claim at until, so a redelivery can take over.
func (s *Store) ClaimExport(ctx context.Context, j store.ExportJob, until time.Time) (ok bool, err error) {
	claim := newToken()
	_, err = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       exportJobKey(j.AccountID, j.BatchID, j.Filters),
		UpdateExpression:          aws.String("SET #cu = :until, #ct = :ct"),
		ConditionExpression:       aws.String("#tk = :tk AND #st = :running AND (attribute_not_exists(#cu) OR #cu < :now)"),
		ExpressionAttributeNames:  map[string]string{"#cu": attrClaimUntil, "#ct": attrClaimToken, "#tk": attrExportToken, "#st": attrExportState},
		ExpressionAttributeValues: item{":until": avTime(until), ":ct": avS(claim), ":tk": avS(j.Token), ":running": avS(store.ExportRunning), ":now": avTime(s.now())},
		// An SDK resend fails against this very claim; the record tells.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if cf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		return getS(item(cf.Item), attrClaimToken) == claim, nil
	}
	return err == nil, wrapErr("claim export", err)
}

// WriteExport writes j's run's object a part at a time: a failed write
// leaves no object and no upload.
func (s *Store) WriteExport(ctx context.Context, j store.ExportJob, write func(w io.Writer) error) error {
	if err := s.in.ready(); err != nil {
		return err
	}
	up := &partUpload{ctx: ctx, o: s.in.o, bucket: s.in.bucket, key: exportObject(j), disposition: `attachment; filename="` + j.BatchID + `.csv"`}
	if werr := write(up); werr != nil {
		up.abort()
		if up.err == nil {
			return werr
		}
		return wrapErr("write export", up.err)
	}
	if err := up.finish(); err != nil {
		up.abort()
		return wrapErr("write export", err)
	}
	return nil
}

// FinishExport ends j's run and gives back its slot, leaving alone a run
// that was replaced meanwhile.
func (s *Store) FinishExport(ctx context.Context, j store.ExportJob, failed bool) error {
	state := store.ExportDone
	if failed {
		state = store.ExportFailed
	}
	out, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       exportJobKey(j.AccountID, j.BatchID, j.Filters),
		UpdateExpression:          aws.String("SET #st = :st, #done = :now REMOVE #cu"),
		ConditionExpression:       aws.String("#tk = :tk AND #st = :running"),
		ExpressionAttributeNames:  map[string]string{"#st": attrExportState, "#done": attrDoneAt, "#cu": attrClaimUntil, "#tk": attrExportToken},
		ExpressionAttributeValues: item{":st": avS(state), ":now": avTime(s.now()), ":tk": avS(j.Token), ":running": avS(store.ExportRunning)},
		ReturnValues:              types.ReturnValueAllNew,
		// An SDK resend fails against this very finish; its slot is still to give back.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if cf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		if old := item(cf.Item); getS(old, attrExportToken) == j.Token && getS(old, attrExportState) == string(state) {
			s.releaseExportSlot(ctx, j.AccountID, int(getN(old, attrSlot)), j.Token)
		}
		return nil // replaced meanwhile: left alone
	}
	if err != nil {
		return wrapErr("finish export", err)
	}
	s.releaseExportSlot(ctx, j.AccountID, int(getN(out.Attributes, attrSlot)), j.Token)
	return nil
}

// DropExport removes j's run's record and gives back its slot, unless a
// later run replaced it, so the next ask starts anew: after a failed run was
// answered, or when its message could not be queued.
func (s *Store) DropExport(ctx context.Context, j store.ExportJob) error {
	out, err := s.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       exportJobKey(j.AccountID, j.BatchID, j.Filters),
		ConditionExpression:       aws.String("#tk = :tk"),
		ExpressionAttributeNames:  map[string]string{"#tk": attrExportToken},
		ExpressionAttributeValues: item{":tk": avS(j.Token)},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if ok, err := applied(err, "drop export"); !ok {
		return err
	}
	if getS(out.Attributes, attrExportState) == string(store.ExportRunning) {
		s.releaseExportSlot(ctx, j.AccountID, int(getN(out.Attributes, attrSlot)), j.Token)
	}
	return nil
}
