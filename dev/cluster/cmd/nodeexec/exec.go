package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

// execHandler serves the kubelet's /exec endpoint with cri-streaming's
// remotecommand server (SPDY from the API server's stream translator, or a
// WebSocket passed through), so the protocol side is the real kubelet code.
type execHandler struct{ pods *podManager }

func (h *execHandler) serve(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	serveExec(w, r, &podExecutor{pods: h.pods, namespace: ns}, pod, r.PathValue("uid"), container)
}

// serveExec runs ServeExec with a request whose context ends with the exec's
// connection; ServeExec hands that context to the executor. The request's
// own context does not: after a SPDY GOAWAY (the API server closing its
// side) or a WebSocket close frame the stream code closes the hijacked
// connection itself, with no failed read for net/http to notice. So the
// hijacked connection is watched: its closing, or a failed read (the peer
// vanished), ends the context.
func serveExec(w http.ResponseWriter, r *http.Request, ex remotecommand.Executor, pod, uid, container string) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, end := context.WithCancel(r.Context())
	defer end()
	remotecommand.ServeExec(&connWatcher{ResponseWriter: w, end: end}, r.WithContext(ctx), ex, pod, uid, container,
		r.URL.Query()["command"], opts, 4*time.Hour, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

// connWatcher hands out the hijacked connection wrapped in a watchedConn.
// It has no Unwrap on purpose: cri-streaming's WebSocket server unwraps
// response writers that have one, and would hijack the bare connection.
type connWatcher struct {
	http.ResponseWriter
	end context.CancelFunc
}

func (w *connWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &watchedConn{Conn: conn, end: w.end}
	// The stream protocols read through rw.Reader, which reads the bare
	// connection: read through wc instead, after what is buffered already.
	buffered, _ := rw.Reader.Peek(rw.Reader.Buffered())
	rw.Reader = bufio.NewReader(io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), wc))
	return wc, rw, nil
}

type watchedConn struct {
	net.Conn
	end context.CancelFunc
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// podExecutor runs a command inside a pod's namespaces.
type podExecutor struct {
	pods      *podManager
	namespace string
}

// ExecInContainer implements remotecommand.Executor. Like a real kubelet it
// does not kill the process when the client goes away: only the pod's
// deletion (or the process itself) ends it; see attach for its streams, and
// attachTTY for a TTY exec's terminal (ServeExec leaves errOut nil then).
func (e *podExecutor) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	p, spec, err := e.pods.enter(e.namespace, name, uid, container)
	if err != nil {
		return err
	}
	c := podCommand(p.initPID, spec, cmd)
	start := func(c *exec.Cmd) error { return startInPod(c, p.initPID, p.cgroup) }
	if tty {
		err = attachTTY(ctx, c, start, int(spec.security.uid), int(spec.security.gid), in, writer(out), resize)
	} else {
		err = attach(ctx, c, start, in, writer(out), writer(errOut))
	}
	if err == nil {
		return nil
	}
	if code, ok := exitCode(err); ok {
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	if ctx.Err() == nil { // a stream that ended is logged by ServeExec
		klog.Errorf("exec in %s/%s: %v", e.namespace, name, err)
	}
	return err
}

// exitCode is the exit code of a process that ended with err, as container
// runtimes report it: 128+N for a process killed by signal N.
func exitCode(err error) (int, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), true
	}
	return ws.ExitStatus(), true
}

// writer keeps a missing stream a nil io.Writer (not a typed nil).
func writer(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}

// podCommand is cmd run by nsenter in the pod init's mount, UTS and IPC
// namespaces and root (not its PID namespace: see startInPod), then by
// setpriv as the container's user, groups and capabilities (security.go).
func podCommand(initPID int, spec execSpec, cmd []string) *exec.Cmd {
	// nsenter opens an explicit --wd path before it enters the namespaces, so
	// name the directory through the pod init's root.
	pid := fmt.Sprint(initPID)
	args := append([]string{
		"--target", pid, "--mount", "--uts", "--ipc",
		"--root", "--wd=/proc/" + pid + "/root" + path.Clean("/"+spec.workDir), "--",
	}, spec.security.setpriv()...)
	c := exec.Command("nsenter", append(args, cmd...)...)
	c.Env = spec.env
	return c
}

// startInPod starts c in the PID namespace of the pod init initPID, as a
// child of nodeexec, which waits for it: what a container runtime does (runc
// joins the namespaces; the runtime's shim is the parent, outside the pod).
// Without --pid, nsenter only sets up the rest and execs the command in place.
//
// With --pid, nsenter forked the command and waited for it with WUNTRACED,
// stopping itself whenever the command stopped (util-linux's
// continue_as_child, made for shell job control). The provider's kill stops a
// command before it kills it; nothing in the pod sees nsenter to continue it,
// so the killed command stayed a zombie under a stopped nsenter, which
// nodeexec waited for, holding the exec's connection, forever.
//
// The forking thread first joins the pod's cgroup cg (nil: none), so the
// process starts in it, as runc starts a process in the container's cgroup.
func startInPod(c *exec.Cmd, initPID int, cg *podCgroup) error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		return fmt.Errorf("pod init %d: %w", initPID, err)
	}
	defer ns.Close()
	started := make(chan error, 1)
	go func() {
		// setns(CLONE_NEWPID) sets the PID namespace of the processes this
		// thread forks from now on (not its own), and exec.Cmd.Start forks
		// from the calling thread. The thread is never unlocked: the runtime
		// ends it with this goroutine rather than run others on it, and
		// creates new threads from a clean one meanwhile.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWPID); err != nil {
			started <- fmt.Errorf("enter the PID namespace of pod init %d: %w", initPID, err)
			return
		}
		if err := cg.join(); err != nil {
			started <- err
			return
		}
		err := c.Start()
		if left := cg.leave(); left != nil && err == nil {
			// The process runs (in the pod's cgroup); only this thread is
			// left in the wrong place.
			klog.Errorf("%v", left)
		}
		started <- err
	}()
	return <-started
}

// attach starts c with start, connected to an exec's streams the way a
// container runtime connects them, and waits for it:
//
//   - each stream gets its own pipe, of which the process holds only its end;
//   - output is copied until every writer (background children included) has
//     closed it, or until the stream fails; then our read end is closed, so
//     whoever still writes gets EPIPE (SIGPIPE) from then on;
//   - when the exec's stream ends (ctx: the client or the API server went
//     away), attach closes its pipe ends and returns at once, as `docker exec`
//     does when its client goes: the process keeps running, a kubelet does
//     not kill it (only the pod's deletion does), but its output is no longer
//     read and thrown away;
//   - the process is waited for in a goroutine from the start, so it is
//     reaped whenever it exits, whether or not anyone still listens.
//
// Nothing of a finished exec is left: the stdin copy ends with the stream
// (ServeExec closes it when this returns), the others end here.
// It returns c.Wait's error once the process has exited and its output
// ended, or an error as soon as ctx ends.
func attach(ctx context.Context, c *exec.Cmd, start func(*exec.Cmd) error, in io.Reader, out, errOut io.Writer) error {
	var ours, theirs []*os.File // our ends of the pipes, and the process's
	closeAll := func(files []*os.File) {
		for _, f := range files {
			_ = f.Close()
		}
	}
	// pipe returns our end of a new pipe, the read end if ourRead, and
	// gives the process the other. A stream that is not there stays nil:
	// os/exec gives the process /dev/null instead.
	pipe := func(ourRead bool) (ourEnd, itsEnd *os.File, err error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		if ourRead {
			ourEnd, itsEnd = r, w
		} else {
			ourEnd, itsEnd = w, r
		}
		ours, theirs = append(ours, ourEnd), append(theirs, itsEnd)
		return ourEnd, itsEnd, nil
	}
	type output struct {
		r *os.File
		w io.Writer
	}
	var outputs []output
	var stdin *os.File
	err := func() error {
		for _, o := range []struct {
			w  io.Writer
			to *io.Writer
		}{{out, &c.Stdout}, {errOut, &c.Stderr}} {
			if o.w == nil {
				continue
			}
			r, w, err := pipe(true)
			if err != nil {
				return err
			}
			*o.to = w
			outputs = append(outputs, output{r, o.w})
		}
		if in != nil {
			w, r, err := pipe(false)
			if err != nil {
				return err
			}
			c.Stdin, stdin = r, w
		}
		return start(c)
	}()
	closeAll(theirs) // the process has its own copies now, or never will
	if err != nil {
		closeAll(ours)
		return err
	}
	// Closing our ends on return ends the copies below: the process's
	// writes fail with EPIPE from then on, and its reads of stdin see EOF.
	defer closeAll(ours)

	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	if stdin != nil {
		go func() {
			// EOF reaches the process when the client half-closes stdin.
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	var copies sync.WaitGroup
	for _, o := range outputs {
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(o.w, o.r)
			_ = o.r.Close() // at EOF, or the stream failed: EPIPE for writers from now on
		}()
	}
	copied := make(chan struct{})
	go func() {
		copies.Wait()
		close(copied)
	}()

	var exitErr error
	waiting, copying := exited, copied // each nil once it is over
	for waiting != nil || copying != nil {
		select {
		case exitErr = <-waiting:
			waiting = nil
		case <-copying:
			copying = nil
		case <-ctx.Done():
			return fmt.Errorf("the exec's stream ended before the command and its output (%w); "+
				"the process keeps running, its output pipes are closed", context.Cause(ctx))
		}
	}
	return exitErr
}
