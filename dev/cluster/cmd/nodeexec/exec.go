package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path"
	"syscall"
	"time"

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
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	ex := &podExecutor{pods: h.pods, namespace: ns}
	remotecommand.ServeExec(w, r, ex, pod, r.PathValue("uid"), container, cmd, opts,
		4*time.Hour, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

// podExecutor runs a command inside a pod's namespaces with nsenter.
type podExecutor struct {
	pods      *podManager
	namespace string
}

// ExecInContainer implements remotecommand.Executor. Like a real kubelet it
// does not kill the process when the client goes away: only the pod's
// deletion (or the process itself) ends it.
func (e *podExecutor) ExecInContainer(_ context.Context, name, uid, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if tty {
		return errors.New("tty is not supported by this node")
	}
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	p, env, workDir, err := e.pods.enter(e.namespace, name, uid, container)
	if err != nil {
		return err
	}

	// nsenter opens an explicit --wd path before it enters the namespaces, so
	// name the directory through the pod init's root.
	pid := fmt.Sprint(p.initPID)
	args := append([]string{
		"--target", pid, "--mount", "--pid", "--uts", "--ipc",
		"--root", "--wd=/proc/" + pid + "/root" + path.Clean("/"+workDir), "--",
	}, cmd...)
	c := exec.Command("nsenter", args...)
	c.Env = env
	if out != nil {
		c.Stdout = out
	}
	if errOut != nil {
		c.Stderr = errOut
	}
	var stdin io.WriteCloser
	if in != nil {
		if stdin, err = c.StdinPipe(); err != nil {
			return err
		}
	}
	if err := c.Start(); err != nil {
		return err
	}
	if stdin != nil {
		// Copy, then close: the process sees EOF exactly when the client
		// half-closes stdin (kwok never closes it).
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	err = c.Wait()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		code := ws.ExitStatus()
		if ws.Signaled() {
			// What container runtimes report for a process killed by a signal.
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	klog.Errorf("exec in %s/%s: %v", e.namespace, name, err)
	return err
}
