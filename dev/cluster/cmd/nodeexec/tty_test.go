package main

// The TTY exec through the real ServeExec with client-go's SPDY client (as
// the API server's stream translator dials the kubelet), on the host.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientexec "k8s.io/client-go/tools/remotecommand"
)

// sizeQueue hands client-go the sizes sent on it; closed, it ends the
// resize stream.
type sizeQueue chan clientexec.TerminalSize

func (q sizeQueue) Next() *clientexec.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// ttySession is a TTY exec in progress: its output so far, its stdin, its
// sizes, and its end.
type ttySession struct {
	out   *syncBuffer
	in    *io.PipeWriter
	sizes sizeQueue
	done  chan error
}

// startTTY runs argv with a TTY through ServeExec, its first size queued
// before the exec starts, as kubectl and the provider send it.
func startTTY(ctx context.Context, t *testing.T, rawURL string, first clientexec.TerminalSize, argv ...string) *ttySession {
	t.Helper()
	q := url.Values{"input": {"1"}, "output": {"1"}, "tty": {"1"}, "command": argv}
	u, _ := url.Parse(rawURL + "/exec/ns/pod/c?" + q.Encode())
	ex, err := clientexec.NewSPDYExecutor(&rest.Config{Host: rawURL}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	stdin, in := io.Pipe()
	s := &ttySession{out: &syncBuffer{}, in: in, sizes: make(sizeQueue, 4), done: make(chan error, 1)}
	s.sizes <- first
	go func() {
		s.done <- ex.StreamWithContext(ctx, clientexec.StreamOptions{Stdin: stdin, Stdout: s.out, Tty: true, TerminalSizeQueue: s.sizes})
	}()
	return s
}

func (s *ttySession) waitFor(t *testing.T, what string, re *regexp.Regexp) []string {
	t.Helper()
	for deadline := time.Now().Add(hang); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(s.out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; output %q", what, s.out.String())
		}
	}
}

func TestTTYExecIsATerminal(t *testing.T) {
	base := runtime.NumGoroutine()
	srv, served := nodeServer()
	defer srv.Close()

	// A session leader with the terminal as its controlling terminal; the
	// first size applied before it reads; stderr merged; input echoed; a
	// resize applied while it runs; its exit status reported.
	script := `set -- $(cat /proc/$$/stat); echo "pid=$1 sid=$6 tty=$7"; echo "size $(stty size)"; echo err >&2
while read -r line; do [ "$line" = end ] && exit 7; echo "size $(stty size)"; done`
	s := startTTY(context.Background(), t, srv.URL, clientexec.TerminalSize{Width: 101, Height: 33}, "sh", "-c", script)
	ids := s.waitFor(t, "the ids", regexp.MustCompile(`pid=(\d+) sid=(\d+) tty=(\d+)\r\n`))
	if ids[1] != ids[2] || ids[3] == "0" {
		t.Fatalf("not a session leader with a controlling terminal: %q", ids[0])
	}
	s.waitFor(t, "the first size", regexp.MustCompile(`size 33 101\r\nerr\r\n`))
	s.sizes <- clientexec.TerminalSize{Width: 120, Height: 40}
	// The resize is applied by the node as it arrives: ask until it shows.
	eventually(t, "the resize", func() bool {
		_, _ = s.in.Write([]byte("\n"))
		return strings.Contains(s.out.String(), "size 40 120\r\n")
	})
	_, _ = s.in.Write([]byte("end\n"))
	err := <-s.done
	var ce interface{ ExitStatus() int }
	if !errors.As(err, &ce) || ce.ExitStatus() != 7 {
		t.Fatalf("err = %v, want exit code 7 (output %q)", err, s.out.String())
	}
	if !strings.Contains(s.out.String(), "end\r\n") {
		t.Fatalf("the input was not echoed: %q", s.out.String())
	}
	close(s.sizes)
	_ = s.in.Close()
	waitServed(t, served)
	srv.Close()
	noGoroutinesLeft(t, base)
}

func TestTTYExecCtrlCInterruptsTheForegroundJob(t *testing.T) {
	srv, served := nodeServer()
	defer srv.Close()
	s := startTTY(context.Background(), t, srv.URL, clientexec.TerminalSize{Width: 80, Height: 24}, "sh", "-i")
	_, _ = s.in.Write([]byte("echo started; sleep 100\n"))
	s.waitFor(t, "the job to start", regexp.MustCompile(`started\r\n`))
	_, _ = s.in.Write([]byte{3}) // Ctrl-C
	_, _ = s.in.Write([]byte("echo after-$?\n"))
	s.waitFor(t, "the shell to go on after the interrupted job", regexp.MustCompile(`after-130\r\n`))
	_, _ = s.in.Write([]byte("exit 3\n"))
	var ce interface{ ExitStatus() int }
	if err := <-s.done; !errors.As(err, &ce) || ce.ExitStatus() != 3 {
		t.Fatalf("err = %v, want exit code 3: the shell survived Ctrl-C (output %q)", err, s.out.String())
	}
	close(s.sizes)
	_ = s.in.Close()
	waitServed(t, served)
}

// As with a kubelet (its runtime's shim keeps the pty master), a TTY exec
// whose client goes does not hang the terminal up: no SIGHUP.
func TestTTYExecClientGoneSendsNoHangup(t *testing.T) {
	base := runtime.NumGoroutine()
	srv, served := nodeServer()
	defer srv.Close()
	status := filepath.Join(t.TempDir(), "status")
	ctx, hangUp := context.WithCancel(context.Background())
	script := `trap 'echo hup >"$0"; exit 1' HUP; trap 'echo term >"$0"; exit 0' TERM; echo "pid=$$"; while :; do sleep 0.05; done`
	s := startTTY(ctx, t, srv.URL, clientexec.TerminalSize{Width: 80, Height: 24}, "sh", "-c", script, status)
	pid, _ := strconv.Atoi(s.waitFor(t, "the pid", regexp.MustCompile(`pid=(\d+)\r\n`))[1])
	hangUp()
	waitServed(t, served)
	<-s.done
	_ = syscall.Kill(pid, syscall.SIGTERM)
	eventually(t, "the process to be reaped", func() bool { return reaped(pid) })
	if got, _ := os.ReadFile(status); !bytes.Equal(got, []byte("term\n")) {
		t.Fatalf("the process ended with %q, want term (the terminal was hung up)", got)
	}
	close(s.sizes)
	_ = s.in.Close()
	srv.Close()
	noGoroutinesLeft(t, base)
}
