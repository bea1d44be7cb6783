package replylog

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// uring is an io_uring for one fdatasync at a time (IORING_OP_FSYNC with
// IORING_FSYNC_DATASYNC), its completions signalled on a registered
// eventfd. Only what that needs of the ABI (<linux/io_uring.h>) is here.
type uring struct {
	fd       int
	sq, cq   []byte // the mapped submission and completion rings
	sqes     []byte // the mapped submission entries
	p        uringParams
	ev       *os.File
	sqTail   *uint32
	sqMask   uint32
	sqArray  uint32 // offset of the index array in sq
	cqHead   *uint32
	cqTail   *uint32
	cqMask   uint32
	cqCQEs   uint32 // offset of the entries in cq
	unmapped bool
}

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

const (
	uringOffSQRing     = 0
	uringOffCQRing     = 0x8000000
	uringOffSQEs       = 0x10000000
	uringOpFsync       = 3 // IORING_OP_FSYNC
	uringFsyncDatasync = 1 // IORING_FSYNC_DATASYNC
	uringRegEventfd    = 4 // IORING_REGISTER_EVENTFD
	sqeSize            = 64
	cqeSize            = 16
)

func newURing() (_ *uring, err error) {
	r := &uring{fd: -1}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&r.p)), 0)
	if e != 0 {
		return nil, e
	}
	r.fd = int(fd)
	mmap := func(off int64, n uint32) ([]byte, error) {
		return unix.Mmap(r.fd, off, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	}
	if r.sq, err = mmap(uringOffSQRing, r.p.sqOff.array+r.p.sqEntries*4); err != nil {
		return nil, err
	}
	if r.cq, err = mmap(uringOffCQRing, r.p.cqOff.cqes+r.p.cqEntries*cqeSize); err != nil {
		return nil, err
	}
	if r.sqes, err = mmap(uringOffSQEs, r.p.sqEntries*sqeSize); err != nil {
		return nil, err
	}
	var evfd int
	if r.ev, evfd, err = newEventfd(); err != nil {
		return nil, err
	}
	efd := int32(evfd)
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, fd, uringRegEventfd, uintptr(unsafe.Pointer(&efd)), 1, 0, 0); e != 0 {
		return nil, e
	}
	r.sqTail, r.sqMask, r.sqArray = word(r.sq, r.p.sqOff.tail), *word(r.sq, r.p.sqOff.ringMask), r.p.sqOff.array
	r.cqHead, r.cqTail, r.cqMask, r.cqCQEs = word(r.cq, r.p.cqOff.head), word(r.cq, r.p.cqOff.tail), *word(r.cq, r.p.cqOff.ringMask), r.p.cqOff.cqes
	return r, nil
}

// word is the 32-bit word of a mapped ring at off.
func word(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

func (r *uring) datasync(f *os.File) error {
	tail := atomic.LoadUint32(r.sqTail)
	idx := tail & r.sqMask
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	sqe[0] = uringOpFsync
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(f.Fd())
	*(*uint32)(unsafe.Pointer(&sqe[28])) = uringFsyncDatasync
	*word(r.sq, r.sqArray+idx*4) = idx
	// The entry is written before the tail that publishes it (Go's atomics
	// are sequentially consistent).
	atomic.StoreUint32(r.sqTail, tail+1)
	for {
		n, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n != 1 {
			// Nothing was consumed: take the entry back.
			atomic.StoreUint32(r.sqTail, tail)
			if unsupported(e) {
				return errUnsupported
			}
			return fmt.Errorf("io_uring_enter: %w", errnoOr(e, "nothing submitted"))
		}
		break
	}
	for {
		head := atomic.LoadUint32(r.cqHead)
		if head != atomic.LoadUint32(r.cqTail) {
			off := r.cqCQEs + (head&r.cqMask)*cqeSize
			res := *(*int32)(unsafe.Pointer(&r.cq[off+8]))
			atomic.StoreUint32(r.cqHead, head+1)
			if res < 0 {
				if e := unix.Errno(-res); e == unix.EINVAL || e == unix.EOPNOTSUPP {
					return errUnsupported // the file cannot be synced this way
				}
				return unix.Errno(-res)
			}
			return nil
		}
		// Parks in the netpoller until the completion is posted. A count
		// left from an earlier completion only loops once more.
		if err := waitEvent(r.ev); err != nil {
			return fmt.Errorf("wait for the sync: %w", err)
		}
	}
}

// close unmaps the rings and closes the ring and the eventfd; what fails
// there leaves nothing to undo.
func (r *uring) close() {
	if r.unmapped {
		return
	}
	r.unmapped = true
	for _, m := range [][]byte{r.sq, r.cq, r.sqes} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	if r.ev != nil {
		r.ev.Close()
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
}
