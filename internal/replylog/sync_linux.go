package replylog

import (
	"errors"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// syncer makes a segment's written data durable: fdatasync, asked of the
// kernel asynchronously and waited for on an eventfd that the Go netpoller
// watches. It uses io_uring (IORING_OP_FSYNC with IORING_FSYNC_DATASYNC)
// where the kernel allows it, else Linux AIO (IOCB_CMD_FDSYNC), else
// fdatasync(2) itself.
//
// Why not fdatasync(2) itself: a goroutine in a blocking system call keeps
// its processor (P) until the runtime's monitor takes it back, 20–40 µs
// later, and when the call returns it must wait for a free P, often behind
// every runnable goroutine. The flusher syncs thousands of times a second,
// so on 2 CPUs that idled a CPU and delayed every group. Why io_uring before
// AIO: AIO runs the sync on a kernel worker bound to the submitting CPU,
// which on a busy machine waits for that CPU; io_uring's workers may run
// on any CPU. `make bench-http`, same runs on 2 CPUs, unique
// Idempotency-Key calls / plain verify: fdatasync(2) 0.33–0.36×, AIO
// 0.48–0.52×, io_uring 0.54–0.57×. The data reaches the disk by the same
// kernel path (vfs_fsync_range, datasync), so durability is the same.
//
// A kernel or sandbox that refuses io_uring (kernel.io_uring_disabled,
// container seccomp profiles) or AIO falls back to the next, for good.
type syncer struct {
	ur  *uring
	aio *aio
	// kind names the one in use (syncURing…); Stats reads it while the
	// flusher may fall back.
	kind atomic.Value
}

// syncKinds, in order of preference.
const (
	syncURing     = "io_uring"
	syncAIO       = "aio"
	syncFdatasync = "fdatasync"
)

// forceSync, when a test sets it, is the kind newSyncer must use.
var forceSync string

func newSyncer() *syncer {
	s := &syncer{}
	s.kind.Store(syncFdatasync)
	if forceSync == "" || forceSync == syncURing {
		if ur, err := newURing(); err == nil {
			s.ur = ur
			s.kind.Store(syncURing)
			return s
		}
	}
	if forceSync == "" || forceSync == syncAIO {
		if a, err := newAIO(); err == nil {
			s.aio = a
			s.kind.Store(syncAIO)
		}
	}
	return s
}

// datasync makes f's written data durable. Only one runs at a time.
func (s *syncer) datasync(f *os.File) error {
	var err error
	switch {
	case s.ur != nil:
		err = s.ur.datasync(f)
	case s.aio != nil:
		err = s.aio.datasync(f)
	default:
		return fdatasync(f)
	}
	if errors.Is(err, errUnsupported) {
		// Refused for this file, before anything was asked of the disk.
		s.close()
		return fdatasync(f)
	}
	return err
}

// errUnsupported is an asynchronous sync refused outright: the next kind
// is to be used.
var errUnsupported = errors.New("asynchronous sync not supported")

// unsupported tells whether a submission's error means the kind is not
// offered here (as opposed to a failure of the sync).
func unsupported(e unix.Errno) bool {
	return e == unix.EINVAL || e == unix.EOPNOTSUPP || e == unix.ENOSYS || e == unix.EPERM
}

// close releases what the kind holds; later syncs use fdatasync(2).
func (s *syncer) close() {
	if s.ur != nil {
		s.ur.close()
	}
	if s.aio != nil {
		s.aio.close()
	}
	s.ur, s.aio = nil, nil
	s.kind.Store(syncFdatasync)
}

// name is the kind of sync in use.
func (s *syncer) name() string { return s.kind.Load().(string) }

// waitEvent parks the caller in the netpoller, holding no P, until the
// eventfd ev counts a completion.
func waitEvent(ev *os.File) error {
	var cnt [8]byte
	_, err := io.ReadFull(ev, cnt[:])
	return err
}

// newEventfd returns a non-blocking eventfd as a file the netpoller reads.
func newEventfd() (*os.File, int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, -1, err
	}
	return os.NewFile(uintptr(fd), "replylog-eventfd"), fd, nil
}

// fdatasync is fdatasync(2), which skips the metadata a read does not need
// (times), but not the length an append changed.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
