//go:build !unix || aix

package sqlitestore

import "os"

// lockDir has no flock to take on this system, so OpenServing cannot
// promise exclusivity: the store it opens reports Exclusive() false and the
// server keeps the shared idempotency mode, which is correct for any
// number of processes.
func lockDir(string) (*os.File, error) { return nil, nil }
