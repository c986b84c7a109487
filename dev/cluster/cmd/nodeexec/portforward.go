package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// portForwardHandler serves the kubelet's /portForward endpoint with
// cri-streaming's portforward server, the kubelet's own handler: SPDY from
// the API server, or a `v4.channel.k8s.io` WebSocket the API server passed
// through. Each forwarded connection reaches the port as the pod sees it.
type portForwardHandler struct{ pods *podManager }

func (h *portForwardHandler) serve(w http.ResponseWriter, r *http.Request) {
	opts, err := portforwardOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns := r.PathValue("ns")
	fwd := &podForwarder{
		ready: func(ctx context.Context, name, uid string) error { return h.pods.runningHere(ctx, ns, name, uid) },
		dial:  dialPodPort,
	}
	servePortForward(w, r, fwd, r.PathValue("pod"), r.PathValue("uid"), opts)
}

// portforwardOptions are the ports a WebSocket request asks for (a SPDY
// client names them per stream).
var portforwardOptions = portforward.NewV4Options

// servePortForward runs the kubelet's handler with the kubelet's defaults:
// streams idle for 4 h are closed, a SPDY client has 30 s to open a pair.
func servePortForward(w http.ResponseWriter, r *http.Request, fwd portforward.PortForwarder, pod, uid string, opts *portforward.V4Options) {
	portforward.ServePortForward(w, r, fwd, pod, uid, opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

// podForwarder connects a forwarded stream to a port of a pod.
type podForwarder struct {
	// ready fails unless the pod runs on this node.
	ready func(ctx context.Context, name, uid string) error
	// dial connects to a port in the pod's network.
	dial func(ctx context.Context, port int32) (net.Conn, error)
}

// PortForward implements portforward.PortForwarder as containerd does: the
// pod must be running here; then the port is dialled on localhost of the
// pod's network (which on this node is the host's: pods share it, see the
// README) and bytes are copied both ways (see splice). Its error
// text reaches the client on the port's error channel.
func (f *podForwarder) PortForward(ctx context.Context, name, uid string, port int32, stream io.ReadWriteCloser) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	if err := f.ready(ctx, name, uid); err != nil {
		return err
	}
	conn, err := f.dial(ctx, port)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside the network of pod %s: %w", port, name, err)
	}
	return splice(conn, stream)
}

// dialPodPort dials localhost:port, IPv4 first then IPv6, as containerd does.
func dialPodPort(ctx context.Context, port int32) (net.Conn, error) {
	var d net.Dialer
	p := strconv.Itoa(int(port))
	conn, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return conn, nil
	}
	if conn6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p)); err6 == nil {
		return conn6, nil
	}
	return nil, err
}

// splice copies between conn and stream until the pod's side ends. The
// client's end of its stream (a SPDY half-close) half-closes the connection,
// so a server still answering a request is not cut off (containerd returns
// at the first end of either copy, which loses such answers).
func splice(conn net.Conn, stream io.ReadWriteCloser) error {
	defer conn.Close()
	go func() {
		if _, err := io.Copy(conn, stream); err == nil {
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
				return
			}
		}
		_ = conn.Close() // the client's stream failed: so does the pod's side
	}()
	_, err := io.Copy(stream, conn)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// runningHere fails unless the pod exists, is not being deleted and runs on
// this node, as a runtime forwards only into a running sandbox; enter starts
// the pod's init if needed.
func (m *podManager) runningHere(ctx context.Context, ns, name, uid string) error {
	pod, err := m.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	if len(pod.Spec.Containers) == 0 {
		return fmt.Errorf("pod %s/%s has no containers", ns, name)
	}
	_, _, err = m.enter(ns, name, uid, pod.Spec.Containers[0].Name)
	return err
}
