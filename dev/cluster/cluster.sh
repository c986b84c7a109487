#!/usr/bin/env bash
# The local control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok (node and pod status), nodeexec (the node's exec
# endpoint, pod roots, volumes) and the agent-sandbox controller, all as plain
# processes on 127.0.0.1. See README.md in this folder.
#
#   cluster.sh up [--scale]       build what is missing, start, set up; idempotent
#                                 (--scale: the scale profile, see README.md)
#   cluster.sh down               stop what `up` started (by recorded PID), remove state
#   cluster.sh status             one line per component (and its restarts)
#   cluster.sh env                print the exports for tests (also in $STATE/env)
#   cluster.sh build              only build the binaries (cached by version)
#   cluster.sh apiserver stop|start   stop/start only kube-apiserver (outage tests)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE=${SANDBOX_CLUSTER_STATE:-$REPO/.cluster}
# shellcheck source=../../scripts/lib/cache.sh
source "$REPO/scripts/lib/cache.sh"
CACHE=$AGENT_SANDBOX_CACHE

# Pinned versions: Kubernetes and etcd in go.mod, kwok and the agent-sandbox
# controller in thirdparty/go.mod (the CRDs and kwok's node stages are read
# from the module cache at those versions).
K8S=v1.37.2
KWOK=$(cd "$HERE/thirdparty" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
SBX=$(cd "$HERE/thirdparty" && go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)

PKI=$STATE/pki
RUN=$STATE/run
ADMIN=$STATE/admin.kubeconfig
CLIENT=$STATE/client.kubeconfig
# The sandbox namespace of examples/manifests/namespace.yaml, which the
# cluster applies as it is.
NS=agents
# The provider's namespace, where its ServiceAccount lives (rbac/service-account.yaml).
PROVIDER_NS=agents-provider
NODE=kwok-node-0
# The scale node (manifests/node-scale.yaml): its pods are API objects only.
SCALE_NODE=kwok-node-1
# The scale profile's namespace: no ResourceQuota or LimitRange (the ones of
# $NS cap it far below 1,000 sandboxes), the same Role and ServiceAccount.
SCALE_NS=agents-scale
# The sandbox namespace whose pods run under gVisor (sandbox_namespace).
GVISOR_NS=agents-gvisor
SCALE_CLIENT=$STATE/scale.kubeconfig
PROFILE=$STATE/profile
# What the running cluster was set up from (this script and the shipped
# manifests it applies): `up` of a healthy cluster set up from anything else
# starts it anew, since setup_objects runs only at start.
SETUP_KEY=$STATE/setup.key
# Every port is 127.0.0.1:<base + 100 * SANDBOX_CLUSTER_SLOT>, so a second
# checkout (a git worktree, whose state is its own .cluster/) can run its own
# cluster beside this one in another slot.
SLOT=${SANDBOX_CLUSTER_SLOT:-0}
[[ $SLOT =~ ^[0-9]$ ]] || { echo "[cluster] error: SANDBOX_CLUSTER_SLOT must be 0..9" >&2; exit 1; }
OFF=$((100 * SLOT))
P_API=$((6443 + OFF)) P_ETCD=$((23790 + OFF)) P_ETCD_PEER=$((23800 + OFF)) P_ETCD_METRICS=$((23810 + OFF))
P_NODE=$((10250 + OFF)) P_KWOK=$((10251 + OFF)) P_SBX_METRICS=$((18080 + OFF)) P_SBX_HEALTH=$((18081 + OFF))
# Start order; `down` stops in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok nodeexec agent-sandbox-controller)

export NO_PROXY=127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}
unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

hash_of() { cat "$@" | sha256sum | cut -c1-12; }

# --- build -------------------------------------------------------------------

K8S_BIN=$CACHE/k8s-$K8S-$(hash_of "$HERE/go.mod" "$HERE/go.sum")
EXT_BIN=$CACHE/thirdparty-$(hash_of "$HERE/thirdparty/go.mod" "$HERE/thirdparty/go.sum")
nodeexec_key() { echo "$CACHE/nodeexec-$(hash_of "$HERE/go.mod" "$HERE/go.sum" "$HERE"/cmd/nodeexec/*.go)"; }
NODEEXEC_BIN=$(nodeexec_key)
# The real node's NetworkPolicy engine (cmd/netpol): kube-router's netpol
# package, in this module, so its build reuses the Kubernetes libraries'.
netpol_key() { echo "$CACHE/netpol-$(hash_of "$HERE/go.mod" "$HERE/go.sum" "$HERE"/cmd/netpol/*.go)"; }
NETPOL_BIN=$(netpol_key)

# build_into DEST PROBE CMD...: runs "CMD... <dir>" to build into a private
# directory next to DEST, then moves that into place (DEST/PROBE marks a
# complete one). Several `up`s
# at once (slots, fresh clones) each build their own, and the first to finish
# wins: a directory in place is complete and never replaced under a running
# cluster; a later finisher discards its copy.
build_into() {
	local dest=$1 probe=$2 tmp
	shift 2
	tmp=$(mktemp -d "$dest.tmp.XXXXXX")
	chmod 755 "$tmp"
	if ! "$@" "$tmp"; then
		rm -rf "$tmp"
		return 1
	fi
	if [[ -x $dest/$probe ]]; then
		rm -rf "$tmp"
		return 0
	fi
	rm -rf "$dest" # an incomplete leftover of an older layout
	mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
}

build_k8s() {
	local minor=${K8S#v1.}; minor=${minor%%.*}
	local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1"
	ld+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S"
	(cd "$HERE" && CGO_ENABLED=0 go build -trimpath -ldflags="$ld" -o "$1/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet ./cmd/etcd)
}

build_thirdparty() {
	(cd "$HERE/thirdparty" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$1/" \
		sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller)
}

build_nodeexec() {
	(cd "$HERE" && CGO_ENABLED=0 go build -trimpath -o "$1/nodeexec" ./cmd/nodeexec)
	# The key was taken before the build: sources edited meanwhile would
	# be cached under the old sources' name.
	if [[ $(nodeexec_key) != "$NODEEXEC_BIN" ]]; then
		log "nodeexec's sources changed during its build: run 'cluster.sh up' again"
		return 1
	fi
}

build_netpol() {
	(cd "$HERE" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$1/netpol" ./cmd/netpol)
	# As for nodeexec: the key was taken before the build.
	if [[ $(netpol_key) != "$NETPOL_BIN" ]]; then
		log "netpol's sources changed during its build: run 'cluster.sh up' again"
		return 1
	fi
}

build() {
	local t0=$SECONDS
	install_packages
	if [[ ! -x $K8S_BIN/kubelet ]]; then
		log "building Kubernetes $K8S components and etcd (cold: ~10-15 min on 2 cores)"
		build_into "$K8S_BIN" kubelet build_k8s || die "building Kubernetes failed"
	fi
	if [[ ! -x $EXT_BIN/agent-sandbox-controller ]]; then
		log "building kwok $KWOK and agent-sandbox controller $SBX"
		build_into "$EXT_BIN" agent-sandbox-controller build_thirdparty || die "building kwok and agent-sandbox failed"
	fi
	if [[ ! -x $NODEEXEC_BIN/nodeexec ]]; then
		log "building nodeexec"
		build_into "$NODEEXEC_BIN" nodeexec build_nodeexec || die "building nodeexec failed"
	fi
	if [[ ! -x $NETPOL_BIN/netpol ]]; then
		log "building netpol (kube-router's NetworkPolicy controller)"
		build_into "$NETPOL_BIN" netpol build_netpol || die "building netpol failed"
	fi
	(( SECONDS - t0 > 1 )) && log "build took $((SECONDS - t0)) s"
	build_real_node
}

# modcache MODULE: its directory in the module cache, at the pinned version.
modcache() { (cd "$HERE/thirdparty" && go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'); }

KUBECTL() { "$K8S_BIN/kubectl" --kubeconfig "$ADMIN" "$@"; }

# install_packages: the Debian packages the real node needs (its tools, the
# CNI plugins, libseccomp for runc's seccomp, and what builds its images),
# installed once when one is missing.
NODE_PACKAGES=(iproute2 iptables ipset socat containernetworking-plugins libseccomp-dev pkg-config gcc libc6-dev mmdebstrap umoci)
install_packages() {
	local missing=() p
	for p in "${NODE_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "the real node needs these packages: ${missing[*]}"
	log "installing ${missing[*]} (apt)"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
}

# --- processes ---------------------------------------------------------------

pid_of() { [[ -f $RUN/$1.pid ]] && cat "$RUN/$1.pid"; }
alive() { local p; p=$(pid_of "$1") && [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }

# start NAME CMD...: runs CMD under a small supervisor that starts it again
# when it exits on its own (kube-scheduler, for one, exits on purpose when an
# API server restart leaves its cache inconsistent, as a kubelet would then
# restart it); `stop_pid` stops both. $RUN/NAME.pid is the component's pid.
start() {
	local name=$1; shift
	log "starting $name"
	rm -f "$RUN/$name.stop" "$RUN/$name.pid" "$RUN/$name.restarts"
	: >"$RUN/$name.log"
	nohup bash -c '
		name=$1 run=$2; shift 2
		while :; do
			"$@" >>"$run/$name.log" 2>&1 </dev/null &
			echo $! >"$run/$name.pid"
			wait $!; code=$?
			[[ -e $run/$name.stop ]] && exit 0
			echo "[cluster.sh] $name exited ($code); starting it again in 1 s" >>"$run/$name.log"
			# The file is "N CODE TIME": only N counts (arithmetic on the whole
			# line is an error that would end this supervisor).
			n=0; [[ -f $run/$name.restarts ]] && read -r n _ <"$run/$name.restarts"
			echo "$((n + 1)) $code $(date -u +%H:%M:%S)" >"$run/$name.restarts"
			sleep 1
		done' supervise "$name" "$RUN" "$@" >/dev/null 2>&1 </dev/null &
	echo $! >"$RUN/$name.supervisor"
	local _
	for _ in $(seq 50); do [[ -s $RUN/$name.pid ]] && return 0; sleep 0.1; done
	fail "$name" "its supervisor did not start it"
}

# fail NAME MSG: a component did not come up; say which and show its log.
fail() {
	printf '[cluster] error: %s: %s\n--- last lines of %s ---\n' "$1" "$2" "$RUN/$1.log" >&2
	tail -n 30 "$RUN/$1.log" >&2 || true
	exit 1
}

# wait_for NAME TIMEOUT CMD...: poll CMD until it succeeds, NAME dies, or TIMEOUT s pass.
wait_for() {
	local name=$1 timeout=$2; shift 2
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		alive "$name" || fail "$name" "exited during start-up"
		((SECONDS < deadline)) || fail "$name" "not ready after ${timeout}s"
		sleep 0.2
	done
}

# stop_pid NAME: stops the component and its supervisor (TERM, 5 s, KILL).
stop_pid() {
	local name=$1 p s
	[[ -d $RUN ]] || return 0
	: >"$RUN/$name.stop"
	s=$(cat "$RUN/$name.supervisor" 2>/dev/null) || s=
	p=$(pid_of "$name") || p=
	if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
		kill "$p" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	fi
	[[ -n $s ]] && kill "$s" 2>/dev/null || true
	rm -f "$RUN/$name.pid" "$RUN/$name.supervisor"
}

# shellcheck source=node/realnode.sh
source "$HERE/node/realnode.sh"

# --- PKI and kubeconfigs -----------------------------------------------------

pki() {
	mkdir -p "$PKI"
	[[ -f $PKI/admin.crt ]] && return 0
	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=local-ca" 2>/dev/null
		mk() {
			openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf '%b\n' "$3" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null
		}
		mk apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth"
		mk admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
		mk kubelet "/CN=localhost" "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)
	node_pki
	write_kubeconfig "$ADMIN" admin "" --client-certificate="$PKI/admin.crt" --client-key="$PKI/admin.key" --embed-certs
}

# write_kubeconfig FILE USER NAMESPACE CREDENTIAL-FLAGS...: a one-context
# kubeconfig for the local API server.
write_kubeconfig() {
	local file=$1 user=$2 ns=$3; shift 3
	local kc=("$K8S_BIN/kubectl" config --kubeconfig="$file")
	rm -f "$file"
	"${kc[@]}" set-cluster local --server=https://127.0.0.1:$P_API --certificate-authority="$PKI/ca.crt" --embed-certs >/dev/null
	"${kc[@]}" set-credentials "$user" "$@" >/dev/null
	"${kc[@]}" set-context local --cluster=local --user="$user" ${ns:+--namespace="$ns"} >/dev/null
	"${kc[@]}" use-context local >/dev/null
	chmod 600 "$file"
}

# token_kubeconfig FILE SERVICEACCOUNT: a kubeconfig with a token of
# $PROVIDER_NS/SERVICEACCOUNT, its context in $NS.
token_kubeconfig() {
	local token
	token=$(KUBECTL -n "$PROVIDER_NS" create token "$2" --duration=48h)
	write_kubeconfig "$1" "$2" "$NS" --token="$token"
}

# client_kubeconfigs: the tests' provider identity, sandbox-client, holds
# both modes' Roles and the ports one (the tests run both modes as one
# process, as a deployment using both would). Beside it, one account per
# mode, bound to only that mode's Role (sandbox_namespace), as rbac/ grants
# it to a provider running in that mode alone.
client_kubeconfigs() {
	token_kubeconfig "$CLIENT" sandbox-client
	local mode
	for mode in warm-pool direct; do
		KUBECTL -n "$PROVIDER_NS" create serviceaccount "sandbox-client-$mode" --dry-run=client -o yaml | KUBECTL apply -f - >/dev/null
		token_kubeconfig "$STATE/$mode.kubeconfig" "sandbox-client-$mode"
	done
}

# --- the scale profile -------------------------------------------------------

# scale: the running cluster has the scale profile (`up --scale`). It raises
# the client limits and workers of the scheduler, controller-manager, kwok and
# the agent-sandbox controller, so that at 1,000 sandboxes their defaults
# (50 and 20 QPS, 20 GC workers, 4 kwok stage workers, 50 claim workers) are
# not what a benchmark of the provider measures.
scale() { [[ -f $PROFILE && $(<"$PROFILE") == scale ]]; }

# scale_flags COMPONENT: its extra flags under the scale profile (none otherwise).
scale_flags() {
	scale || return 0
	case $1 in
	kube-scheduler) echo "--kube-api-qps=1000 --kube-api-burst=2000" ;;
	# The garbage collector deletes a destroyed Sandbox's pod (and PVCs): at
	# 20 QPS it bounds destroy-all to ~10 sandboxes a second.
	kube-controller-manager) echo "--kube-api-qps=1000 --kube-api-burst=2000 --concurrent-gc-syncs=100" ;;
	# Its client has no QPS limit by default; the HTTP/2 connection's 100
	# streams are its limit, hence more connections, and watches apart.
	agent-sandbox-controller)
		echo "--api-connections=4 --separate-watch-connection=true --sandbox-concurrent-workers=400" \
			"--sandbox-claim-concurrent-workers=400 --sandbox-warm-pool-concurrent-workers=4 --sandbox-template-concurrent-workers=4"
		;;
	esac
}

# scale_namespace: $SCALE_NS as examples/manifests/namespace.yaml makes
# $NS (Pod Security restricted, selected by the admission policy, with its
# parameters), with both modes' Roles of rbac/ in it bound to a
# ServiceAccount sandbox-client of its own (so the audit log below records
# the benchmark's requests only), and a token kubeconfig for it.
scale_namespace() {
	local examples=$HERE/../../examples/manifests token
	sed "s/^  name: $NS\$/  name: $SCALE_NS/" "$examples/namespace.yaml" | KUBECTL apply -f - >/dev/null
	KUBECTL -n "$SCALE_NS" apply -f "$examples/admission-policy.yaml" >/dev/null
	KUBECTL -n "$SCALE_NS" create serviceaccount sandbox-client --dry-run=client -o yaml | KUBECTL apply -f - >/dev/null
	# One document stream: `---` between the files (neither ends with one).
	local f
	for f in "$examples/rbac/warm-pool.yaml" "$examples/rbac/direct.yaml"; do
		sed "s/^  namespace: $PROVIDER_NS\$/  namespace: $SCALE_NS/" "$f"
		echo "---"
	done | KUBECTL -n "$SCALE_NS" apply -f - >/dev/null
	token=$(KUBECTL -n "$SCALE_NS" create token sandbox-client --duration=48h)
	write_kubeconfig "$SCALE_CLIENT" sandbox-client "$SCALE_NS" --token="$token"
}

# to_scale: switches a running cluster to the scale profile by restarting,
# with their scale flags, the components that have some (state and objects
# stay).
to_scale() {
	log "switching the running cluster to the scale profile"
	echo scale >"$PROFILE"
	stop_pid kube-apiserver
	start_apiserver
	stop_pid agent-sandbox-controller
	stop_pid kube-scheduler
	stop_pid kube-controller-manager
	stop_pid kwok
	start_controllers
	start_kwok
	start_agent_sandbox
	scale_namespace
	write_env
}

# --- components --------------------------------------------------------------

start_etcd() {
	start etcd "$K8S_BIN/etcd" --name=local --data-dir="$STATE/etcd" \
		--listen-client-urls=http://127.0.0.1:$P_ETCD --advertise-client-urls=http://127.0.0.1:$P_ETCD \
		--listen-peer-urls=http://127.0.0.1:$P_ETCD_PEER --initial-advertise-peer-urls=http://127.0.0.1:$P_ETCD_PEER \
		--initial-cluster=local=http://127.0.0.1:$P_ETCD_PEER --listen-metrics-urls=http://127.0.0.1:$P_ETCD_METRICS \
		--unsafe-no-fsync --log-level=warn
	wait_for etcd 30 curl -sf http://127.0.0.1:$P_ETCD/health
}

start_apiserver() {
	local extra=()
	# The scale profile's audit log records every request of the scale
	# namespace's ServiceAccount (and nothing else): the API server's
	# request counters have no user label, and the controller writes the
	# same kinds in the same namespace, so this is how a benchmark counts
	# the provider's own requests by verb and resource.
	if scale; then
		cat >"$STATE/audit-policy.yaml" <<-EOF
			apiVersion: audit.k8s.io/v1
			kind: Policy
			omitStages: [RequestReceived]
			rules:
			- level: Metadata
			  users: ["system:serviceaccount:$SCALE_NS:sandbox-client"]
			- level: None
		EOF
		extra=(--audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$STATE/audit.log" --audit-log-format=json
			--audit-log-maxsize=0 --audit-log-mode=blocking)
	fi
	# --endpoint-reconciler-type=none: the lease reconciler rejects a loopback
	# advertise address. TaintNodesByCondition is off so the fake node is never
	# tainted not-ready (no node-lifecycle controller runs to lift it).
	start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:$P_ETCD \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$P_API \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --allow-privileged=true \
		--endpoint-reconciler-type=none --kubelet-preferred-address-types=InternalIP,Hostname \
		--disable-admission-plugins=TaintNodesByCondition --cert-dir="$STATE/apiserver-certs" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		"${extra[@]}"
	wait_for kube-apiserver 60 KUBECTL get --raw=/readyz
}

start_controllers() {
	local kcm sched
	read -r -a kcm <<<"$(scale_flags kube-controller-manager)"
	read -r -a sched <<<"$(scale_flags kube-scheduler)"
	start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig="$ADMIN" "${kcm[@]}" \
		--leader-elect=false --use-service-account-credentials=false --bind-address=127.0.0.1 --secure-port=0 \
		--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller,resourcequota-controller \
		--root-ca-file="$PKI/ca.crt"
	start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig="$ADMIN" --leader-elect=false "${sched[@]}" \
		--bind-address=127.0.0.1 --secure-port=0
}

start_node() {
	KUBECTL apply -f "$HERE/manifests/node.yaml" -f "$HERE/manifests/node-scale.yaml" >/dev/null
	start_kwok
	start nodeexec "$NODEEXEC_BIN/nodeexec" --kubeconfig="$ADMIN" --listen=127.0.0.1:$P_NODE \
		--tls-cert-file="$PKI/kubelet.crt" --tls-private-key-file="$PKI/kubelet.key" \
		--node-name="$NODE" --shared-node="$SCALE_NODE" --state-dir="$STATE/node" --storage-class=local-dev \
		--pod-max-pids=4096
	wait_for nodeexec 30 curl -skf https://127.0.0.1:$P_NODE/healthz
}

start_kwok() {
	local kwokdir; kwokdir=$(modcache sigs.k8s.io/kwok)
	# kwok's node stages from the module cache, then our pod stages.
	{
		cat "$kwokdir/kustomize/stage/node/fast/node-initialize.yaml"; echo "---"
		cat "$kwokdir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"; echo "---"
		cat "$kwokdir/kustomize/stage/pod/fast/pod-delete.yaml"; echo "---"
		cat "$HERE/kwok/pod-stages.yaml"
		# 4 pod stages at a time by default: 1,000 pods made Ready 4 by 4.
		# A KwokConfiguration given here gets no defaults (0 lease workers is
		# refused): every field kwok's own kwok.yaml sets and the flags do not.
		if scale; then
			printf -- '---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n'
			printf '  %s\n' "cidr: 10.0.0.0/24" "nodeLeaseParallelism: 4" "nodePlayStageParallelism: 4" \
				"podPlayStageParallelism: 32" "podsOnNodeSyncParallelism: 1" "enablePodsOnNodeSyncListPager: true" \
				"enablePodsOnNodeSyncStreamWatch: false" "enableProfilingHandler: false" "enableContentionProfiling: false"
		fi
	} >"$STATE/kwok.yaml"
	# kwok advertises nodeexec's port in the node status; its own server,
	# unused, stays on another loopback port. HOME keeps it off ~/.kwok.
	start kwok env HOME="$STATE" "$EXT_BIN/kwok" --kubeconfig="$ADMIN" --config="$STATE/kwok.yaml" \
		--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--node-ip=127.0.0.1 --node-name=localhost --node-port=$P_NODE --server-address=127.0.0.1:$P_KWOK \
		--node-lease-duration-seconds=40 --tls-cert-file="$PKI/kubelet.crt" --tls-private-key-file="$PKI/kubelet.key"
	wait_for kwok 60 KUBECTL wait --for=condition=Ready "node/$NODE" "node/$SCALE_NODE" --timeout=1s
}

# The agent-sandbox CRDs, before the controller-manager starts: its quota
# controller discovers resources when it starts and then only every 30 s, and
# the ResourceQuota counts Sandboxes and claims (it refuses them until then).
install_crds() {
	local sbxdir; sbxdir=$(modcache sigs.k8s.io/agent-sandbox)
	KUBECTL apply --server-side -f "$sbxdir/k8s/crds/" >/dev/null
	KUBECTL wait --for=condition=Established crd --all --timeout=60s >/dev/null
}

start_agent_sandbox() {
	local extra
	read -r -a extra <<<"$(scale_flags agent-sandbox-controller)"
	start agent-sandbox-controller "$EXT_BIN/agent-sandbox-controller" --kubeconfig="$ADMIN" \
		--leader-elect=false --extensions=true "${extra[@]}" \
		--metrics-bind-address=127.0.0.1:$P_SBX_METRICS --health-probe-bind-address=127.0.0.1:$P_SBX_HEALTH
	wait_for agent-sandbox-controller 60 curl -sf http://127.0.0.1:$P_SBX_HEALTH/readyz
}

setup_objects() {
	local examples=$HERE/../../examples/manifests
	KUBECTL apply -f "$HERE/manifests/setup.yaml" >/dev/null
	# The provider's namespace and identities (client_kubeconfigs), then the
	# sandbox namespaces: runc's, and gVisor's as a GKE Sandbox user sets it.
	KUBECTL apply -f "$examples/rbac/service-account.yaml" >/dev/null
	client_kubeconfigs
	sandbox_namespace "$NS"
	sandbox_namespace "$GVISOR_NS" gvisor
}

# sandbox_namespace NAME [RUNTIME_CLASS]: a sandbox namespace made from the
# files users apply, the way examples/manifests/README.md says (the namespace
# first, then every YAML file of it), so they cannot rot; with both modes'
# Roles and the ports one bound to the tests' identities (client_kubeconfigs).
# With RUNTIME_CLASS, the templates' `runtimeClassName` line is uncommented to
# it and the admission policy requires it.
sandbox_namespace() {
	local ns=$1 class=${2:-} examples=$HERE/../../examples/manifests
	as_shipped "$ns" "$class" "$examples/namespace.yaml" | KUBECTL apply -f - >/dev/null
	wait_for kube-controller-manager 30 KUBECTL -n "$ns" get serviceaccount default
	# The quota refuses what it has not counted yet ("status unknown for
	# quota"): before the warm pools' controller meets it, let the
	# controller-manager count it (see install_crds).
	as_shipped "$ns" "$class" "$examples/resource-quota.yaml" | KUBECTL -n "$ns" apply -f - >/dev/null
	wait_for kube-controller-manager 60 quota_counted "$ns"
	as_shipped "$ns" "$class" "$examples"/*.yaml | KUBECTL -n "$ns" apply -f - >/dev/null
	KUBECTL -n "$ns" apply -f "$examples/rbac/warm-pool.yaml" -f "$examples/rbac/direct.yaml" -f "$examples/rbac/ports.yaml" >/dev/null
	local mode
	for mode in warm-pool direct; do
		KUBECTL -n "$ns" create rolebinding "test-$mode-only" --role="sandbox-client-$mode" \
			--serviceaccount="$PROVIDER_NS:sandbox-client-$mode" --dry-run=client -o yaml | KUBECTL apply -f - >/dev/null
	done
	# The API server enforces a new admission policy once its informers have
	# it: wait for that, so no test object gets in before.
	wait_for kube-apiserver 30 admission_active "$ns"
	local p
	for p in pool-workspace pool-ephemeral; do
		wait_for agent-sandbox-controller 120 pool_ready "$ns" "$p"
	done
}

# as_shipped NAMESPACE RUNTIME_CLASS FILE...: the manifests as shipped, one
# document stream, but for the namespace's name, the runtime class (empty:
# none) and the CPU and memory each sandbox requests (the LimitRange's
# defaults, the templates' requests), which their comments ask to size to
# the nodes: 250m and 512Mi each would fit eight sandboxes on this 2-core
# machine's real node.
as_shipped() {
	local ns=$1 class=$2 f edits=(-e "s/^  name: $NS\$/  name: $1/" -e 's/{ cpu: 250m, memory: 512Mi,/{ cpu: 10m, memory: 64Mi,/')
	[[ -z $class ]] || edits+=(-e "s/# runtimeClassName: .*/runtimeClassName: $class/" -e "s/runtimeClassNames: \"\"/runtimeClassNames: \"$class\"/")
	shift 2
	for f in "$@"; do
		sed "${edits[@]}" "$f"
		echo "---"
	done
}

# admission_active NAMESPACE: the API server refuses a privileged Sandbox
# there with the shipped admission policy and its parameters (a server-side
# dry run: nothing is created).
admission_active() {
	local out
	out=$(KUBECTL -n "$1" create --dry-run=server -o name -f - 2>&1 <<-EOF
		apiVersion: agents.x-k8s.io/v1beta1
		kind: Sandbox
		metadata: {name: admission-probe}
		spec:
		  podTemplate:
		    spec:
		      automountServiceAccountToken: false
		      containers: [{name: c, image: x, securityContext: {privileged: true}}]
	EOF
	)
	[[ $out == *"ValidatingAdmissionPolicy 'agent-sandboxes'"*"privileged containers are not allowed"* ]]
}

# quota_counted NAMESPACE: its ResourceQuota has a usage for everything it limits.
quota_counted() {
	KUBECTL -n "$1" get resourcequota -o json |
		python3 -c 'import json,sys; q=json.load(sys.stdin)["items"]; s=[i.get("status",{}) for i in q]; sys.exit(not q or any(set(x.get("hard",{}))-set(x.get("used",{})) for x in s))'
}

# pool_ready NAMESPACE POOL: every replica of the warm pool is ready.
pool_ready() {
	local want have
	want=$(KUBECTL -n "$1" get sandboxwarmpool "$2" -o jsonpath='{.spec.replicas}')
	have=$(KUBECTL -n "$1" get sandboxwarmpool "$2" -o jsonpath='{.status.readyReplicas}')
	[[ -n $have && $have == "$want" ]]
}

write_env() {
	cat >"$STATE/env" <<EOF
export KUBECONFIG=$CLIENT
export SANDBOX_TEST_ADMIN_KUBECONFIG=$ADMIN
export SANDBOX_TEST_WARM_POOL_KUBECONFIG=$STATE/warm-pool.kubeconfig
export SANDBOX_TEST_DIRECT_KUBECONFIG=$STATE/direct.kubeconfig
export SANDBOX_TEST_NAMESPACE=$NS
export SANDBOX_TEST_GVISOR_NAMESPACE=$GVISOR_NS
export SANDBOX_TEST_KUBECTL=$K8S_BIN/kubectl
export SANDBOX_CLUSTER_SCRIPT=$HERE/cluster.sh
EOF
	# The real node's network (node/realnode.sh), for network-policy.test.mjs:
	# its netns, the fake hosts' netns and addresses, and the address its
	# kubelet (and its pods) reach the API server's relay at; the port is the
	# API server's, in the kubeconfigs.
	cat >>"$STATE/env" <<EOF
export SANDBOX_TEST_REAL_NODE=$REAL_NODE
export SANDBOX_TEST_NODE_NETNS=$NODE_NS
export SANDBOX_TEST_INET_NETNS=$INET_NS
export SANDBOX_TEST_INET_ADDR=$INET_IP
export SANDBOX_TEST_META_NETNS=$META_NS
export SANDBOX_TEST_META_ADDR=$META_IP
export SANDBOX_TEST_API_RELAY_ADDR=$NODE_HOST_IP
EOF
	if scale; then
		cat >>"$STATE/env" <<EOF
export SANDBOX_SCALE_KUBECONFIG=$SCALE_CLIENT
export SANDBOX_SCALE_NAMESPACE=$SCALE_NS
export SANDBOX_SCALE_NODE=$SCALE_NODE
export SANDBOX_SCALE_AUDIT_LOG=$STATE/audit.log
EOF
	fi
}

healthy() {
	local c
	for c in "${COMPONENTS[@]}"; do alive "$c" || return 1; done
	real_node_healthy || return 1
	KUBECTL get --raw=/readyz >/dev/null 2>&1 && [[ -f $STATE/env ]]
}

# --- commands ----------------------------------------------------------------

up() {
	local want_scale=${SANDBOX_CLUSTER_PROFILE:-}
	case ${1:-} in
	--scale) want_scale=scale ;;
	"") ;;
	*) die "usage: cluster.sh up [--scale]" ;;
	esac
	[[ -z $want_scale || $want_scale == scale ]] || die "SANDBOX_CLUSTER_PROFILE: only 'scale' is known"
	command -v go >/dev/null || die "Go is required (go1.26+)"
	command -v openssl >/dev/null || die "openssl is required"
	command -v nsenter >/dev/null || die "nsenter (util-linux) is required"
	command -v setpriv >/dev/null || die "setpriv (util-linux) is required"
	install_packages
	[[ $(id -u) == 0 ]] || die "nodeexec needs root (mount and PID namespaces)"
	build
	if healthy && [[ $(setup_key) != "$(cat "$SETUP_KEY" 2>/dev/null)" ]]; then
		log "running, but set up from another cluster.sh or other manifests: starting anew"
		down quiet
	fi
	if healthy; then
		log "already running$(scale && echo ' (scale profile)')"
		# A plain `up` leaves a scale cluster as it is.
		if [[ $want_scale == scale ]] && ! scale; then to_scale; fi
		usage_note
		return 0
	fi
	down quiet
	local t0=$SECONDS
	mkdir -p "$RUN"
	if [[ -n $want_scale ]]; then echo "$want_scale" >"$PROFILE"; fi
	pki
	start_etcd
	start_apiserver
	install_crds
	start_controllers
	start_node
	start_real_node
	start_agent_sandbox
	setup_objects
	if scale; then scale_namespace; fi
	write_env
	setup_key >"$SETUP_KEY"
	log "Ready for tests ($((SECONDS - t0)) s)"
	usage_note
}

# setup_key: a hash of what the set-up reads (see SETUP_KEY).
setup_key() {
	{
		cat "$HERE/cluster.sh"
		find "$HERE/../../examples/manifests" -type f -print0 | sort -z | xargs -0 cat
	} | sha256sum | cut -c1-16
}

usage_note() {
	cat >&2 <<EOF
[cluster] KUBECONFIG=$CLIENT (ServiceAccount $PROVIDER_NS/sandbox-client, both modes' least privilege)
[cluster] admin: $ADMIN
[cluster] for tests: source $STATE/env
EOF
}

down() {
	local i c p
	for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
		c=${COMPONENTS[i]}
		alive "$c" && [[ ${1:-} != quiet ]] && log "stopping $c"
		stop_pid "$c"
	done
	stop_real_node
	# Pod inits left behind if nodeexec died without cleaning up.
	for p in "$STATE"/node/pods/*/init.pid; do
		[[ -f $p ]] && kill -9 "$(cat "$p")" 2>/dev/null || true
	done
	rm -rf "$STATE"
}

status() {
	local c
	for c in "${COMPONENTS[@]}" "${REAL_COMPONENTS[@]}"; do
		local restarts="" n code at
		# "N CODE TIME": restarted N times by its supervisor, the last after exit CODE at TIME.
		if [[ -f $RUN/$c.restarts ]] && read -r n code at <"$RUN/$c.restarts"; then
			restarts=", restarted $n time(s), last after exit $code at $at UTC"
		fi
		if alive "$c"; then echo "$c: running (pid $(pid_of "$c")$restarts)"; else echo "$c: stopped${restarts}"; fi
	done
}

case ${1:-} in
up) up "${@:2}" ;;
down) down ;;
status) status ;;
build) build ;;
env) cat "$STATE/env" ;;
apiserver)
	case ${2:-} in
	stop) stop_pid kube-apiserver ;;
	start) alive kube-apiserver || start_apiserver ;;
	*) die "usage: cluster.sh apiserver stop|start" ;;
	esac
	;;
*) die "usage: cluster.sh up [--scale]|down|status|env|build|apiserver stop|start" ;;
esac
