package replylog

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// aio is a Linux AIO context for one fdatasync at a time
// (IOCB_CMD_FDSYNC), its completions signalled on an eventfd.
type aio struct {
	ctx   uintptr // aio_context_t
	ev    *os.File
	evfd  int
	iocb  iocb
	event ioEvent
}

// iocb is struct iocb of <linux/aio_abi.h>; the fields an fdatasync
// leaves zero are blank.
type iocb struct {
	_      uint64 // aio_data
	_      uint32 // aio_key and aio_rw_flags (their order depends on endianness)
	_      uint32
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	_      uint64 // aio_buf
	_      uint64 // aio_nbytes
	_      int64  // aio_offset
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdFdsync = 3      // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 << 0 // IOCB_FLAG_RESFD
)

func newAIO() (*aio, error) {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, e
	}
	ev, fd, err := newEventfd()
	if err != nil {
		unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, err
	}
	return &aio{ctx: ctx, ev: ev, evfd: fd}, nil
}

func (a *aio) datasync(f *os.File) error {
	a.iocb = iocb{opcode: iocbCmdFdsync, fildes: uint32(f.Fd()), flags: iocbFlagResfd, resfd: uint32(a.evfd)}
	p := &a.iocb
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&p)))
	if e != 0 || n != 1 {
		if unsupported(e) {
			return errUnsupported
		}
		return fmt.Errorf("io_submit: %w", errnoOr(e, "nothing submitted"))
	}
	if err := waitEvent(a.ev); err != nil {
		return fmt.Errorf("wait for the sync: %w", err)
	}
	n, _, e = unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&a.event)), 0, 0)
	if e != 0 || n != 1 {
		return fmt.Errorf("io_getevents: %w", errnoOr(e, "no event"))
	}
	if a.event.res < 0 {
		return unix.Errno(-a.event.res)
	}
	return nil
}

func (a *aio) close() {
	unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
	a.ev.Close()
}

func errnoOr(e unix.Errno, what string) error {
	if e != 0 {
		return e
	}
	return fmt.Errorf("%s", what)
}
