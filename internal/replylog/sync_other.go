//go:build !linux

package replylog

import "os"

// syncer makes a segment's written data durable: fsync where fdatasync is
// not offered (on macOS, os.File.Sync asks the drive to flush too).
type syncer struct{}

const syncFsync = "fsync"

// forceSync is what a test asks newSyncer for; only fsync is offered here.
var forceSync string

func newSyncer() *syncer { return &syncer{} }

func (*syncer) name() string { return syncFsync }

func (*syncer) datasync(f *os.File) error { return f.Sync() }

func (*syncer) close() {}
