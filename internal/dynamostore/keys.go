package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Key prefixes of the Keys table's single-table layout.
const (
	prefixAccount = "acct#"
	prefixName    = "name#"
	prefixKey     = "key#"
	prefixKeyID   = "keyid#"
)

// Keys table attributes.
const (
	attrKind       = "kind" // "account" or "key", for the admin scans
	attrName       = "name"
	attrTest       = "test"
	attrSuspended  = "suspended"
	attrCreatedAt  = "createdAt"
	attrHash       = "hash"
	attrKeyID      = "keyId"
	attrRevoked    = "revoked"
	attrRevokedAt  = "revokedAt"
	attrUsageKeyID = "usageKeyId"
	attrKeyKind    = "keyKind"
	attrOrigins    = "origins"
	// attrRatePerAddress and attrRatePerKey are a publishable key's own
	// rate limits (evs.KeyLimits), absent for the default.
	attrRatePerAddress = "ratePerAddress"
	attrRatePerKey     = "ratePerKey"

	kindAccount = "account"
	kindKey     = "key"
)

func notExists() *string { return aws.String("attribute_not_exists(pk)") }

// CreateAccount stores a new account and claims its name in one
// transaction. A taken ID or name is CodeInvalidState.
func (s *Store) CreateAccount(ctx context.Context, a evs.Account) error {
	if err := store.CheckAccount(a); err != nil {
		return err
	}
	acct := item{
		attrPK:        avS(prefixAccount + a.ID),
		attrKind:      avS(kindAccount),
		attrID:        avS(a.ID),
		attrName:      avS(a.Name),
		attrTest:      avBool(a.Test),
		attrSuspended: avBool(a.Suspended),
		attrCreatedAt: avTime(a.CreatedAt),
		// A resent transaction whose first reply was lost fails its
		// condition against its own write; the token tells it so.
		attrCreateToken: avS(newToken()),
	}
	name := item{attrPK: avS(prefixName + a.Name), attrAccountID: avS(a.ID)}
	_, err := s.c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.t.Keys), Item: acct, ConditionExpression: notExists()}},
		{Put: &types.Put{TableName: aws.String(s.t.Keys), Item: name, ConditionExpression: notExists()}},
	}})
	if failed, ok := conditionFailures(err); ok {
		if failed[0] {
			if _, mine, _ := s.mine(ctx, s.t.Keys, item{attrPK: acct[attrPK]}, attrCreateToken, getS(acct, attrCreateToken), "create account"); mine {
				return nil // our own earlier attempt wrote both items
			}
			return store.AccountExists()
		}
		return store.AccountNameTaken()
	}
	return wrapErr("create account", err)
}

// find is get, with missing() the error when there is no item.
func (s *Store) find(ctx context.Context, table string, key item, op string, missing func() error) (item, error) {
	it, err := s.get(ctx, table, key, op)
	if err == nil && it == nil {
		err = missing()
	}
	return it, err
}

// get reads one item with a strongly consistent read; a missing item is nil.
func (s *Store) get(ctx context.Context, table string, key item, op string) (item, error) {
	out, err := s.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return out.Item, nil
}

func accountFrom(it item) evs.Account {
	return evs.Account{
		ID:        getS(it, attrID),
		Name:      getS(it, attrName),
		Test:      getBool(it, attrTest),
		Suspended: getBool(it, attrSuspended),
		CreatedAt: getTime(it, attrCreatedAt),
	}
}

// Account returns the account with id, or CodeNotFound.
func (s *Store) Account(ctx context.Context, id string) (evs.Account, error) {
	it, err := s.find(ctx, s.t.Keys, item{attrPK: avS(prefixAccount + id)}, "read account", store.NoAccount)
	if err != nil {
		return evs.Account{}, err
	}
	return accountFrom(it), nil
}

// AccountByName follows the name index entry to the account.
func (s *Store) AccountByName(ctx context.Context, name string) (evs.Account, error) {
	it, err := s.find(ctx, s.t.Keys, item{attrPK: avS(prefixName + name)}, "read account name", store.NoAccount)
	if err != nil {
		return evs.Account{}, err
	}
	return s.Account(ctx, getS(it, attrAccountID))
}

// scanKind Scans the Keys table for items of kind (admin operations only).
func (s *Store) scanKind(ctx context.Context, kind, op string, count bool) ([]item, int, error) {
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(s.t.Keys),
		FilterExpression:          aws.String("#k = :k"),
		ExpressionAttributeNames:  map[string]string{"#k": attrKind},
		ExpressionAttributeValues: item{":k": avS(kind)},
		ConsistentRead:            aws.Bool(true),
	}
	if count {
		in.Select = types.SelectCount
	}
	var (
		items []item
		n     int
	)
	err := pages(ctx, dynamodb.NewScanPaginator(s.c, in), op, func(page *dynamodb.ScanOutput) bool {
		items, n = append(items, page.Items...), n+int(page.Count)
		return true
	})
	return items, n, err
}

// CountAccounts Scans the table; it runs once, at first start.
func (s *Store) CountAccounts(ctx context.Context) (int, error) {
	_, n, err := s.scanKind(ctx, kindAccount, "count accounts", true)
	return n, err
}

// CreateKey stores a key and claims its short ID in one transaction, on the
// condition that its account exists. An unknown account is CodeNotFound; a
// taken hash or ID is CodeInvalidState.
func (s *Store) CreateKey(ctx context.Context, k evs.Key) error {
	key := keyItem(k)
	// A resent transaction whose first reply was lost fails its condition
	// against its own write; the token tells it so.
	key[attrCreateToken] = avS(newToken())
	_, err := s.c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName:           aws.String(s.t.Keys),
			Key:                 item{attrPK: avS(prefixAccount + k.AccountID)},
			ConditionExpression: aws.String("attribute_exists(pk)"),
		}},
		{Put: &types.Put{TableName: aws.String(s.t.Keys), Item: key, ConditionExpression: notExists()}},
		{Put: &types.Put{
			TableName:           aws.String(s.t.Keys),
			Item:                item{attrPK: avS(prefixKeyID + k.ID), attrHash: avS(k.Hash)},
			ConditionExpression: notExists(),
		}},
	}})
	if failed, ok := conditionFailures(err); ok {
		if failed[0] {
			return store.NoAccount()
		}
		if _, mine, _ := s.mine(ctx, s.t.Keys, item{attrPK: key[attrPK]}, attrCreateToken, getS(key, attrCreateToken), "create key"); mine {
			return nil // our own earlier attempt wrote all three items
		}
		return store.KeyExists()
	}
	return wrapErr("create key", err)
}

func keyItem(k evs.Key) item {
	it := item{
		attrPK:         avS(prefixKey + k.Hash),
		attrKind:       avS(kindKey),
		attrHash:       avS(k.Hash),
		attrKeyID:      avS(k.ID),
		attrAccountID:  avS(k.AccountID),
		attrRevoked:    avBool(k.Revoked),
		attrCreatedAt:  avTime(k.CreatedAt),
		attrUsageKeyID: avS(k.UsageKeyID),
	}
	if !k.RevokedAt.IsZero() {
		it[attrRevokedAt] = avTime(k.RevokedAt)
	}
	// A secret key, as every key made before publishable ones, has
	// neither attribute.
	if k.Kind != evs.KeySecret {
		it[attrKeyKind] = avS(string(k.Kind))
	}
	if len(k.Origins) > 0 {
		it[attrOrigins] = &types.AttributeValueMemberL{Value: originValues(k.Origins)}
	}
	for name, n := range map[string]int{attrRatePerAddress: k.Limits.PerAddress, attrRatePerKey: k.Limits.PerKey} {
		if n > 0 {
			it[name] = avN(int64(n))
		}
	}
	return it
}

func keyFrom(it item) evs.Key {
	return evs.Key{
		ID:         getS(it, attrKeyID),
		Hash:       getS(it, attrHash),
		AccountID:  getS(it, attrAccountID),
		Revoked:    getBool(it, attrRevoked),
		CreatedAt:  getTime(it, attrCreatedAt),
		RevokedAt:  getTime(it, attrRevokedAt),
		UsageKeyID: getS(it, attrUsageKeyID),
		Kind:       evs.KeyKind(getS(it, attrKeyKind)),
		Origins:    originsFrom(it),
		Limits:     evs.KeyLimits{PerAddress: int(getN(it, attrRatePerAddress)), PerKey: int(getN(it, attrRatePerKey))},
	}
}

// originValues and originsFrom keep a key's origins as a list, in order.
func originValues(origins []string) []types.AttributeValue {
	vs := make([]types.AttributeValue, len(origins))
	for i, o := range origins {
		vs[i] = avS(o)
	}
	return vs
}

func originsFrom(it item) []string {
	l, ok := it[attrOrigins].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range l.Value {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			out = append(out, s.Value)
		}
	}
	return out
}

// KeyByHash returns the key with that hash, or CodeNotFound.
func (s *Store) KeyByHash(ctx context.Context, hash string) (evs.Key, error) {
	it, err := s.find(ctx, s.t.Keys, item{attrPK: avS(prefixKey + hash)}, "read key", store.NoKey)
	if err != nil {
		return evs.Key{}, err
	}
	return keyFrom(it), nil
}

// RevokeKey marks the key whose hash or short ID is idOrHash revoked at now;
// a key revoked before keeps its first revocation time.
func (s *Store) RevokeKey(ctx context.Context, idOrHash string, now time.Time) (evs.Key, error) {
	if idOrHash == "" {
		return evs.Key{}, store.NoKey()
	}
	hash := idOrHash
	it, err := s.get(ctx, s.t.Keys, item{attrPK: avS(prefixKey + idOrHash)}, "read key")
	if err != nil {
		return evs.Key{}, err
	}
	if it == nil {
		ix, err := s.find(ctx, s.t.Keys, item{attrPK: avS(prefixKeyID + idOrHash)}, "read key ID", store.NoKey)
		if err != nil {
			return evs.Key{}, err
		}
		hash = getS(ix, attrHash)
	}
	out, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Keys),
		Key:                       item{attrPK: avS(prefixKey + hash)},
		UpdateExpression:          aws.String("SET #r = :t, #ra = if_not_exists(#ra, :now)"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  map[string]string{"#r": attrRevoked, "#ra": attrRevokedAt},
		ExpressionAttributeValues: item{":t": avBool(true), ":now": avTime(now)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if isConditionFailed(err) {
		return evs.Key{}, store.NoKey()
	}
	if err != nil {
		return evs.Key{}, wrapErr("revoke key", err)
	}
	return keyFrom(out.Attributes), nil
}

// ListKeys returns every key, oldest first (a Scan: `evs keys list` only).
func (s *Store) ListKeys(ctx context.Context) ([]evs.Key, error) {
	items, _, err := s.scanKind(ctx, kindKey, "list keys", false)
	if err != nil {
		return nil, err
	}
	keys := make([]evs.Key, len(items))
	for i, it := range items {
		keys[i] = keyFrom(it)
	}
	slices.SortFunc(keys, func(a, b evs.Key) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.Hash, b.Hash))
	})
	return keys, nil
}

// conditionFailures tells whether a TransactWriteItems error is a
// cancellation where only conditions failed, and which items failed theirs;
// any other reason (a conflict, throttling) gives ok false.
func conditionFailures(err error) (failed []bool, ok bool) {
	tc, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok {
		return nil, false
	}
	failed = make([]bool, len(tc.CancellationReasons))
	any := false
	for i, r := range tc.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "ConditionalCheckFailed":
			failed[i], any = true, true
		case "", "None":
		default:
			return nil, false
		}
	}
	return failed, any
}
