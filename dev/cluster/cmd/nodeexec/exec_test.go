package main

// Tests of the exec plumbing without a cluster: host commands (and, as root,
// a throwaway PID namespace standing in for a pod) run through attach, and
// through the real ServeExec with client-go's SPDY client.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	clientexec "k8s.io/client-go/tools/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The command prints "early" and exits; a background child it leaves
// writes "late" once the file $0.go exists, and records in $0 how that
// write went: 0 if it was read, 141 (128 + SIGPIPE) if the pipe was closed.
// The child gives up when $0's directory is gone (a test that failed early).
const lateWriter = `( (until [ -e "$0.go" ] || [ ! -d "${0%/*}" ]; do sleep 0.02; done; echo late); echo $? >"$0" ) & echo early`

// lateWrite lets lateWriter's child write, and returns how that went.
func lateWrite(t *testing.T, status string) string {
	t.Helper()
	if err := os.WriteFile(status+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late write is done", func() bool { return readStatus(status) != "" })
	return readStatus(status)
}

// syncBuffer is a bytes.Buffer safe for the copy goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failingWriter is a stream whose peer is gone.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stream reset") }

// hang bounds every wait for something that takes milliseconds when it
// works: only a hang (or broken behaviour) waits it out, however loaded the
// machine.
const hang = 2 * time.Minute

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// noGoroutinesLeft fails unless the goroutine count comes back to base.
func noGoroutinesLeft(t *testing.T, base int) {
	t.Helper()
	for deadline := time.Now().Add(hang); runtime.NumGoroutine() > base; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			var stacks bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("%d goroutines left behind (base %d):\n%s", runtime.NumGoroutine()-base, base, stacks.String())
		}
	}
}

// reaped tells whether pid is gone for good: a zombie still has /proc/<pid>.
func reaped(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return errors.Is(err, os.ErrNotExist)
}

func readStatus(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func TestAttachCopiesStreamsAndReturnsTheExitStatus(t *testing.T) {
	base := runtime.NumGoroutine()
	var out, errOut syncBuffer
	c := exec.Command("sh", "-c", `cat; echo err >&2; (sleep 0.2; echo late) & exit 3`)
	err := attach(context.Background(), c, (*exec.Cmd).Start, strings.NewReader("in\n"), &out, &errOut)
	if code, ok := exitCode(err); !ok || code != 3 {
		t.Fatalf("err = %v, want exit code 3", err)
	}
	// As a kubelet: the exec ends when the output does, a background child's
	// included.
	if out.String() != "in\nlate\n" || errOut.String() != "err\n" {
		t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
	}
	noGoroutinesLeft(t, base)
}

func TestAttachFailedStreamGivesWritersEPIPE(t *testing.T) {
	base := runtime.NumGoroutine()
	var errOut syncBuffer
	// yes with SIGPIPE ignored reports the write error instead of dying.
	c := exec.Command("sh", "-c", `trap "" PIPE; exec yes`)
	err := attach(context.Background(), c, (*exec.Cmd).Start, nil, failingWriter{}, &errOut)
	if code, ok := exitCode(err); !ok || code != 1 {
		t.Fatalf("err = %v, want exit code 1 (stderr %q)", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "Broken pipe") {
		t.Fatalf("stderr %q, want yes's EPIPE (Broken pipe)", errOut.String())
	}
	if !reaped(c.Process.Pid) {
		t.Fatal("the process is not reaped")
	}
	noGoroutinesLeft(t, base)
}

func TestAttachStreamEndClosesPipesAndReaps(t *testing.T) {
	base := runtime.NumGoroutine()
	status := filepath.Join(t.TempDir(), "status")
	var out syncBuffer
	stdin, client := io.Pipe() // a client that never closes stdin
	ctx, end := context.WithCancel(context.Background())
	c := exec.Command("sh", "-c", lateWriter, status)
	done := make(chan error, 1)
	go func() { done <- attach(ctx, c, (*exec.Cmd).Start, stdin, &out, nil) }()

	eventually(t, "the command writes", func() bool { return out.String() == "early\n" })
	// The command itself has exited: it is reaped although its exec goes on.
	eventually(t, "the command is reaped", func() bool { return reaped(c.Process.Pid) })
	select {
	case err := <-done:
		t.Fatalf("attach returned while a child holds stdout: %v", err)
	default:
	}
	end() // the client or the API server went away
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the stream's end", err)
		}
	case <-time.After(hang):
		t.Fatal("attach did not return when the stream ended")
	}
	if s := lateWrite(t, status); s != "141" {
		t.Fatalf("the late write ended with %s, want 141 (SIGPIPE)", s)
	}
	_ = client.Close() // what ServeExec's closing the connection does to stdin
	noGoroutinesLeft(t, base)
}

// hostExecutor runs commands on the host through attach, for ServeExec.
type hostExecutor struct{}

func (hostExecutor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader,
	out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	c := exec.Command(cmd[0], cmd[1:]...)
	var err error
	if tty {
		err = attachTTY(ctx, c, (*exec.Cmd).Start, -1, -1, in, writer(out), resize)
	} else {
		err = attach(ctx, c, (*exec.Cmd).Start, in, writer(out), writer(errOut))
	}
	if code, ok := exitCode(err); ok {
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

// nodeServer serves execs on the host with serveExec; served gets a value
// whenever an exec's handler has returned.
func nodeServer() (srv *httptest.Server, served chan struct{}) {
	served = make(chan struct{}, 10)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveExec(w, r, hostExecutor{}, "pod", "", "c")
		served <- struct{}{}
	}))
	return srv, served
}

func waitServed(t *testing.T, served chan struct{}) {
	t.Helper()
	select {
	case <-served:
	case <-time.After(hang):
		t.Fatal("the exec did not end with its connection")
	}
}

// execOverSPDY runs argv through ServeExec with client-go's SPDY client, as
// the API server's stream translator does.
func execOverSPDY(ctx context.Context, t *testing.T, srv *httptest.Server, stdout io.Writer, argv ...string) error {
	t.Helper()
	q := url.Values{"output": {"1"}, "error": {"1"}, "command": argv}
	u, _ := url.Parse(srv.URL + "/exec/ns/pod/c?" + q.Encode())
	ex, err := clientexec.NewSPDYExecutor(&rest.Config{Host: srv.URL}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	return ex.StreamWithContext(ctx, clientexec.StreamOptions{Stdout: stdout, Stderr: io.Discard})
}

func TestServeExecClientGoneClosesPipes(t *testing.T) {
	base := runtime.NumGoroutine()
	srv, served := nodeServer()
	defer srv.Close()

	// The exit code still comes through.
	err := execOverSPDY(context.Background(), t, srv, io.Discard, "sh", "-c", "exit 3")
	var ce interface{ ExitStatus() int } // client-go's CodeExitError
	if !errors.As(err, &ce) || ce.ExitStatus() != 3 {
		t.Fatalf("err = %v, want exit code 3", err)
	}
	waitServed(t, served)

	status := filepath.Join(t.TempDir(), "status")
	ctx, hangUp := context.WithCancel(context.Background())
	out, w := io.Pipe()
	go func() {
		_ = execOverSPDY(ctx, t, srv, w, "sh", "-c", lateWriter, status)
		_ = w.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "early\n" {
		t.Fatalf("first output %q, %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	hangUp() // the client closes its connection before the child writes
	waitServed(t, served)
	if s := lateWrite(t, status); s != "141" {
		t.Fatalf("the late write ended with %s, want 141 (SIGPIPE)", s)
	}
	srv.Close()
	noGoroutinesLeft(t, base)
}

func TestServeExecWebSocketCloseClosesPipes(t *testing.T) {
	base := runtime.NumGoroutine()
	srv, served := nodeServer()
	defer srv.Close()

	status := filepath.Join(t.TempDir(), "status")
	q := url.Values{"output": {"1"}, "command": {"sh", "-c", lateWriter, status}}
	d := websocket.Dialer{Subprotocols: []string{"v4.channel.k8s.io"}}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/exec/ns/pod/c?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(msg) == "\x01early\n" { // channel 1: stdout
			break
		}
	}
	// A clean close (close frame), with the client's socket still open.
	_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	waitServed(t, served)
	if s := lateWrite(t, status); s != "141" {
		t.Fatalf("the late write ended with %s, want 141 (SIGPIPE)", s)
	}
	_ = ws.Close()
	srv.Close()
	noGoroutinesLeft(t, base)
}

// TestPodExecStoppedThenKilledIsReaped is the abort storm's case: the
// provider's kill stops the command, sends TERM and CONT. Under nsenter
// --pid the command stayed a zombie below a stopped nsenter and the exec
// never ended. Needs root (namespaces) and nsenter.
func TestPodExecStoppedThenKilledIsReaped(t *testing.T) {
	initPID := standInPod(t, "nsenter")

	base := runtime.NumGoroutine()
	spec := execSpec{env: []string{"PATH=/usr/bin:/bin"}, workDir: "/tmp", security: procSecurity{caps: defaultCaps}}
	c := podCommand(initPID, spec, []string{"sh", "-c", `echo "$$ $(pwd)"; exec sleep 30`})
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- attach(context.Background(), c, func(c *exec.Cmd) error { return startInPod(c, initPID, nil) }, nil, w, nil)
		_ = w.Close()
	}()
	first, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("first line: %v (exec: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	// It runs in the pod's PID namespace (its pid there is not the host's) and working directory.
	pid := c.Process.Pid
	nspid := nsPIDs(t, pid)
	if len(nspid) != 2 || first != nspid[1]+" /tmp\n" {
		t.Fatalf("printed %q; NSpid %v", first, nspid)
	}

	_ = syscall.Kill(pid, syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond) // long enough for a waiter to see the stop
	_ = syscall.Kill(pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	select {
	case err := <-done:
		if code, ok := exitCode(err); !ok || code != 128+int(syscall.SIGTERM) {
			t.Fatalf("err = %v, want exit code 143", err)
		}
	case <-time.After(hang):
		t.Fatal("the exec did not end after its process was stopped and killed")
	}
	if !reaped(pid) {
		t.Fatal("the killed process is a zombie")
	}
	noGoroutinesLeft(t, base)
}

// nsPIDs is the NSpid line of /proc/<pid>/status: its pid in each namespace.
func nsPIDs(t *testing.T, pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "NSpid:"); ok {
			return strings.Fields(f)
		}
	}
	return nil
}

// standInPod starts a stand-in pod init in the namespaces a pod has (PID,
// mount, UTS, IPC), stopped when the test ends, and returns its pid. The
// test is skipped where that cannot be done: not root, or one of `tools`
// missing.
func standInPod(t *testing.T, tools ...string) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces and credentials")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	podInit := exec.Command("sleep", "60")
	podInit.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
	}
	if err := podInit.Start(); err != nil {
		t.Skipf("cannot create namespaces here: %v", err)
	}
	t.Cleanup(func() { _ = podInit.Process.Kill(); _ = podInit.Wait() })
	return podInit.Process.Pid
}
