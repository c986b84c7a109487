// Command nodeexec plays the kubelet of the fake node for everything the
// provider relies on that kwok does not do right (see ../../README.md):
//
//   - it serves the kubelet exec endpoint (/exec/...) that the API server
//     proxies pods/exec to, with real exit codes and stdin EOF;
//   - it serves the kubelet port-forward endpoint (/portForward/...) that
//     pods/portforward is proxied to;
//   - it gives every pod its own root filesystem, PID, mount, UTS and IPC
//     namespaces (a PID-1 "pod init" per pod UID), so files outside volumes
//     vanish with the pod and every process of a pod dies when it is deleted;
//   - it provisions hostPath-style PersistentVolumes for PVCs of its
//     StorageClass, and removes their data when the PVC is released.
//
// kwok still drives Node and Pod status. Everything listens on 127.0.0.1.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	// The same binary is re-executed as the PID 1 of each pod (see podinit.go).
	if len(os.Args) > 1 && os.Args[1] == podInitArg {
		podInitMain(os.Args[2:])
		return
	}

	// A container runtime starts every process with each signal at its
	// default action. cluster.sh runs nodeexec under nohup from a shell's
	// background job, so it starts with SIGHUP and SIGQUIT ignored (SIGINT
	// too, but it handles that one below), which every exec would inherit: a
	// terminal's close and kill -HUP did nothing. A handler, unlike an
	// ignored disposition, does not survive exec; nodeexec itself still
	// discards them.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGQUIT)

	var (
		kubeconfig = flag.String("kubeconfig", "", "admin kubeconfig")
		listen     = flag.String("listen", "127.0.0.1:10250", "address of the kubelet exec endpoint")
		certFile   = flag.String("tls-cert-file", "", "serving certificate")
		keyFile    = flag.String("tls-private-key-file", "", "serving key")
		nodeName   = flag.String("node-name", "kwok-node-0", "the node whose pods this server runs")
		sharedNode = flag.String("shared-node", "", "a node whose pods are API objects only: their execs share one pod init (optional)")
		stateDir   = flag.String("state-dir", "", "where pod roots and volumes live (removed by `cluster.sh down`)")
		storageCls = flag.String("storage-class", "local-dev", "StorageClass whose PVCs this server provisions")
		podPids    = flag.Int64("pod-max-pids", -1, "pid limit of each pod's cgroup, as the kubelet's podPidsLimit (-1: none)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *stateDir == "" || *certFile == "" || *keyFile == "" {
		fmt.Fprintln(os.Stderr, "nodeexec: --kubeconfig, --state-dir, --tls-cert-file and --tls-private-key-file are required")
		os.Exit(2)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	// Every exec looks its pod up (see podManager.enter): client-go's default
	// of 5 requests a second would cap the node at 5 execs a second.
	cfg.QPS, cfg.Burst = 5000, 5000
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + *nodeName }))
	pods := newPodManager(*stateDir, *nodeName, *sharedNode, *podPids, client, podFactory, factory)
	prov := newProvisioner(client, factory, *storageCls, *stateDir)
	for _, f := range []informers.SharedInformerFactory{factory, podFactory} {
		f.Start(ctx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				klog.Fatalf("cache for %v did not sync", typ)
			}
		}
	}
	go prov.run(ctx)

	mux := http.NewServeMux()
	exec := &execHandler{pods: pods}
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", exec.serve)
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", exec.serve)
	pf := &portForwardHandler{pods: pods}
	mux.HandleFunc("/portForward/{ns}/{pod}", pf.serve)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", pf.serve)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

	srv := &http.Server{
		Addr:    *listen,
		Handler: mux,
		// SPDY upgrades need HTTP/1.1: an empty TLSNextProto map disables HTTP/2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	go func() {
		<-ctx.Done()
		pods.shutdown()
		_ = srv.Close()
	}()
	klog.Infof("nodeexec serving %s for node %s", *listen, *nodeName)
	if err := srv.ListenAndServeTLS(*certFile, *keyFile); err != nil && err != http.ErrServerClosed {
		klog.Fatalf("serve: %v", err)
	}
}
