package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// openPTY opens a new pseudo-terminal pair from /dev/ptmx, as runc's console
// package does: the master for us, the slave for the process. Only ioctls
// on the master's raw descriptor (never Fd(), which would take the file out
// of Go's poller, so that closing it could no longer end a blocked read).
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	var n uint32
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
			return fmt.Errorf("unlock the pty: %w", err)
		}
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN) // ptsname
		return err
	})
	if err == nil {
		slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// control runs f with f's raw descriptor.
func control(f *os.File, do func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	if err := rc.Control(func(fd uintptr) { inner = do(int(fd)) }); err != nil {
		return err
	}
	return inner
}

// setSize applies a terminal size to the pty (TIOCSWINSZ: the kernel sends
// SIGWINCH to the terminal's foreground process group).
func setSize(master *os.File, size remotecommand.TerminalSize) error {
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
	})
}

// firstSizeWait bounds the wait for a terminal's first size: the resize
// stream's reader delivers it a moment after the exec starts, later on a
// loaded machine (a test saw "size 0 0" when it was only taken if queued).
const firstSizeWait = 2 * time.Second

// attachTTY starts c with start on a new pseudo-terminal, the way a
// container runtime runs a TTY exec, and waits for it:
//
//   - the process is a session leader with the pty as its controlling
//     terminal (setsid, TIOCSCTTY) and as stdin, stdout and stderr, the pty
//     owned by its uid and gid (-1: unchanged) as in a container, so
//     stderr arrives merged into out, job control and Ctrl-C work, and
//     its exit status is reported as for any exec;
//   - sizes from the resize channel are applied as they come; the first is
//     awaited before the process starts (it comes right behind the
//     request: kubectl and the provider send it first), so the process
//     never reads its first byte at the default size; a client that sends
//     none gets the default after firstSizeWait;
//   - input is copied to the master as it comes; the client closing stdin
//     does not close the master (that would hang the terminal up);
//   - the exec ends once the process has exited and the terminal's output
//     has ended (every holder of the slave closed it: EIO on the master);
//   - when the exec's stream ends first (ctx), attach returns at once and,
//     as with a kubelet whose runtime shim keeps the pty master open, the
//     terminal is not hung up: no SIGHUP reaches the process, which keeps
//     running; its output is read and discarded until it closes the
//     terminal, then the master is closed.
func attachTTY(ctx context.Context, c *exec.Cmd, start func(*exec.Cmd) error, uid, gid int, in io.Reader,
	out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	master, slave, err := openPTY()
	if err != nil {
		return err
	}
	if err := slave.Chown(uid, gid); err != nil {
		_, _ = master.Close(), slave.Close()
		return fmt.Errorf("give the pty to the exec's user: %w", err)
	}
	if resize != nil {
		select {
		case size, ok := <-resize:
			if ok {
				_ = setSize(master, size)
			}
		case <-ctx.Done():
		case <-time.After(firstSizeWait):
		}
	}
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Setsid, c.SysProcAttr.Setctty, c.SysProcAttr.Ctty = true, true, 0 // fd 0 in the child
	err = start(c)
	_ = slave.Close() // the process has its own copies now, or never will
	if err != nil {
		_ = master.Close()
		return err
	}

	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	stop := make(chan struct{}) // closed when attachTTY returns: ends the resize loop
	defer close(stop)
	if resize != nil {
		go func() {
			for {
				select {
				case size, ok := <-resize:
					if !ok {
						return
					}
					_ = setSize(master, size)
				case <-stop:
					return
				}
			}
		}()
	}
	if in != nil {
		// Ends when the stream does (ServeExec closes it when this
		// returns) or when the master is closed.
		go func() { _, _ = io.Copy(master, in) }()
	}
	// discard is set once the stream has gone: output is then read and
	// thrown away, so the process never blocks on a full terminal.
	discard := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer master.Close()
		buf := make([]byte, 32*1024)
		dst := out
		for {
			n, err := master.Read(buf)
			if n > 0 && dst != nil {
				select {
				case <-discard:
					dst = nil
				default:
					if _, werr := dst.Write(buf[:n]); werr != nil {
						dst = nil
					}
				}
			}
			if err != nil { // EIO: every holder of the slave closed it
				return
			}
		}
	}()

	var exitErr error
	waiting, copying := exited, copied
	for waiting != nil || copying != nil {
		select {
		case exitErr = <-waiting:
			waiting = nil
		case <-copying:
			copying = nil
		case <-ctx.Done():
			close(discard)
			return fmt.Errorf("the exec's stream ended before the command and its terminal (%w); "+
				"the process keeps running, its terminal is not hung up", context.Cause(ctx))
		}
	}
	return exitErr
}
