package main

// Tests of the port-forward endpoint without a cluster: the real
// ServePortForward behind an httptest server, driven by client-go's
// port-forward client (SPDY, as the API server speaks to a kubelet) and by a
// `v4.channel.k8s.io` WebSocket (what the API server passes through), to a
// server on the host's loopback (pods share the host's network here).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// echoServer answers each connection with "echo:" and what it read up to
// the client's EOF, then closes: a reply that needs the half-close.
func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				got, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("echo:"), got...))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// forwardServer serves /portForward/{ns}/{pod} for one pod, "web"; other
// pods are not running here.
func forwardServer(t *testing.T) *httptest.Server {
	t.Helper()
	fwd := &podForwarder{
		ready: func(_ context.Context, name, _ string) error {
			if name != "web" {
				return fmt.Errorf("pod ns/%s: not found", name)
			}
			return nil
		},
		dial: dialPodPort,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts, err := portforwardOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		servePortForward(w, r, fwd, strings.TrimPrefix(r.URL.Path, "/portForward/ns/"), "", opts)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// spdyForward forwards a local port to remote through client-go.
func spdyForward(t *testing.T, srv *httptest.Server, pod string, remote int) int {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL + "/portForward/ns/" + pod)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remote)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop) })
	select {
	case <-ready:
	case err := <-failed:
		t.Fatalf("port-forward: %v", err)
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return int(ports[0].Local)
}

// roundTrip sends msg, half-closes, and reads the reply to its end.
func roundTrip(t *testing.T, port int, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(c)
	return got
}

func TestPortForwardOverSPDYCarriesEachConnectionAndItsHalfClose(t *testing.T) {
	srv := forwardServer(t)
	local := spdyForward(t, srv, "web", echoServer(t))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for i, msg := range [][]byte{[]byte("hello"), big, []byte("again")} {
		if got := roundTrip(t, local, msg); !bytes.Equal(got, append([]byte("echo:"), msg...)) {
			t.Fatalf("connection %d: got %d bytes, want %d", i, len(got), len(msg)+5)
		}
	}
}

// client-go only logs the error channel's text (the WebSocket test reads
// it): here the connection ends with nothing, and the next one still works.
func TestPortForwardOverSPDYEndsOnlyTheFailedConnection(t *testing.T) {
	srv := forwardServer(t)
	for _, pod := range []string{"web", "gone"} {
		local := spdyForward(t, srv, pod, freePort(t))
		if got := roundTrip(t, local, []byte("x")); len(got) != 0 {
			t.Fatalf("%s: got %q from nowhere", pod, got)
		}
	}
	local := spdyForward(t, srv, "web", echoServer(t))
	if got := roundTrip(t, local, []byte("x")); string(got) != "echo:x" {
		t.Fatalf("got %q", got)
	}
}

// wsForward opens a v4 WebSocket for one port; it returns the connection
// after checking both channels' port prefixes.
func wsForward(t *testing.T, srv *httptest.Server, pod string, port int) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"v4.channel.k8s.io"}}
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/portForward/ns/" + pod + fmt.Sprintf("?port=%d", port)
	ws, _, err := d.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	for want := byte(0); want < 2; want++ {
		_, m, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 3 || m[0] != want || binary.LittleEndian.Uint16(m[1:]) != uint16(port) {
			t.Fatalf("channel %d's first frame: %v", want, m)
		}
	}
	return ws
}

// wsRead reads channel frames until the connection ends.
func wsRead(ws *websocket.Conn) (data, errText []byte) {
	for {
		_, m, err := ws.ReadMessage()
		if err != nil {
			return data, errText
		}
		switch {
		case len(m) > 0 && m[0] == 0:
			data = append(data, m[1:]...)
		case len(m) > 0 && m[0] == 1:
			errText = append(errText, m[1:]...)
		}
	}
}

func TestPortForwardOverWebSocketCarriesDataUntilTheServerCloses(t *testing.T) {
	srv := forwardServer(t)
	// A server that greets and closes without waiting for the client.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			got := make([]byte, 4)
			_, _ = io.ReadFull(c, got)
			_, _ = c.Write(append([]byte("got "), got...))
			_ = c.Close()
		}
	}()
	ws := wsForward(t, srv, "web", l.Addr().(*net.TCPAddr).Port)
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte("\x00ping")); err != nil {
		t.Fatal(err)
	}
	data, errText := wsRead(ws)
	if string(data) != "got ping" || len(errText) != 0 {
		t.Fatalf("data %q, error %q", data, errText)
	}
}

func TestPortForwardOverWebSocketReportsNothingListeningAndMissingPods(t *testing.T) {
	srv := forwardServer(t)
	port := freePort(t)
	for _, c := range []struct{ pod, want string }{
		{"web", fmt.Sprintf("failed to connect to localhost:%d inside the network of pod web", port)},
		{"gone", "pod ns/gone: not found"},
	} {
		data, errText := wsRead(wsForward(t, srv, c.pod, port))
		if len(data) != 0 || !strings.Contains(string(errText), c.want) {
			t.Fatalf("%s: data %q, error %q", c.pod, data, errText)
		}
	}
}

func TestSpliceEndsWhenThePodSideFails(t *testing.T) {
	a, b := net.Pipe()
	_ = b.Close()
	client, _ := net.Pipe()
	if err := splice(a, client); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatal(err)
	}
}
