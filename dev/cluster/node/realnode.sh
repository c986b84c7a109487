# shellcheck shell=bash
# The real node: a kubelet with containerd, runc and gVisor (runsc), images
# built from Debian packages, a bridge CNI and kube-router's NetworkPolicy
# controller, in a network namespace of its own with no route off this
# machine. Sourced by cluster.sh (uses its STATE, CACHE, SLOT, PKI, RUN, ADMIN,
# K8S_BIN, NETPOL_BIN, HERE, log, die, start, stop_pid, wait_for, KUBECTL,
# write_kubeconfig). See README.md, "The real node".
#
#   root netns:  sbxh$SLOT 10.200.$SLOT.1/30 ── veth ──┐  the API server's relay listens here
#   netns sbxnode-$SLOT ("the node", no default route): │
#     sbxn$SLOT 10.200.$SLOT.2/30 (node InternalIP) ────┘  kubelet, containerd, netpol
#     cni0 10.244.$SLOT.1/24 ── the pods (bridge, no masquerade)
#     inet0 203.0.113.1/24 ── netns sbxinet-$SLOT: 203.0.113.10, the tests' "internet"
#     meta0 169.254.169.1/24 ── netns sbxmeta-$SLOT: 169.254.169.254, the tests' "metadata"
# Nothing routes to eth0: a pod's packet to any other address has no route
# in the node netns and is dropped there (the root netns does not forward).

REAL_NODE=real-node-0
NODE_NS=sbxnode-$SLOT
INET_NS=sbxinet-$SLOT
META_NS=sbxmeta-$SLOT
NODE_HOST_IP=10.200.$SLOT.1
NODE_IP=10.200.$SLOT.2
POD_CIDR=10.244.$SLOT.0/24
INET_IP=203.0.113.10
META_IP=169.254.169.254
# Unix sockets may be 108 bytes long: under /run, not the (maybe deep) state dir.
NODE_RUN=/run/sbx-$SLOT
NODE_STATE=$STATE/realnode
# Pods' cgroups, in every v1 hierarchy (the kubelet's cgroupRoot): one per
# slot, so two clusters' kubelets never share /kubepods.
NODE_CGROUP=sbx-$SLOT
REAL_COMPONENTS=(node-apiproxy containerd kubelet netpol)

# The runtime builds: each its own module (dev/cluster/node/*/go.mod), so
# their dependency sets never mix with each other's or Kubernetes'.
CTR_BIN=$CACHE/containerd-$(hash_of "$HERE/node/containerd/go.mod" "$HERE/node/containerd/go.sum")
RUNC_BIN=$CACHE/runc-$(hash_of "$HERE/node/runc/go.mod" "$HERE/node/runc/go.sum")
GVISOR_BIN=$CACHE/gvisor-$(hash_of "$HERE/node/gvisor/go.mod" "$HERE/node/gvisor/go.sum" "$HERE/node/gvisor/oom-score.sh")
IMAGES=$CACHE/images-$(hash_of "$HERE/node/images.sh")

build_containerd() {
	local v ld
	v=$(cd "$HERE/node/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
	ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$v"
	(cd "$HERE/node/containerd" &&
		CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" -ldflags "$ld" -o "$1/" \
			github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr &&
		CGO_ENABLED=0 go build -trimpath -tags "no_grpc urfave_cli_no_docs" -ldflags "$ld" -o "$1/" \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
}

# runc needs cgo (its nsenter is C) and libseccomp for RuntimeDefault.
build_runc() {
	(cd "$HERE/node/runc" && CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
		-ldflags "-s -w" -o "$1/" github.com/opencontainers/runc)
}

# The shim with one line changed (gvisor/oom-score.sh says which and why).
build_gvisor() {
	local modfile
	(cd "$HERE/node/gvisor" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/" gvisor.dev/gvisor/runsc &&
		mkdir "$1/src" && modfile=$(bash oom-score.sh "$1/src") &&
		CGO_ENABLED=0 go build -modfile "$modfile" -trimpath -ldflags "-s -w" -o "$1/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim &&
		rm -rf "$1/src")
}

build_images() {
	bash "$HERE/node/images.sh" "$1" "$(cd "$HERE" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
}

build_real_node() {
	local t0=$SECONDS
	if [[ ! -x $CTR_BIN/containerd ]]; then
		log "building containerd (cold: ~2 min)"
		build_into "$CTR_BIN" containerd build_containerd || die "building containerd failed"
	fi
	if [[ ! -x $RUNC_BIN/runc ]]; then
		log "building runc"
		build_into "$RUNC_BIN" runc build_runc || die "building runc failed"
	fi
	if [[ ! -x $GVISOR_BIN/runsc ]]; then
		log "building gVisor (runsc and its shim; cold: ~6 min)"
		build_into "$GVISOR_BIN" runsc build_gvisor || die "building gVisor failed"
	fi
	if [[ ! -f $IMAGES/pause.tar ]]; then
		log "building the node's images from Debian packages"
		build_into_file "$IMAGES" pause.tar build_images || die "building the images failed"
	fi
	(( SECONDS - t0 > 1 )) && log "real node build took $((SECONDS - t0)) s"
	return 0
}

# build_into_file: build_into for a directory whose probe is a plain file.
build_into_file() {
	local dest=$1 probe=$2 tmp
	shift 2
	tmp=$(mktemp -d "$dest.tmp.XXXXXX")
	chmod 755 "$tmp"
	if ! "$@" "$tmp"; then rm -rf "$tmp"; return 1; fi
	if [[ -f $dest/$probe ]]; then rm -rf "$tmp"; return 0; fi
	rm -rf "$dest"
	mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
}

# in_node CMD...: CMD in the node's network namespace (and the root mount
# namespace, so volumes, overlay mounts and netns files stay visible here).
in_node() { nsenter --net="/run/netns/$NODE_NS" -- "$@"; }

# --- network -----------------------------------------------------------------

# fake_host NETNS LINK ADDR/PREFIX NODE_ADDR/PREFIX: a test host in a netns
# of its own, linked to the node netns, its only route back to the pods.
fake_host() {
	local ns=$1 link=$2 addr=$3 node_addr=$4
	ip netns add "$ns"
	ip link add "$link" netns "$NODE_NS" type veth peer name eth0 netns "$ns"
	ip -n "$NODE_NS" addr add "$node_addr" dev "$link"
	ip -n "$NODE_NS" link set "$link" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "$addr" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route add "$POD_CIDR" via "${node_addr%/*}"
}

node_network_up() {
	node_network_down
	ip netns add "$NODE_NS"
	ip -n "$NODE_NS" link set lo up
	ip link add "sbxh$SLOT" type veth peer name "sbxn$SLOT" netns "$NODE_NS"
	ip addr add "$NODE_HOST_IP/30" dev "sbxh$SLOT"
	ip link set "sbxh$SLOT" up
	ip -n "$NODE_NS" addr add "$NODE_IP/30" dev "sbxn$SLOT"
	ip -n "$NODE_NS" link set "sbxn$SLOT" up
	# The API server reaches pods' exec and port-forward through the kubelet
	# only; this route lets pods' replies (and pods' own attempts, which the
	# NetworkPolicy refuses) reach the node's peer here, as pods reach
	# their node and the API server's endpoint on a real cluster.
	ip route add "$POD_CIDR" via "$NODE_IP" dev "sbxh$SLOT"
	# From the pods, only the API server's relay answers here; every other
	# listener of this machine is out of reach (what comes back on
	# connections this side opened, kubelet and exec, passes).
	iptables -N "SBX-NODE-$SLOT" 2>/dev/null || iptables -F "SBX-NODE-$SLOT"
	iptables -A "SBX-NODE-$SLOT" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	iptables -A "SBX-NODE-$SLOT" -p tcp -d "$NODE_HOST_IP" --dport "$P_API" -j ACCEPT
	iptables -A "SBX-NODE-$SLOT" -j DROP
	iptables -I INPUT -i "sbxh$SLOT" -j "SBX-NODE-$SLOT"
	fake_host "$INET_NS" inet0 "$INET_IP/24" 203.0.113.1/24
	fake_host "$META_NS" meta0 "$META_IP/24" 169.254.169.1/24
}

node_network_down() {
	local ns
	for ns in "$INET_NS" "$META_NS" "$NODE_NS"; do
		[[ -e /run/netns/$ns ]] && ip netns del "$ns"
	done
	ip link del "sbxh$SLOT" 2>/dev/null || true
	while iptables -D INPUT -i "sbxh$SLOT" -j "SBX-NODE-$SLOT" 2>/dev/null; do :; done
	iptables -F "SBX-NODE-$SLOT" 2>/dev/null || true
	iptables -X "SBX-NODE-$SLOT" 2>/dev/null || true
	return 0
}

# --- PKI -----------------------------------------------------------------------

# The kubelet's client identity (the Node authorizer's system:node:NAME) and
# serving certificate, and the API server's client certificate for kubelets.
node_pki() {
	[[ -f $PKI/kubelet-node.crt ]] && return 0
	(
		cd "$PKI" || exit 1
		mk() {
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf '%b\n' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null
		}
		mk kubelet-client "/O=system:nodes/CN=system:node:$REAL_NODE" "extendedKeyUsage=clientAuth"
		mk kubelet-node "/CN=$REAL_NODE" "subjectAltName=IP:$NODE_IP,DNS:$REAL_NODE\nextendedKeyUsage=serverAuth"
		mk apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
	)
}

# --- containerd ----------------------------------------------------------------

containerd_config() {
	mkdir -p "$NODE_STATE/net.d" "$NODE_STATE/certs.d/_default" "$NODE_STATE/cni-ipam"
	# Every pull fails here at once: images come only from `ctr import`.
	printf 'server = "http://127.0.0.1:1"\n[host."http://127.0.0.1:1"]\n  capabilities = ["pull", "resolve"]\n' \
		>"$NODE_STATE/certs.d/_default/hosts.toml"
	cat >"$NODE_STATE/net.d/10-pods.conflist" <<-EOF
		{
		  "cniVersion": "1.0.0",
		  "name": "sbx-pods",
		  "plugins": [
		    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true,
		     "ipMasq": false, "hairpinMode": true,
		     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
		              "dataDir": "$NODE_STATE/cni-ipam"}},
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF
	cat >"$NODE_STATE/runsc.toml" <<-EOF
		binary_name = "$GVISOR_BIN/runsc"
		root = "$NODE_RUN/runsc"
		[runsc_config]
		  platform = "systrap"
		  network = "sandbox"
	EOF
	cat >"$NODE_STATE/containerd.toml" <<-EOF
		version = 3
		root = "$NODE_STATE/containerd"
		state = "$NODE_RUN/containerd"
		[grpc]
		  address = "$NODE_RUN/containerd.sock"
		[plugins.'io.containerd.cri.v1.images']
		  snapshotter = 'overlayfs'
		  [plugins.'io.containerd.cri.v1.images'.pinned_images]
		    sandbox = 'registry.k8s.io/pause:3.10.2'
		  [plugins.'io.containerd.cri.v1.images'.registry]
		    config_path = '$NODE_STATE/certs.d'
		[plugins.'io.containerd.cri.v1.runtime']
		  netns_mounts_under_state_dir = true
		  # Root here lacks CAP_SYS_RESOURCE (the VM's bounding set), so no
		  # process may lower its oom_score_adj below its parent's (0), as in
		  # rootless or nested set-ups; the kubelet asks -998 for the pause
		  # container and -997 for Guaranteed pods.
		  restrict_oom_score_adj = true
		  enable_criu = false
		  [plugins.'io.containerd.cri.v1.runtime'.containerd]
		    default_runtime_name = 'runc'
		    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
		      runtime_type = 'io.containerd.runc.v2'
		      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
		        BinaryName = '$RUNC_BIN/runc'
		        SystemdCgroup = false
		        Root = '$NODE_RUN/runc'
		    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
		      runtime_type = 'io.containerd.runsc.v1'
		      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
		        TypeUrl = 'io.containerd.runsc.v1.options'
		        ConfigPath = '$NODE_STATE/runsc.toml'
		  [plugins.'io.containerd.cri.v1.runtime'.cni]
		    bin_dirs = ['/usr/lib/cni']
		    conf_dir = '$NODE_STATE/net.d'
		    max_conf_num = 1
		[plugins.'io.containerd.grpc.v1.cri']
		  stream_server_address = '127.0.0.1'
		  stream_server_port = '0'
	EOF
}

CTR() { "$CTR_BIN/ctr" --address "$NODE_RUN/containerd.sock" -n k8s.io "$@"; }

start_containerd() {
	containerd_config
	mkdir -p "$NODE_RUN"
	# The shims are found on PATH.
	start containerd env PATH="$CTR_BIN:$GVISOR_BIN:$RUNC_BIN:$PATH" \
		nsenter --net="/run/netns/$NODE_NS" -- "$CTR_BIN/containerd" --config "$NODE_STATE/containerd.toml"
	wait_for containerd 30 CTR version
	# umoci's archives name each image by its tag only: --base-name gives the
	# full name the CRI looks for (and a pod spec names).
	local img
	for img in registry.k8s.io/pause:pause docker.io/library/debian:debian docker.io/library/busybox:busybox; do
		CTR images import --base-name "${img%:*}" "$IMAGES/${img#*:}.tar" >/dev/null ||
			die "importing ${img#*:} into containerd failed"
	done
	# Pinned (the CRI's label): the kubelet never removes a pinned image, not
	# even to reclaim disk under DiskPressure, and nothing can pull it again.
	local ref
	for ref in $(CTR images ls -q); do
		CTR images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
	done
}

# --- kubelet -------------------------------------------------------------------

kubelet_config() {
	local c
	mkdir -p "$NODE_STATE/kubelet" "$NODE_STATE/pod-logs"
	# cgroupRoot must exist in every hierarchy the kubelet uses.
	for c in /sys/fs/cgroup/*/; do
		[[ $c == */unified/ ]] || mkdir -p "$c$NODE_CGROUP"
	done
	write_kubeconfig "$NODE_STATE/kubelet.kubeconfig" "system:node:$REAL_NODE" "" \
		--client-certificate="$PKI/kubelet-client.crt" --client-key="$PKI/kubelet-client.key" --embed-certs
	# The relay's address is not in the API server's certificate: the name is.
	"$K8S_BIN/kubectl" config --kubeconfig="$NODE_STATE/kubelet.kubeconfig" set-cluster local \
		--server="https://$NODE_HOST_IP:$P_API" --tls-server-name=localhost >/dev/null
	cat >"$NODE_STATE/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		# This machine's cgroups are v1 (hybrid): refused by default since 1.35, not removed.
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: /$NODE_CGROUP
		containerRuntimeEndpoint: unix://$NODE_RUN/containerd.sock
		podLogsDir: $NODE_STATE/pod-logs
		failSwapOn: false
		address: $NODE_IP
		port: 10250
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		healthzPort: 10248
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $PKI/ca.crt}
		authorization: {mode: Webhook}
		tlsCertFile: $PKI/kubelet-node.crt
		tlsPrivateKeyFile: $PKI/kubelet-node.key
		registerNode: true
		clusterDomain: cluster.local
		resolvConf: ""
		podPidsLimit: 4096
		maxPods: 110
		# Images cannot be pulled again here: never collect them.
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
		serializeImagePulls: false
		streamingConnectionIdleTimeout: 4h
		nodeStatusReportFrequency: 1m
	EOF
}

# The kubelet changes these host-wide sysctls to what it requires
# (container_manager_linux.go, setupKernelTunables): `up` records them and
# `down` puts them back.
KERNEL_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

start_kubelet() {
	kubelet_config
	local t
	if [[ ! -f $STATE/sysctls ]]; then
		for t in "${KERNEL_TUNABLES[@]}"; do echo "$t $(cat "/proc/sys/$t")"; done >"$STATE/sysctls"
	fi
	start kubelet env PATH="$CTR_BIN:$PATH" nsenter --net="/run/netns/$NODE_NS" -- "$K8S_BIN/kubelet" \
		--config="$NODE_STATE/kubelet.yaml" --kubeconfig="$NODE_STATE/kubelet.kubeconfig" \
		--root-dir="$NODE_STATE/kubelet" --cert-dir="$NODE_STATE/kubelet/pki" --node-ip="$NODE_IP" \
		--hostname-override="$REAL_NODE" --node-labels=sandbox.local/node=real --oom-score-adj=0 --v=1
	wait_for kubelet 90 KUBECTL wait --for=condition=Ready "node/$REAL_NODE" --timeout=1s
}

# --- NetworkPolicy -------------------------------------------------------------

# netpol (cmd/netpol, kube-router's NetworkPolicy controller) in the node's
# network namespace, so its iptables rules and ipsets are the node's: they
# see the pods' bridged and routed traffic there, and vanish with the netns
# at `down`. It starts after the kubelet has registered the Node, whose
# InternalIP tells it which pods are local.
start_netpol() {
	# The admin identity (it lists pods, namespaces and policies cluster-wide),
	# through the relay: 127.0.0.1 in the node netns is the node's own.
	write_kubeconfig "$NODE_STATE/netpol.kubeconfig" admin "" \
		--client-certificate="$PKI/admin.crt" --client-key="$PKI/admin.key" --embed-certs
	"$K8S_BIN/kubectl" config --kubeconfig="$NODE_STATE/netpol.kubeconfig" set-cluster local \
		--server="https://$NODE_HOST_IP:$P_API" --tls-server-name=localhost >/dev/null
	start netpol nsenter --net="/run/netns/$NODE_NS" -- "$NETPOL_BIN/netpol" \
		--kubeconfig="$NODE_STATE/netpol.kubeconfig" --hostname-override="$REAL_NODE"
	wait_for netpol 60 netpol_synced
}

# netpol_synced: its first full sync is in the node's filter table (the
# explicit ACCEPT it appends to its top-level chains at the end of each).
netpol_synced() {
	in_node iptables -S KUBE-ROUTER-FORWARD 2>/dev/null | grep -q 'explicitly ACCEPT traffic that comply to network policies'
}

restore_sysctls() {
	local t v
	[[ -f $STATE/sysctls ]] || return 0
	while read -r t v; do echo "$v" >"/proc/sys/$t" 2>/dev/null || true; done <"$STATE/sysctls"
}

# --- up / down -----------------------------------------------------------------

start_real_node() {
	node_network_up
	start node-apiproxy socat "TCP-LISTEN:$P_API,bind=$NODE_HOST_IP,fork,reuseaddr" "TCP:127.0.0.1:$P_API"
	start_containerd
	start_kubelet
	start_netpol
	KUBECTL apply -f "$HERE/manifests/runtime-classes.yaml" >/dev/null
}

# stop_real_node: the kubelet, containerd and every shim, container,
# mount, netns and cgroup they made, in that order: the pods live in
# /$NODE_CGROUP and under containerd's state, not in any cgroup or mount
# namespace that ending the processes would clean.
stop_real_node() {
	local c p m
	for ((i = ${#REAL_COMPONENTS[@]} - 1; i >= 0; i--)); do
		c=${REAL_COMPONENTS[i]}
		[[ $c == containerd ]] && kill_containers
		stop_pid "$c"
	done
	# Shims left by a containerd that died first; they name their socket.
	for p in $(pgrep -f "containerd-shim-.* -address $NODE_RUN/containerd.sock" || true); do kill -9 "$p" 2>/dev/null || true; done
	kill_cgroup_tasks
	# Everything mounted under the node's state (rootfs, volumes, netns
	# files, shm), deepest first.
	for m in $(findmnt -rn -o TARGET | grep -E "^($NODE_RUN|$NODE_STATE)(/|$)" | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	node_network_down
	for c in /sys/fs/cgroup/*/"$NODE_CGROUP"; do
		[[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	restore_sysctls
	rm -rf --one-file-system "$NODE_RUN"
	return 0
}

# kill_containers: every task containerd runs, while it still runs.
kill_containers() {
	local t
	CTR version >/dev/null 2>&1 || return 0
	for t in $(CTR tasks ls -q 2>/dev/null); do CTR tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
}

# kill_cgroup_tasks: any process still in a pod cgroup (a sandbox whose shim
# is gone) ends with its cgroup.
kill_cgroup_tasks() {
	find /sys/fs/cgroup/*/"$NODE_CGROUP" -name cgroup.procs -print0 2>/dev/null | xargs -0r cat | xargs -r kill -9 2>/dev/null || true
}

real_node_healthy() {
	local c
	for c in "${REAL_COMPONENTS[@]}"; do alive "$c" || return 1; done
	in_node curl -sf http://127.0.0.1:10248/healthz >/dev/null
}
