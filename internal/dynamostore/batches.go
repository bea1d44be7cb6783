package dynamostore

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Batches and Results table attributes.
const (
	attrMode          = "mode"
	attrError         = "error"
	attrCompletedAt   = "completedAt"
	attrCreateToken   = "createToken" // names the CreateBatch call that wrote the record
	attrMoveToken     = "moveToken"   // names the TransitionBatch call that last moved the batch
	attrItemCount     = "itemCount"   // distinct items; the batch completes when processed reaches it
	attrMaxSeq        = "maxSeq"      // the largest item seq: the results keys run up to its
	attrInput         = "input"       // the S3 key of the batch's input object
	attrTotal         = "total"
	attrDuplicates    = "duplicates"
	attrProcessed     = "processed"
	attrStatus        = "status"
	attrResultEmail   = "resultEmail"
	attrDecision      = "decision"
	attrDeliverable   = "deliverable"
	attrUndeliverable = "undeliverable"
	attrRisky         = "risky"
	attrUnknown       = "unknown"
	attrMaxAgeMs      = "maxAgeMs"  // -1 for evs.NoReuse; absent for no bound
	attrBatchName     = "batchName" // absent when none
	attrLanes         = "lanes"     // JSON of evs.Lane, absent when none
)

// counterAttr names the counter of each outcome label; other statuses are refused.
var counterAttr = map[string]string{
	"deliverable":   attrDeliverable,
	"undeliverable": attrUndeliverable,
	"risky":         attrRisky,
	"unknown":       attrUnknown,
}

const (
	resultsPerTx  = 99 // leaves room for the batch update in a transaction's 100 items
	writeAttempts = 10 // retries before the store reports itself unavailable
	// rowsPerKey seqs share one Results partition key, so a key never takes
	// more writes than that, far below a partition's 1,000 a second.
	rowsPerKey = 250
)

// rowKey names a batch; with the account in it, accounts never share rows.
func rowKey(accountID, id string) string { return accountID + "#" + id }

// resultKey is the Results partition key of seq's result.
func resultKey(accountID, id string, seq int) string {
	return rowKey(accountID, id) + "#" + strconv.Itoa(seq/rowsPerKey)
}

func batchKey(accountID, id string) item { return item{attrAccountID: avS(accountID), attrID: avS(id)} }

func batchFrom(it item) evs.Batch {
	return evs.Batch{
		ID:          getS(it, attrID),
		AccountID:   getS(it, attrAccountID),
		Mode:        evs.Mode(getS(it, attrMode)),
		State:       evs.State(getS(it, attrState)),
		Error:       getS(it, attrError),
		CreatedAt:   getTime(it, attrCreatedAt),
		CompletedAt: getTime(it, attrCompletedAt),
		ExpiresAt:   getTime(it, attrExpiresAtMs),
		Counters: evs.Counters{
			Total:         int(getN(it, attrTotal)),
			Duplicates:    int(getN(it, attrDuplicates)),
			Processed:     int(getN(it, attrProcessed)),
			Deliverable:   int(getN(it, attrDeliverable)),
			Undeliverable: int(getN(it, attrUndeliverable)),
			Risky:         int(getN(it, attrRisky)),
			Unknown:       int(getN(it, attrUnknown)),
		},
		MaxAge: store.MaxAgeOf(getN(it, attrMaxAgeMs)),
		Name:   getS(it, attrBatchName),
		Lanes:  store.LanesOf(getS(it, attrLanes)),
	}
}

// visible tells whether a batch record is one a reader may see: not expired
// by the store's clock, nor a lock.
func (s *Store) visible(it item) bool {
	return it != nil && evs.Live(getTime(it, attrExpiresAtMs), s.now())
}

// batchItem reads the batch record of (accountID, id) if it is visible.
func (s *Store) batchItem(ctx context.Context, accountID, id string) (item, error) {
	if accountID == "" || id == "" {
		// Empty key attributes are refused by DynamoDB; no batch has them.
		return nil, store.NoBatch()
	}
	it, err := s.get(ctx, s.t.Batches, batchKey(accountID, id), "read batch")
	if err != nil {
		return nil, err
	}
	if !s.visible(it) {
		return nil, store.NoBatch()
	}
	return it, nil
}

// Batch returns the batch id of account, or CodeNotFound, also while it is
// being created and once it has expired.
func (s *Store) Batch(ctx context.Context, accountID, id string) (evs.Batch, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		return evs.Batch{}, err
	}
	return batchFrom(it), nil
}

// CreateBatch stores b's input, then its record: see the package comment.
func (s *Store) CreateBatch(ctx context.Context, b evs.Batch, items []evs.Item) error {
	key, err := s.storeInput(ctx, b, items)
	if err != nil {
		return err
	}
	return s.putBatch(ctx, b, items, key)
}

// storeInput checks b and stores its items as the input object, returning
// its key ("" for no items). The key holds a random token, so two creations
// of one ID never share an object.
func (s *Store) storeInput(ctx context.Context, b evs.Batch, items []evs.Item) (string, error) {
	if err := store.CheckNewBatch(b, items); err != nil {
		return "", err
	}
	if len(items) == 0 {
		return "", nil
	}
	key := "inputs/" + b.AccountID + "/" + b.ID + "/" + newToken()
	if err := s.in.put(ctx, key, items); err != nil {
		return "", err
	}
	return key, nil
}

// putBatch writes b's record, naming its input object: one conditional
// put, so the batch is visible whole or not at all.
func (s *Store) putBatch(ctx context.Context, b evs.Batch, items []evs.Item, inputKey string) error {
	c := b.Counters
	maxSeq := -1
	for _, it := range items {
		maxSeq = max(maxSeq, it.Seq)
	}
	rec := item{
		attrAccountID:     avS(b.AccountID),
		attrID:            avS(b.ID),
		attrMode:          avS(string(b.Mode)),
		attrState:         avS(string(b.State)),
		attrCreatedAt:     avTime(b.CreatedAt),
		attrListKey:       avS(listKey(evs.PosOf(b))),
		attrExpiresAtMs:   avTime(b.ExpiresAt),
		attrExpiresAt:     ttlSeconds(b.ExpiresAt),
		attrItemCount:     avN(int64(len(items))),
		attrMaxSeq:        avN(int64(maxSeq)),
		attrTotal:         avN(int64(c.Total)),
		attrDuplicates:    avN(int64(c.Duplicates)),
		attrProcessed:     avN(int64(c.Processed)),
		attrDeliverable:   avN(int64(c.Deliverable)),
		attrUndeliverable: avN(int64(c.Undeliverable)),
		attrRisky:         avN(int64(c.Risky)),
		attrUnknown:       avN(int64(c.Unknown)),
	}
	if inputKey != "" {
		rec[attrInput] = avS(inputKey)
	}
	if b.Error != "" {
		rec[attrError] = avS(b.Error)
	}
	if b.MaxAge != 0 {
		rec[attrMaxAgeMs] = avN(store.MaxAgeMillis(b.MaxAge))
	}
	if b.Name != "" {
		rec[attrBatchName] = avS(b.Name)
	}
	if len(b.Lanes) > 0 {
		rec[attrLanes] = avS(store.LanesJSON(b.Lanes))
	}
	if !b.CompletedAt.IsZero() {
		rec[attrCompletedAt] = avTime(b.CompletedAt)
	}
	addDelivery(rec, b)
	if hasWork(rec) {
		rec[attrActive] = activeValue
	}
	created, err := s.putOnce(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(s.t.Batches),
		Item:                     rec,
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": attrID},
	}, batchKey(b.AccountID, b.ID), "create batch")
	if err == nil && !created {
		return store.BatchExists()
	}
	return err
}

// putOnce writes in, whose condition refuses an existing item, and reports
// whether this call made it (key reads the other's). A put whose reply was
// lost is retried by the SDK and fails its condition against itself, so a
// random token tells this call's item from another's.
func (s *Store) putOnce(ctx context.Context, in *dynamodb.PutItemInput, key item, what string) (bool, error) {
	token := newToken()
	in.Item[attrCreateToken] = avS(token)
	_, err := s.c.PutItem(ctx, in)
	if isConditionFailed(err) {
		_, mine, err := s.mine(ctx, aws.ToString(in.TableName), key, attrCreateToken, token, what)
		return mine, err
	}
	return err == nil, wrapErr(what, err)
}

// mine reads the item at key after a failed condition and tells whether it
// holds token in attr: this call's own write, which an SDK resend of it
// failed against. It returns the item too.
func (s *Store) mine(ctx context.Context, table string, key item, attr, token, op string) (item, bool, error) {
	cur, err := s.get(ctx, table, key, op)
	return cur, err == nil && cur != nil && getS(cur, attr) == token, err
}

// newToken returns 128 random bits, hex-encoded.
func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// backoff waits before retry attempt+1: exponential from 20 ms, capped at
// 1 s, with full jitter so competing writers spread out.
func (s *Store) backoff(ctx context.Context, attempt int) error {
	d := min(20*time.Millisecond<<attempt, time.Second)
	return s.sleep(ctx, time.Duration(rand.Int64N(int64(d))+1))
}

// TransitionBatch moves the batch to `to` in one update conditional on
// evs.CheckTransition's rule; on a refusal the batch is read again and the
// rule tells why (or CodeNotFound).
func (s *Store) TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error) {
	if accountID == "" || id == "" {
		return evs.Batch{}, store.NoBatch()
	}
	names := map[string]string{"#st": attrState, "#exp": attrExpiresAtMs, "#e": attrError, "#ca": attrCompletedAt}
	values := item{":to": avS(string(to)), ":now": avTime(s.now())}
	var allowed []string
	for i, f := range from {
		if !f.CanMove(to) || slices.Contains(from[:i], f) {
			continue
		}
		k := ":f" + strconv.Itoa(len(allowed))
		values[k] = avS(f)
		allowed = append(allowed, k)
	}
	refused := func() (evs.Batch, error) {
		b, err := s.Batch(ctx, accountID, id)
		if err != nil {
			return evs.Batch{}, err
		}
		if err := evs.CheckTransition(b, from, to); err != nil {
			return evs.Batch{}, err
		}
		// The rule passes on the batch read now, so the condition failed
		// on an earlier state of it: report that state.
		return evs.Batch{}, evs.Errorf(evs.CodeInvalidState, "The request is %s.", b.State)
	}
	if len(allowed) == 0 {
		return refused()
	}
	cond := "#st IN (" + strings.Join(allowed, ", ") + ") AND #exp > :now"
	if to == evs.StateCompleted {
		cond += " AND #p >= #n"
		names["#p"], names["#n"] = attrProcessed, attrItemCount
	}
	// A transition whose reply was lost is resent by the SDK and then fails
	// its condition against itself; the token tells it so.
	token := newToken()
	set, remove := []string{"#st = :to", "#mt = :mt"}, []string{}
	names["#mt"], values[":mt"] = attrMoveToken, avS(token)
	if errMsg != "" {
		set = append(set, "#e = :e")
		values[":e"] = avS(errMsg)
	} else {
		remove = append(remove, "#e")
	}
	if to.Final() {
		set = append(set, "#ca = :ca")
		values[":ca"] = avTime(now)
	} else {
		remove = append(remove, "#ca")
	}
	update := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		update += " REMOVE " + strings.Join(remove, ", ")
	}
	var out *dynamodb.UpdateItemOutput
	err := s.retryConflict(ctx, func() (err error) {
		out, err = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       batchKey(accountID, id),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ReturnValues:              types.ReturnValueAllNew,
		})
		return err
	})
	if isConditionFailed(err) {
		it, err := s.batchItem(ctx, accountID, id)
		if err != nil {
			return evs.Batch{}, err
		}
		if getS(it, attrMoveToken) == token {
			return batchFrom(it), nil
		}
		return refused()
	}
	if err != nil {
		return evs.Batch{}, wrapErr("transition batch", err)
	}
	return batchFrom(out.Attributes), nil
}

// retryConflict runs write again while a transaction on the same item is in
// flight (PutResults' hold the batch record); the SDK does not retry that.
func (s *Store) retryConflict(ctx context.Context, write func() error) error {
	var err error
	for attempt := range writeAttempts {
		if err = write(); apiCode(err) != "TransactionConflictException" {
			return err
		}
		if werr := s.backoff(ctx, attempt); werr != nil {
			return err
		}
	}
	return err
}

// PutResults writes and counts the results that have none yet, then
// completes the batch if every item has its result (see the package doc).
func (s *Store) PutResults(ctx context.Context, accountID, id string, results []evs.Result, now time.Time) (evs.Batch, error) {
	all, err := store.EncodeResults(results)
	if err != nil {
		return evs.Batch{}, err
	}
	// One transaction cannot touch a row twice; the first result of a seq
	// is the one written, as it would be if they came in two calls.
	encoded := make(map[int][]byte, len(results))
	pending := make([]evs.Result, 0, len(results))
	for i, r := range results {
		if _, dup := encoded[r.Seq]; !dup {
			encoded[r.Seq] = all[i]
			pending = append(pending, r)
		}
	}
	unlock, err := s.lockBatch(ctx, rowKey(accountID, id))
	if err != nil {
		return evs.Batch{}, err
	}
	defer unlock()
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		return evs.Batch{}, err
	}
	if evs.State(getS(it, attrState)).Final() {
		return batchFrom(it), nil
	}
	maxSeq := int(getN(it, attrMaxSeq))
	for _, r := range results {
		if r.Seq < 0 || r.Seq > maxSeq {
			return evs.Batch{}, store.NoSuchItem()
		}
	}
	ttl := ttlSeconds(getTime(it, attrExpiresAtMs))
	for chunk := range slices.Chunk(pending, resultsPerTx) {
		final, err := s.putChunk(ctx, accountID, id, chunk, encoded, ttl)
		if err != nil {
			return evs.Batch{}, err
		}
		if final {
			break
		}
	}
	return s.completeIfDone(ctx, accountID, id, now)
}

// putChunk writes one transaction of results, dropping those written before
// and retrying; final reports a batch final or gone: nothing to write.
func (s *Store) putChunk(ctx context.Context, accountID, id string, chunk []evs.Result, encoded map[int][]byte, ttl types.AttributeValue) (final bool, err error) {
	// attempt counts only the retries that made no progress (conflicts,
	// throttling); dropping written results always shrinks the chunk.
	attempt := 0
	for len(chunk) > 0 {
		if attempt >= writeAttempts {
			return false, store.Unavailable(fmt.Errorf("dynamostore: results transaction cancelled %d times", attempt))
		}
		tx := make([]types.TransactWriteItem, 0, len(chunk)+1)
		added := map[string]int64{}
		for _, r := range chunk {
			status := string(r.Status())
			added[counterAttr[status]]++
			tx = append(tx, types.TransactWriteItem{Put: &types.Put{
				TableName: aws.String(s.t.Results),
				Item: item{
					attrBatchID: avS(resultKey(accountID, id, r.Seq)), attrSeq: avN(int64(r.Seq)),
					attrStatus: avS(status), attrResultEmail: avS(r.Email),
					attrDecision: &types.AttributeValueMemberB{Value: encoded[r.Seq]}, attrExpiresAt: ttl,
				},
				ConditionExpression:      aws.String("attribute_not_exists(#q)"),
				ExpressionAttributeNames: map[string]string{"#q": attrSeq},
			}})
		}
		tx = append(tx, s.countUpdate(accountID, id, int64(len(chunk)), added))

		_, err := s.c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx})
		if err == nil {
			return false, nil
		}
		tc, ok := errors.AsType[*types.TransactionCanceledException](err)
		if !ok || len(tc.CancellationReasons) != len(tx) {
			return false, wrapErr("write results", err)
		}
		reasons := tc.CancellationReasons
		batchCode := aws.ToString(reasons[len(reasons)-1].Code)
		if batchCode == "ConditionalCheckFailed" {
			return true, nil
		}
		keep := chunk[:0:0]
		retryLater := false
		for i, r := range chunk {
			switch aws.ToString(reasons[i].Code) {
			case "ConditionalCheckFailed":
				continue // written before: dropped, so it is not counted twice
			case "", "None":
			default: // TransactionConflict, throttling: retried after a pause
				retryLater = true
			}
			keep = append(keep, r)
		}
		progress := len(keep) < len(chunk)
		chunk = keep
		if retryLater || !progress || (batchCode != "" && batchCode != "None") {
			if err := s.backoff(ctx, attempt); err != nil {
				return false, wrapErr("write results", err)
			}
			attempt++
		}
	}
	return false, nil
}

// countUpdate is the batch record's part of a results transaction.
func (s *Store) countUpdate(accountID, id string, n int64, added map[string]int64) types.TransactWriteItem {
	names := map[string]string{"#st": attrState, "#p": attrProcessed}
	values := item{":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning), ":n": avN(n)}
	adds := []string{"#p :n"}
	// Sorted, so the expression is the same for the same counts.
	for i, a := range slices.Sorted(maps.Keys(added)) {
		k := strconv.Itoa(i)
		names["#c"+k] = a
		values[":c"+k] = avN(added[a])
		adds = append(adds, "#c"+k+" :c"+k)
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(s.t.Batches),
		Key:                       batchKey(accountID, id),
		UpdateExpression:          aws.String("ADD " + strings.Join(adds, ", ")),
		ConditionExpression:       aws.String("#st IN (:q, :r)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}}
}

// completeIfDone returns the batch as it is now, completing it first if it
// takes results and every item has its result.
func (s *Store) completeIfDone(ctx context.Context, accountID, id string, now time.Time) (evs.Batch, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		return evs.Batch{}, err
	}
	st := evs.State(getS(it, attrState))
	if st.Final() || getN(it, attrProcessed) < getN(it, attrItemCount) {
		return batchFrom(it), nil
	}
	var out *dynamodb.UpdateItemOutput
	err = s.retryConflict(ctx, func() (err error) {
		out, err = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                aws.String(s.t.Batches),
			Key:                      batchKey(accountID, id),
			UpdateExpression:         aws.String("SET #st = :done, #ca = :now"),
			ConditionExpression:      aws.String("#st IN (:q, :r) AND #p >= #n"),
			ExpressionAttributeNames: map[string]string{"#st": attrState, "#ca": attrCompletedAt, "#p": attrProcessed, "#n": attrItemCount},
			ExpressionAttributeValues: item{
				":done": avS(evs.StateCompleted), ":now": avTime(now),
				":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning),
			},
			ReturnValues: types.ReturnValueAllNew,
		})
		return err
	})
	if isConditionFailed(err) {
		// Another caller completed (or cancelled) it first.
		return s.Batch(ctx, accountID, id)
	}
	if err != nil {
		return evs.Batch{}, wrapErr("complete batch", err)
	}
	return batchFrom(out.Attributes), nil
}

// Results returns up to limit results with Seq > afterSeq (of status, if
// set) in Seq order, querying each results key in turn.
func (s *Store) Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil || limit <= 0 {
		return nil, err
	}
	var filter *string
	values := item{}
	if status != "" {
		filter = aws.String("#s = :s")
		values[":s"] = avS(string(status))
	}
	var out []evs.Result
	maxSeq := int(getN(it, attrMaxSeq))
	for seq := max(afterSeq+1, 0); seq <= maxSeq && len(out) < limit; seq = (seq/rowsPerKey + 1) * rowsPerKey {
		err := s.queryKey(ctx, resultKey(accountID, id, seq), afterSeq, maxSeq, filter, nil, values, func(it item) bool {
			email := getS(it, attrResultEmail)
			d, derr := store.DecodeDecision(email, getB(it, attrDecision))
			if derr != nil {
				err = cmp.Or(err, derr)
				return false
			}
			out = append(out, evs.Result{Seq: int(getN(it, attrSeq)), Email: email, Decision: d})
			return len(out) < limit
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// queryKey passes one results key's rows with seq in (after, upTo] to each
// until it returns false.
func (s *Store) queryKey(ctx context.Context, key string, after, upTo int, filter, projection *string, values item, each func(item) bool) error {
	names := map[string]string{"#b": attrBatchID, "#q": attrSeq}
	if filter != nil {
		names["#s"] = attrStatus
	}
	vals := item{":b": avS(key), ":lo": avN(int64(after + 1)), ":hi": avN(int64(upTo))}
	maps.Copy(vals, values)
	return s.query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Results),
		KeyConditionExpression:    aws.String("#b = :b AND #q BETWEEN :lo AND :hi"),
		FilterExpression:          filter,
		ProjectionExpression:      projection,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
		ConsistentRead:            aws.Bool(true),
	}, "read results", each)
}

// query passes the items in matches to each until it returns false.
func (s *Store) query(ctx context.Context, in *dynamodb.QueryInput, op string, each func(item) bool) error {
	return pages(ctx, dynamodb.NewQueryPaginator(s.c, in), op, func(page *dynamodb.QueryOutput) bool {
		return !slices.ContainsFunc(page.Items, func(it item) bool { return !each(it) })
	})
}

// pages passes the pages p reads to each until it returns false.
func pages[O any](ctx context.Context, p interface {
	HasMorePages() bool
	NextPage(context.Context, ...func(*dynamodb.Options)) (O, error)
}, op string, each func(O) bool) error {
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return wrapErr(op, err)
		}
		if !each(page) {
			return nil
		}
	}
	return nil
}

// InputItems returns up to limit items from position from of the input object
// (plan order: by domain) and the position after them, or -1 at its end: a
// GET of the object's index, one of the chunks.
func (s *Store) InputItems(ctx context.Context, accountID, id string, from, limit int) ([]evs.Item, int, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		return nil, -1, err
	}
	key := getS(it, attrInput)
	if key == "" || limit <= 0 || from < 0 {
		return nil, -1, nil
	}
	r, err := s.in.open(ctx, key)
	if err != nil {
		return nil, -1, err
	}
	c, n := from/inputChunk, len(r.offsets)-1
	if c >= n {
		return nil, -1, nil
	}
	to := min((from+limit+inputChunk-1)/inputChunk, n)
	items, err := r.chunks(ctx, c, to)
	if err != nil {
		return nil, -1, err
	}
	items = items[min(from-c*inputChunk, len(items)):]
	if len(items) > limit || to < n {
		items = items[:min(limit, len(items))]
		return items, from + len(items), nil
	}
	return items, -1, nil
}

// FirstPending returns the smallest seq in (after, upTo] without a result, or
// -1, reading the written seqs a results key at a time up to the first gap.
func (s *Store) FirstPending(ctx context.Context, accountID, id string, after, upTo int) (int, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		return -1, err
	}
	hi := min(upTo, int(getN(it, attrMaxSeq)))
	for lo := max(after+1, 0); lo <= hi; lo = (lo/rowsPerKey + 1) * rowsPerKey {
		end := min(hi, (lo/rowsPerKey+1)*rowsPerKey-1)
		next := lo
		err := s.queryKey(ctx, resultKey(accountID, id, lo), lo-1, end, nil, aws.String("#q"), nil, func(it item) bool {
			if int(getN(it, attrSeq)) != next {
				return false
			}
			next++
			return true
		})
		if err != nil {
			return -1, err
		}
		if next <= end {
			return next, nil
		}
	}
	return -1, nil
}

// UnfinishedBatches lists every account's visible queued or running batches,
// oldest first, from the active index (sweep.go), which may miss a batch
// created a moment ago.
func (s *Store) UnfinishedBatches(ctx context.Context) ([]evs.Batch, error) {
	un, _, err := s.activeBatches(ctx)
	return un, err
}

// keysPerGet is BatchGetItem's limit.
const keysPerGet = 100

// WithoutResults returns the given items that have no result yet, in order,
// so a redelivered message never asks a mail server about an address twice.
// Strongly consistent reads, 100 keys a call.
func (s *Store) WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error) {
	keys := make([]item, len(items))
	for i, it := range items {
		keys[i] = item{attrBatchID: avS(resultKey(accountID, id, it.Seq)), attrSeq: avN(int64(it.Seq))}
	}
	recs, err := s.getAll(ctx, s.t.Results, keys,
		&projection{expr: "#q, #s", names: map[string]string{"#q": attrSeq, "#s": attrStatus}}, "read batch items")
	if err != nil {
		return nil, err
	}
	done := make(map[int]bool, len(recs))
	for _, r := range recs {
		if _, ok := r[attrStatus]; ok {
			done[int(getN(r, attrSeq))] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(items), func(it evs.Item) bool { return done[it.Seq] }), nil
}
