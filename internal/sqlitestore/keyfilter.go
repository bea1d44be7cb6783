package sqlitestore

import (
	"context"
	"database/sql"
	"hash/maphash"
	"sync/atomic"
)

// filterWords is the size of a keyFilter's bitmap in 64-bit words: 2 MiB
// whatever the number of keys. With n keys a new key's lookup still reads
// the database with probability 1-e^(-n/2^24) (6% at a million): the
// filter fades into a read as it fills rather than growing.
const filterWords = 1 << 18

// keyFilter tells a serving store that a scope has no rows without
// reading the database: one bit per hashed scope, set once a row of that
// scope is committed, never a false "no". LookupIdempotency uses it (the
// lookup was a quarter of a keyed call, `make bench-http`), and so do the
// outcome history reads of every verdict. It is only sound where this
// process writes every row (OpenServing).
type keyFilter struct {
	seed maphash.Seed
	// query selects the scopes of the rows the database holds.
	query string
	cur   atomic.Pointer[[filterWords]atomic.Uint64]
	// next is the bitmap a rebuild is filling, nil otherwise: records
	// committed during the rebuild's scan mark it too.
	next atomic.Pointer[[filterWords]atomic.Uint64]
}

// slot is the word and bit of the scope that is the concatenation of
// parts: hashed piece by piece, so a caller need not build it.
func (f *keyFilter) slot(parts ...string) (int, uint64) {
	var mh maphash.Hash
	mh.SetSeed(f.seed)
	for _, p := range parts {
		mh.WriteString(p)
	}
	h := mh.Sum64()
	return int(h>>6) & (filterWords - 1), 1 << (h & 63)
}

// add marks scope. It runs after the row's commit, and reads next
// before cur: if next is set, the bitmap being built gets the mark; if it
// is nil, either no rebuild has begun its scan (which will then read the
// committed record) or the last one has already made its bitmap cur.
func (f *keyFilter) add(scope ...string) {
	w, m := f.slot(scope...)
	if n := f.next.Load(); n != nil {
		n[w].Or(m)
	}
	f.cur.Load()[w].Or(m)
}

// mayHave is false only when scope (the concatenation of its parts) has
// no committed row.
func (f *keyFilter) mayHave(scope ...string) bool {
	w, m := f.slot(scope...)
	return f.cur.Load()[w].Load()&m != 0
}

// rebuild replaces the bitmap with one of the scopes db holds now, so that
// the marks of swept rows stop costing reads. Rebuilds must not overlap
// (Open runs the first, Sweep the later ones, one at a time).
func (f *keyFilter) rebuild(ctx context.Context, db *sql.DB) error {
	fresh := new([filterWords]atomic.Uint64)
	f.next.Store(fresh)
	defer f.next.Store(nil)
	var scope string
	rows, err := db.QueryContext(ctx, f.query)
	err = eachRow(rows, err, "fill a filter", func(rows *sql.Rows) error {
		if err := rows.Scan(&scope); err != nil {
			return dbErr("fill a filter", err)
		}
		w, m := f.slot(scope)
		fresh[w].Or(m)
		return nil
	})
	if err != nil {
		return err
	}
	f.cur.Store(fresh)
	return nil
}

// newKeyFilter returns the filter of the scopes query selects in db.
func newKeyFilter(ctx context.Context, db *sql.DB, query string) (*keyFilter, error) {
	f := &keyFilter{seed: maphash.MakeSeed(), query: query}
	f.cur.Store(new([filterWords]atomic.Uint64))
	return f, f.rebuild(ctx, db)
}
