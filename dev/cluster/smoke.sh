#!/usr/bin/env bash
# Smoke test of the local control plane, with kubectl as the least-privilege
# ServiceAccount: the behaviours the provider relies on, end to end through
# the API server (WebSocket v5 exec → stream translator → the real node's
# kubelet and containerd).
# Prints one line per check and "N passed, N failed"; exits non-zero on failure.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${SANDBOX_CLUSTER_STATE:-$(cd "$HERE/../.." && pwd)/.cluster}
# shellcheck disable=SC1091
source "$STATE/env"
K=("$SANDBOX_TEST_KUBECTL")              # as sandbox-client (KUBECONFIG)
A=("$SANDBOX_TEST_KUBECTL" --kubeconfig "$SANDBOX_TEST_ADMIN_KUBECONFIG" -n "$SANDBOX_TEST_NAMESPACE")
passed=0 failed=0
CLAIM=smoke-$$-$RANDOM

check() { # check NAME CMD...: run CMD, count the outcome
	local name=$1; shift
	if out=$("$@" 2>&1); then
		passed=$((passed + 1)); echo "ok   $name"
	else
		failed=$((failed + 1)); echo "FAIL $name"; printf '%s\n' "$out" | tail -n 5 | sed 's/^/     /'
	fi
}

jp() { "${K[@]}" get "$1" "$2" -o jsonpath="$3"; }

# wait_until SECONDS CMD...: poll until CMD succeeds.
wait_until() {
	local deadline=$((SECONDS + $1)); shift
	until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep 0.2; done
}

claim_ready() { [[ $(jp sandboxclaim "$CLAIM" '{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
sandbox_name() { jp sandboxclaim "$CLAIM" '{.status.sandbox.name}'; }
pod_uid() { jp pod "$SBX" '{.metadata.uid}'; }
sandbox_ready() {
	local gen obs st
	gen=$(jp sandbox "$SBX" '{.metadata.generation}')
	st=$(jp sandbox "$SBX" '{.status.conditions[?(@.type=="Ready")].status}')
	obs=$(jp sandbox "$SBX" '{.status.conditions[?(@.type=="Ready")].observedGeneration}')
	[[ $st == True && $obs == "$gen" ]]
}
sandbox_suspended() { [[ $(jp sandbox "$SBX" '{.status.conditions[?(@.type=="Suspended")].status}') == True ]]; }
xc() { "${K[@]}" exec "$SBX" -c sandbox -- "$@"; }

exit_code_is() { xc sh -c 'exit 3'; [[ $? == 3 ]]; }
stdin_eof() { [[ $(printf 'hello' | "${K[@]}" exec -i "$SBX" -c sandbox -- sh -c 'cat > /tmp/in; cat /tmp/in') == hello ]]; }
no_leftovers() {
	local hash kinds
	hash=$("${A[@]}" get pvc -o name -l "agents.x-k8s.io/sandbox-name-hash=$SBX_HASH")
	kinds=$("${A[@]}" get sandbox,pod,service -o name --field-selector "metadata.name=$SBX" 2>/dev/null)
	[[ -z $hash && -z $kinds ]]
}

cat <<EOF | "${K[@]}" apply -f - >/dev/null
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: $CLAIM}
spec: {warmPoolRef: {name: pool-workspace}}
EOF
check "claim on the warm pool becomes Ready" wait_until 60 claim_ready
SBX=$(sandbox_name)
SBX_HASH=$("${A[@]}" get sandbox "$SBX" -o jsonpath='{.metadata.labels.agents\.x-k8s\.io/sandbox-name-hash}' 2>/dev/null ||
	"${A[@]}" get pod "$SBX" -o jsonpath='{.metadata.labels.agents\.x-k8s\.io/sandbox-name-hash}')
check "its pod accepts exec" xc sh -c 'echo hi; test "$(pwd)" = /'
check "the pod's env from its spec applies" xc sh -c 'test "$WORKSPACE" = /workspace && test "$(hostname)" = "$HOSTNAME"'
check "GNU stat, timeout, find and grep are there" xc sh -c 'stat -c "%F|%s" / && timeout 5 true && find / -maxdepth 0 && echo x | grep -q x'
check "exit code 3 comes back as 3" exit_code_is
check "cat over stdin terminates at EOF" stdin_eof
check "write files in /workspace and /tmp" xc sh -c 'echo kept > /workspace/f && echo lost > /tmp/f'
# The template's securityContext, as a kubelet applies it: uid/gid 1000 with
# fsGroup 1000, no_new_privs, every capability dropped; /tmp and /dev/shm
# writable for everyone as in real images; /workspace given to the fsGroup.
own_user() {
	local s; s=$(xc cat /proc/self/status) || return 1
	[[ $(xc id -u):$(xc id -g) == 1000:1000 ]] && grep -Eqx 'Groups:\s*1000\s*' <<<"$s" &&
		grep -Eqx 'NoNewPrivs:\s*1' <<<"$s" && grep -Eqx 'CapBnd:\s*0+' <<<"$s" && grep -Eqx 'CapEff:\s*0+' <<<"$s"
}
check "execs run as the pod's user and fsGroup, with no_new_privs and no capabilities" own_user
check "/tmp, /var/tmp and /dev/shm are sticky and world-writable; /workspace is the fsGroup's" \
	test "$(xc stat -c '%a %g' /tmp /var/tmp /dev/shm /workspace | tr '\n' ' ')" = "1777 0 1777 0 1777 0 2777 1000 "
MARK="sleep 7$$"
check "a detached process keeps running in the pod" sh -c "$(printf '%q ' "${K[@]}") exec $SBX -c sandbox -- sh -c 'setsid $MARK </dev/null >/dev/null 2>&1 &' && sleep 0.5 && pgrep -fx '$MARK'"
# Like a container runtime, the node reaps what it starts and closes an exec's
# pipes when its client goes. Background kubectls write to files: one holding
# check's output would keep it waiting.
no_zombie_in_pod() {
	xc sh -c 'for f in /proc/[0-9]*/stat; do read -r l <"$f" || continue; s=${l##*") "}; [ "${s%% *}" != Z ] || exit 1; done' 2>/dev/null
}
# The provider's kill stops a process, sends TERM, then CONT: its exec ends
# with 143 and the process does not stay a zombie (under nsenter --pid it did,
# and its exec never ended).
stopped_then_killed() {
	local kp rc
	xc rm -f /tmp/victim
	timeout 30 "${K[@]}" exec "$SBX" -c sandbox -- sh -c 'echo $$ >/tmp/victim; exec sleep 300' >/dev/null 2>&1 &
	kp=$!
	wait_until 20 xc test -s /tmp/victim &&
		xc sh -c 'p=$(cat /tmp/victim); kill -STOP "$p"; sleep 0.5; kill -TERM "$p"; kill -CONT "$p"'
	wait "$kp"; rc=$?
	[[ $rc == 143 ]] || { echo "exec ended with $rc, want 143 (124: still running after 30 s)"; return 1; }
	wait_until 10 no_zombie_in_pod || { echo "a zombie is left in the pod"; return 1; }
}
check "a process stopped, then killed, ends its exec and is reaped" stopped_then_killed
# kubectl is killed once the command has started; then a child it left
# writes. On the real node containerd keeps the exec's output FIFO open for
# as long as a process holds it and discards what nobody reads: the write
# succeeds (status 0; a flood would block once the FIFO is full). nodeexec,
# as `docker exec` does when its client goes, closes the pipe: SIGPIPE (141).
client_gone() {
	local kp st out want=141
	[[ $(jp pod "$SBX" '{.spec.nodeName}') == "$SANDBOX_TEST_REAL_NODE" ]] && want=0
	out=$(mktemp)
	xc rm -f /tmp/go /tmp/late
	"${K[@]}" exec "$SBX" -c sandbox -- sh -c \
		'( (while [ ! -e /tmp/go ]; do sleep 0.1; done; echo late); echo $? >/tmp/late ) & echo early' >"$out" 2>&1 &
	kp=$!
	wait_until 20 grep -q early "$out"
	kill -9 "$kp" 2>/dev/null; wait "$kp" 2>/dev/null; rm -f "$out"
	sleep 1 # for the API server and the node to see the connection go
	xc touch /tmp/go
	wait_until 10 xc test -s /tmp/late || { echo "no status from the late write"; return 1; }
	st=$(xc cat /tmp/late)
	[[ $st == "$want" ]] || { echo "the late write ended with $st, want $want"; return 1; }
	wait_until 10 no_zombie_in_pod || { echo "a zombie is left in the pod"; return 1; }
}
check "a child of an exec whose client went away writes as its node allows (containerd: discarded; nodeexec: SIGPIPE), leaving no zombie" client_gone
UID1=$(pod_uid)
"${K[@]}" patch sandbox "$SBX" --type=merge -p '{"spec":{"operatingMode":"Suspended"}}' >/dev/null
check "suspend deletes the pod" wait_until 60 sandbox_suspended
check "every process of the deleted pod is gone" wait_until 10 sh -c "! pgrep -fx '$MARK'"
"${K[@]}" patch sandbox "$SBX" --type=merge -p '{"spec":{"operatingMode":"Running"}}' >/dev/null
check "resume brings a new pod back" wait_until 60 sandbox_ready
check "the resumed pod is a new pod" test "$(pod_uid)" != "$UID1"
check "/workspace file kept across suspend" test "$(xc cat /workspace/f)" = kept
check "/tmp file gone after suspend" xc sh -c '! test -e /tmp/f'
PVC_DIR=$STATE/node/volumes/pvc-$("${A[@]}" get pvc "workspace-$SBX" -o jsonpath='{.metadata.uid}')
check "the /workspace PVC has its own data directory" test -f "$PVC_DIR/f"
"${K[@]}" delete sandboxclaim "$CLAIM" --wait=true >/dev/null
check "deleting the claim leaves no Sandbox, Pod, Service or PVC" wait_until 60 no_leftovers
check "the PVC's data directory is removed" wait_until 30 test ! -e "$PVC_DIR"

# The supervisor starts a component again however often it exits (the
# scheduler exits on purpose when an API server restart corrupts its cache).
RUN=$STATE/run
restarts() { local n=0; [[ -f $RUN/kube-scheduler.restarts ]] && read -r n _ <"$RUN/kube-scheduler.restarts"; echo "$n"; }
scheduler_back() { local p; p=$(cat "$RUN/kube-scheduler.pid") && [[ $p != "$1" ]] && kill -0 "$p" && (($(restarts) >= $2)); }
killed_twice_and_back() {
	local before i p; before=$(restarts)
	for i in 1 2; do
		p=$(cat "$RUN/kube-scheduler.pid") && kill -9 "$p" && wait_until 20 scheduler_back "$p" $((before + i)) || return 1
	done
}
check "a component killed twice is started again each time" killed_twice_and_back

echo "$passed passed, $failed failed"
((failed == 0))
