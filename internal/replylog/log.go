// Package replylog keeps the Idempotency-Key records of the one process
// that serves a data directory (`evs serve` in local mode): an append-only
// log of records on disk, and in memory an index from each scope to its
// newest record. It implements idempotency.LocalStore.
//
// It exists because that store's two operations are the whole cost of an
// idempotent call. A lookup is a map probe and a binary search per sealed
// segment (and, only for a key seen before, one read of its record): the
// segment taking appends is indexed by a map, each sealed one by sorted
// arrays of 12 bytes a record. A put appends the record to the log; concurrent
// puts are written together, with one fdatasync per group, and each returns
// only once its group is synced. So a reply a client received survives
// kill -9 and power loss alike, and is replayed, never run again.
//
// The log is a directory of segment files. A segment takes appends until it
// holds Options.SegmentBytes or is Options.SegmentAge old, and is deleted
// whole once every record in it has expired. Each record carries a
// checksum: a crash mid-write leaves a torn tail, which reopening stops at
// (appends then go to a new segment), so only records whose put never
// returned can be lost. A write or sync that fails breaks the log: later
// puts fail rather than write past a region whose state is unknown.
//
// Only one process may open a directory; the caller guarantees it
// (sqlitestore.OpenServing holds the data directory's serve lock).
package replylog

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
)

// ErrLive is Put's answer when the scope already has a live record.
var ErrLive = errors.New("replylog: a live record of this scope exists")

// errClosed is the answer to a call after Close.
var errClosed = errors.New("replylog: the log is closed")

// Options tune a log; zero values take the defaults.
type Options struct {
	// SegmentBytes seals a segment once it holds this many bytes
	// (default 64 MiB).
	SegmentBytes int64
	// SegmentAge seals a segment once its first record is this old
	// (default 1 h), so records expire segment by segment even on a quiet
	// server; the disk then holds at most Retention + SegmentAge of records.
	SegmentAge time.Duration
}

const (
	defaultSegmentBytes = 64 << 20
	defaultSegmentAge   = time.Hour
	segmentExt          = ".log"
)

// Log is an open reply log. It is safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	seed maphash.Seed
	// hash maps a scope to its index key; a test may replace it to force
	// collisions.
	hash func(string) uint64

	// writeMu is held by whoever writes to the active segment or replaces
	// it: the flusher for each group, Sweep to seal an idle segment.
	// Ordered before mu.
	writeMu sync.Mutex

	// mu guards what follows; lookups share it.
	mu sync.RWMutex
	// index maps a scope's hash to its newest record in a segment not yet
	// compacted; overflow holds the newest record of a scope whose hash
	// the index already gives to another scope (a 64-bit collision: in
	// practice never, but exact). A scope found in neither is looked for
	// in the compacted segments, newest first.
	index    map[uint64]loc
	overflow map[string]loc
	// compacted lists the segments whose index moved out of the map, by
	// id ascending.
	compacted []*segment
	// pending holds the scopes of records queued or being written: a
	// second put of one of them is refused as a live record would be.
	pending map[string]struct{}
	segs    map[uint32]*segment
	active  *segment
	next    *group
	broken  error
	closed  bool

	// free holds group buffers already written, for the next groups.
	free [][]byte
	// syncer is the flusher's alone.
	syncer *syncer
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{}
}

// testHash, when a test sets it, replaces every log's scope hash.
var testHash func(string) uint64

// loc is where a record starts: its segment's id and its offset there.
type loc uint64

const offsetBits = 40

func makeLoc(seg uint32, off int64) loc { return loc(uint64(seg)<<offsetBits | uint64(off)) }
func (l loc) seg() uint32               { return uint32(l >> offsetBits) }
func (l loc) off() int64                { return int64(l & (1<<offsetBits - 1)) }

// segment is one file of the log.
type segment struct {
	id uint32
	f  *os.File
	// written is the length of its records: read at Open, or written
	// since (each group's, once written, whether or not synced yet).
	written int64
	// zeroed is how far the file is written (zeros past written); see
	// zeroAhead.
	zeroed int64
	// started is the now of its first record's put; zero while empty.
	started time.Time
	// newest is the latest ExpiresAt (Unix ms) among its records: once
	// it has passed, the whole segment can go.
	newest  int64
	records int
	// keys and offs are the index of a sealed segment, compacted (see
	// compactLocked): its records' scope hashes, sorted, and where each
	// record starts. 12 bytes a record, against about 38 in the map.
	keys []uint64
	offs []uint32
}

// group is the records queued for one write and sync.
type group struct {
	buf  []byte
	recs []queued
	now  time.Time
	err  error
	done chan struct{}
}

// queued is one record of a group.
type queued struct {
	scope   string
	h       uint64
	off     int // in the group's buf
	expires int64
}

func newGroup() *group { return &group{done: make(chan struct{})} }

// scratch holds the buffers Put encodes a record into before it takes the
// lock: one per call otherwise, and most of what a put allocated.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// maxKeptBuf bounds a group buffer kept for reuse.
const maxKeptBuf = 1 << 20

// Open opens the log in dir, creating the directory if needed, reads every
// segment to rebuild the index, and starts a new segment for appends. A
// segment's torn or damaged tail ends that segment's reading; the records
// before it stand.
func Open(dir string, o Options) (*Log, error) {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.SegmentAge <= 0 {
		o.SegmentAge = defaultSegmentAge
	}
	if o.SegmentBytes >= 1<<32 { // a compacted index keeps 32-bit offsets
		return nil, errors.New("replylog: SegmentBytes too large")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("replylog: create %s: %w", dir, err)
	}
	l := &Log{
		dir: dir, opts: o, seed: maphash.MakeSeed(),
		index: make(map[uint64]loc), overflow: make(map[string]loc),
		pending: make(map[string]struct{}), segs: make(map[uint32]*segment),
		next: newGroup(), kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	l.hash = func(s string) uint64 { return maphash.String(l.seed, s) }
	if testHash != nil {
		l.hash = testHash
	}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, err
	}
	l.syncer = newSyncer()
	go l.flusher()
	return l, nil
}

// recover reads the segments in dir in order, then starts a new one.
func (l *Log) recover() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("replylog: read %s: %w", l.dir, err)
	}
	var ids []uint32
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segmentExt)
		if !ok || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 32)
		if err != nil {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	var last uint32
	for _, id := range ids {
		if err := l.load(id); err != nil {
			return err
		}
		// Every segment read is sealed (appends go to a new one): its
		// index is compacted at once, so the map never holds them all.
		l.compactLocked(l.segs[id])
		last = id
	}
	return l.rotate(last + 1)
}

// load reads segment id's records into the index.
func (l *Log) load(id uint32) error {
	f, err := os.OpenFile(l.segPath(id), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("replylog: open segment: %w", err)
	}
	seg := &segment{id: id, f: f}
	l.segs[id] = seg
	r := bufio.NewReaderSize(f, 64<<10)
	var h [headerLen]byte
	var payload []byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("replylog: read segment: %w", err)
		}
		n, sum, err := parseHeader(h[:])
		if err != nil {
			return nil // a torn or damaged tail: the records before it stand
		}
		payload = slices.Grow(payload[:0], n)[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("replylog: read segment: %w", err)
		}
		rec, err := decodePayload(payload, sum)
		if err != nil {
			return nil
		}
		at := makeLoc(id, seg.written)
		seg.written += int64(headerLen + n)
		seg.records++
		seg.newest = max(seg.newest, rec.ExpiresAt.UnixMilli())
		l.publish(rec.Scope, l.hash(rec.Scope), at)
	}
}

func (l *Log) segPath(id uint32) string {
	return filepath.Join(l.dir, fmt.Sprintf("%010d%s", id, segmentExt))
}

// rotate makes a new, empty segment id the active one. The caller holds
// writeMu, or is Open.
func (l *Log) rotate(id uint32) error {
	f, err := os.OpenFile(l.segPath(id), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("replylog: create segment: %w", err)
	}
	// The new file's name must survive a power loss before any record
	// in it is acknowledged.
	if err := syncDir(l.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	seg := &segment{id: id, f: f}
	l.mu.Lock()
	l.segs[id] = seg
	l.active = seg
	l.mu.Unlock()
	return nil
}

// Lookup returns the live record of scope at now: not expired and, if in
// progress, not stale (see idempotency.LocalStore).
func (l *Log) Lookup(_ context.Context, scope string, now time.Time) (idempotency.Record, bool, error) {
	h := l.hash(scope)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return idempotency.Record{}, false, errClosed
	}
	rec, found, err := l.findLocked(scope, h)
	if err != nil || !found || !live(rec, now) {
		return idempotency.Record{}, false, err
	}
	return rec, true, nil
}

// findLocked returns the newest record of scope, live or not. The caller
// holds mu, for reading at least.
func (l *Log) findLocked(scope string, h uint64) (idempotency.Record, bool, error) {
	if at, ok := l.overflow[scope]; ok {
		rec, err := l.readLocked(at)
		return rec, err == nil, err
	}
	if at, ok := l.index[h]; ok {
		rec, err := l.readLocked(at)
		if err != nil || rec.Scope == scope {
			return rec, err == nil, err
		}
		// The map's entry is another scope's: ours, if any, is older.
	}
	for i := len(l.compacted) - 1; i >= 0; i-- {
		seg := l.compacted[i]
		j, _ := slices.BinarySearch(seg.keys, h)
		// Equal hashes sit side by side, by offset: the newest is last.
		k := j
		for k < len(seg.keys) && seg.keys[k] == h {
			k++
		}
		for k--; k >= j; k-- {
			rec, err := l.readLocked(makeLoc(seg.id, int64(seg.offs[k])))
			if err != nil || rec.Scope == scope {
				return rec, err == nil, err
			}
		}
	}
	return idempotency.Record{}, false, nil
}

// compactLocked moves the map's entries for seg, a segment that takes no
// more appends and whose records are all published, into seg's sorted
// arrays. The caller holds mu (or is recovering, alone).
func (l *Log) compactLocked(seg *segment) {
	if seg.keys != nil || l.segs[seg.id] != seg {
		return
	}
	type entry struct {
		h   uint64
		off uint32
	}
	var es []entry
	for h, at := range l.index {
		if at.seg() == seg.id {
			es = append(es, entry{h, uint32(at.off())})
			delete(l.index, h)
		}
	}
	slices.SortFunc(es, func(a, b entry) int {
		if a.h != b.h {
			return cmp.Compare(a.h, b.h)
		}
		return cmp.Compare(a.off, b.off)
	})
	seg.keys, seg.offs = make([]uint64, len(es)), make([]uint32, len(es))
	for i, e := range es {
		seg.keys[i], seg.offs[i] = e.h, e.off
	}
	i, _ := slices.BinarySearchFunc(l.compacted, seg.id, func(s *segment, id uint32) int { return cmp.Compare(s.id, id) })
	l.compacted = slices.Insert(l.compacted, i, seg)
}

// readLocked reads the record at at.
func (l *Log) readLocked(at loc) (idempotency.Record, error) {
	seg := l.segs[at.seg()]
	if seg == nil {
		return idempotency.Record{}, fmt.Errorf("replylog: record in missing segment %d", at.seg())
	}
	// One read for the usual record; a second for a larger one.
	buf := make([]byte, 2048)
	n, err := seg.f.ReadAt(buf, at.off())
	if n < headerLen {
		if err == nil || errors.Is(err, io.EOF) {
			err = errCorrupt
		}
		return idempotency.Record{}, fmt.Errorf("replylog: read record: %w", err)
	}
	size, sum, err := parseHeader(buf)
	if err != nil {
		return idempotency.Record{}, err
	}
	if headerLen+size > n {
		buf = make([]byte, headerLen+size)
		if _, err := seg.f.ReadAt(buf, at.off()); err != nil {
			return idempotency.Record{}, fmt.Errorf("replylog: read record: %w", err)
		}
	}
	return decodePayload(buf[headerLen:headerLen+size], sum)
}

// live mirrors the SQLite store's rule, in its millisecond precision.
func live(rec idempotency.Record, now time.Time) bool {
	ms := now.UnixMilli()
	if rec.ExpiresAt.UnixMilli() <= ms {
		return false
	}
	return rec.State != idempotency.InProgress || rec.LockedUntil.UnixMilli() > ms
}

// Put appends rec unless its scope has a live record at now (ErrLive),
// and returns once rec is synced to disk. When ctx ends first Put returns
// its error, and rec may or may not be stored.
func (l *Log) Put(ctx context.Context, rec idempotency.Record, now time.Time) error {
	bp := scratch.Get().(*[]byte)
	b, err := appendRecord((*bp)[:0], rec)
	defer func() {
		if cap(b) <= maxKeptBuf {
			*bp = b[:0]
			scratch.Put(bp)
		}
	}()
	if err != nil {
		return err
	}
	h := l.hash(rec.Scope)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errClosed
	}
	if l.broken != nil {
		l.mu.Unlock()
		return l.broken
	}
	if _, ok := l.pending[rec.Scope]; ok {
		l.mu.Unlock()
		return ErrLive
	}
	if old, found, err := l.findLocked(rec.Scope, h); err != nil {
		l.mu.Unlock()
		return err
	} else if found && live(old, now) {
		l.mu.Unlock()
		return ErrLive
	}
	g := l.next
	if len(g.recs) == 0 {
		g.now = now
		if g.buf == nil && len(l.free) > 0 {
			g.buf = l.free[len(l.free)-1]
			l.free = l.free[:len(l.free)-1]
		}
	}
	g.recs = append(g.recs, queued{scope: rec.Scope, h: h, off: len(g.buf), expires: rec.ExpiresAt.UnixMilli()})
	g.buf = append(g.buf, b...)
	l.pending[rec.Scope] = struct{}{}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	if ctx.Done() == nil { // context.WithoutCancel, as the Keeper puts
		<-g.done
		return g.err
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flight is a group written to the log, to be answered once synced.
type flight struct {
	g    *group
	seg  *segment
	base int64 // where g.buf starts in seg
	err  error // of its write or sync, when one failed
}

// flusher writes the queued groups and syncs them, one group at a time,
// until Close. One at a time is deliberate: a group's sync covers every
// group written before it, so syncs under way side by side would only
// split the records into more, smaller groups, and more device flushes
// (measured: no faster, and no slower only within noise, with 2 or 4 at
// once).
func (l *Log) flusher() {
	defer close(l.done)
	quit := l.quit
	for {
		for {
			f, ok := l.write()
			if !ok {
				break
			}
			if f.err == nil {
				if err := l.syncer.datasync(f.seg.f); err != nil {
					f.err = fmt.Errorf("replylog: sync: %w", err)
				}
			}
			l.finish(f)
		}
		if quit == nil {
			return // closed, and nothing is queued
		}
		select {
		case <-l.kick:
		case <-quit:
			quit = nil // Close refuses new puts: write what is queued
		}
	}
}

// write writes the queued group, if any, reporting whether there was one;
// a failed write comes back in the flight's err.
func (l *Log) write() (f flight, ok bool) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	g := l.next
	if len(g.recs) == 0 {
		l.mu.Unlock()
		return flight{}, false
	}
	l.next = newGroup()
	seg, err := l.active, l.broken
	l.mu.Unlock()

	n := int64(len(g.buf))
	if err == nil && seg.written > 0 &&
		(seg.written+n > l.opts.SegmentBytes || g.now.Sub(seg.started) >= l.opts.SegmentAge) {
		old := seg
		if err = l.rotate(seg.id + 1); err == nil {
			seg = l.active
			// The flusher answers one group at a time, so every record
			// of the old segment is published by now.
			l.mu.Lock()
			l.compactLocked(old)
			l.mu.Unlock()
		}
	}
	f = flight{g: g, seg: seg, base: seg.written}
	if err == nil {
		if err = l.zeroAhead(seg, seg.written+n); err == nil {
			_, err = seg.f.WriteAt(g.buf, seg.written)
		}
		if err != nil {
			err = fmt.Errorf("replylog: write: %w", err)
		}
	}
	f.err = err
	l.mu.Lock()
	// Written (or failed): the buffer serves a later group.
	if cap(g.buf) <= maxKeptBuf && len(l.free) < 2 {
		l.free = append(l.free, g.buf[:0])
	}
	g.buf = nil
	if err == nil {
		// Counted now, before the sync: Sweep must never take a segment
		// whose records are still on their way.
		if seg.written == 0 {
			seg.started = g.now
		}
		seg.written += n
		seg.records += len(g.recs)
		for _, q := range g.recs {
			seg.newest = max(seg.newest, q.expires)
		}
	}
	l.mu.Unlock()
	return f, true
}

// finish publishes the records of f when it was written and synced, or
// breaks the log with its error; then it answers their puts.
func (l *Log) finish(f flight) {
	l.mu.Lock()
	if f.err != nil && l.broken == nil {
		l.broken = f.err
	}
	// A segment swept while its last group was syncing held only expired
	// records: there is nothing to publish.
	alive := l.segs[f.seg.id] == f.seg
	for _, q := range f.g.recs {
		delete(l.pending, q.scope)
		if f.err == nil && alive {
			l.publish(q.scope, q.h, makeLoc(f.seg.id, f.base+int64(q.off)))
		}
	}
	l.mu.Unlock()
	f.g.err = f.err
	close(f.g.done)
}

// zeros is what zeroAhead writes.
var zeros [1 << 20]byte

// zeroAhead makes sure seg's file is written, with zeros, at least up to
// end, extending it by a whole chunk when it is not. An fdatasync of
// blocks the file already has only flushes them; one that also grows the
// file must commit the file system's journal too, and takes about twice as
// long (measured on ext4). So the log overwrites zeros, and only one sync
// per chunk pays for growth. The sync that follows covers these zeros too;
// recovery reads a zero header as the end of the records.
func (l *Log) zeroAhead(seg *segment, end int64) error {
	if end <= seg.zeroed {
		return nil
	}
	chunk := min(int64(zeroChunk), l.opts.SegmentBytes)
	target := seg.zeroed + max(chunk, end-seg.zeroed)
	for off := seg.zeroed; off < target; {
		n := min(int64(len(zeros)), target-off)
		if _, err := seg.f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	seg.zeroed = target
	return nil
}

// zeroChunk is how far ahead of its records a segment is zeroed.
const zeroChunk = 4 << 20

// publish makes at the newest record of scope. The caller holds mu (or is
// recovering, alone).
func (l *Log) publish(scope string, h uint64, at loc) {
	if _, ok := l.overflow[scope]; ok {
		l.overflow[scope] = at
		return
	}
	old, ok := l.index[h]
	if !ok {
		l.index[h] = at
		return
	}
	// The hash is taken: by an older record of this scope, almost surely.
	// An unreadable one counts as such, as lookups cannot use it either.
	if rec, err := l.readLocked(old); err != nil || rec.Scope == scope {
		l.index[h] = at
		return
	}
	l.overflow[scope] = at
}

// Sweep deletes the segments all of whose records expired by now, and
// returns how many records went with them. A segment still taking appends
// is first sealed, if its records have all expired.
func (l *Log) Sweep(now time.Time) (int, error) {
	ms := now.UnixMilli()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, errClosed
	}
	act := l.active
	sealIdle := act.written > 0 && act.newest <= ms && l.broken == nil
	l.mu.Unlock()
	if sealIdle {
		if err := l.rotate(act.id + 1); err != nil {
			return 0, err
		}
		// All its records expired, so none is in flight.
		l.mu.Lock()
		l.compactLocked(act)
		l.mu.Unlock()
	}

	l.mu.Lock()
	doomed := map[uint32]*segment{}
	n := 0
	for id, seg := range l.segs {
		if seg != l.active && seg.newest <= ms {
			doomed[id] = seg
			n += seg.records
		}
	}
	if len(doomed) > 0 {
		for h, at := range l.index {
			if doomed[at.seg()] != nil {
				delete(l.index, h)
			}
		}
		for s, at := range l.overflow {
			if doomed[at.seg()] != nil {
				delete(l.overflow, s)
			}
		}
		for id := range doomed {
			delete(l.segs, id)
		}
		l.compacted = slices.DeleteFunc(l.compacted, func(s *segment) bool { return doomed[s.id] != nil })
	}
	l.mu.Unlock()
	var errs []error
	for _, seg := range doomed {
		seg.f.Close()
		if err := os.Remove(seg.f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("replylog: delete expired segments: %w", err)
	}
	return n, nil
}

// Close writes what is queued, then closes the log. Calls after it fail.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	// Refuse new calls first, so no put queues behind the flusher's exit.
	l.closed = true
	l.mu.Unlock()
	close(l.quit)
	<-l.done
	l.syncer.close()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	var errs []error
	for _, seg := range l.segs {
		if err := seg.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stats describe a log, for tests and operators.
type Stats struct {
	// Indexed counts the scopes in the map, Compacted those in the sealed
	// segments' arrays, Overflow those whose hash collided.
	Segments, Indexed, Compacted, Overflow int
	// Sync names how writes are synced: "io_uring", "aio" or "fdatasync"
	// on Linux (see syncer), "fsync" elsewhere.
	Sync string
}

// Stats returns l's current figures.
func (l *Log) Stats() Stats {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := Stats{Segments: len(l.segs), Indexed: len(l.index), Overflow: len(l.overflow), Sync: l.syncer.name()}
	for _, seg := range l.compacted {
		st.Compacted += len(seg.keys)
	}
	return st
}
