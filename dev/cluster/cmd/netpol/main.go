// Command netpol enforces NetworkPolicy on the real node (see ../../README.md,
// "NetworkPolicy"): kube-router's NetworkPolicy controller alone, the way k3s
// embeds it (k3s pkg/agent/netpol), without kube-router's routing, service
// proxy or BGP. Only github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol
// and the few packages it imports are compiled in: v2.1.0 is the only version
// the Go proxy serves and has reported security flaws, in code this binary
// does not contain. Test infrastructure only.
//
// It writes iptables rules and ipsets into the network namespace it runs in:
// cluster.sh starts it inside the node's (nsenter --net), where the kubelet,
// the pods' bridge and their traffic are, never in the machine's own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// The API server's --service-cluster-ip-range (cluster.sh). kube-router
// exempts packets to node-local addresses in this range from every policy
// (its own service proxy would hold ClusterIPs there), so it is the
// cluster's own range, not kube-router's wider default of 10.96.0.0/12.
const serviceCIDR = "10.96.0.0/16"

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig with read access to pods, namespaces, networkpolicies and nodes")
		nodeName   = flag.String("hostname-override", "", "the Node whose pods this controller guards")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *nodeName == "" {
		fmt.Fprintln(os.Stderr, "netpol: --kubeconfig and --hostname-override are required")
		os.Exit(2)
	}
	// kube-router looks the Node up by $NODE_NAME first, then by this
	// machine's hostname, and only then by the override: set the first so a
	// Node that happens to bear the hostname is never the one chosen.
	if err := os.Setenv("NODE_NAME", *nodeName); err != nil {
		klog.Fatalf("NODE_NAME: %v", err)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)

	// The flags' defaults (options.AddFlags), which NewKubeRouterConfig
	// leaves unset, plus what makes this the firewall only.
	config := options.NewKubeRouterConfig()
	config.HostnameOverride = *nodeName
	config.ClusterIPCIDRs = []string{serviceCIDR}
	config.EnableIPv4 = true
	config.EnableIPv6 = false
	config.RunFirewall = true
	config.RunRouter = false
	config.RunServiceProxy = false
	config.RunLoadBalancer = false
	config.MetricsEnabled = false
	// No health server: its readiness is the iptables chains (cluster.sh
	// waits for the first full sync's rules), and it would listen on every
	// address of the node, pods' gateway included.
	config.HealthPort = 0

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopCh := ctx.Done()
	// kube-router's controllers take a WaitGroup to report their end on.
	var wg sync.WaitGroup

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	npInformer := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stopCh)
	for typ, ok := range factory.WaitForCacheSync(stopCh) {
		if !ok {
			klog.Fatalf("informer for %v did not sync", typ)
		}
	}

	// The controller sends a heartbeat on this channel at every sync and
	// blocks until someone reads it: the health controller's check loop does.
	health, err := healthcheck.NewHealthController(config)
	if err != nil {
		klog.Fatalf("health controller: %v", err)
	}
	// As kube-router's own command does: without a first "alive", every
	// check before the first sync's heartbeat logs a missed one.
	health.SetAlive()
	heartbeats := make(chan *healthcheck.ControllerHeartbeat, 10)
	wg.Add(1)
	go health.RunCheck(heartbeats, stopCh, &wg)

	iptablesHandlers, ipsetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		klog.Fatalf("iptables and ipset: %v", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, podInformer, npInformer, nsInformer,
		&sync.Mutex{}, iptablesHandlers, ipsetHandlers)
	if err != nil {
		klog.Fatalf("network policy controller: %v", err)
	}
	// Every relevant pod, namespace or policy change asks for a full sync.
	if _, err := podInformer.AddEventHandler(npc.PodEventHandler); err != nil {
		klog.Fatalf("pod handler: %v", err)
	}
	if _, err := nsInformer.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		klog.Fatalf("namespace handler: %v", err)
	}
	if _, err := npInformer.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		klog.Fatalf("networkpolicy handler: %v", err)
	}

	wg.Add(1)
	go npc.Run(heartbeats, stopCh, &wg)
	klog.Infof("enforcing NetworkPolicy for the pods of node %s", *nodeName)
	<-stopCh
	// The rules stay where they are: a restarted controller takes them
	// over (its syncs replace stale chains), and a stopped one leaves the
	// pods confined rather than open. `cluster.sh down` deletes the node's
	// network namespace, and its rules and ipsets with it.
	wg.Wait()
}
