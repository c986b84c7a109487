#!/usr/bin/env bash
# Prepares gVisor's module for the build with the runc shim's oom_score_adj
# rule in gVisor's containerd shim, and prints the -modfile to build with:
#
#   oom-score.sh WORK_DIR     (run in dev/cluster/node/gvisor)
#
# gVisor's shim sets -999 on itself and fails the sandbox when the kernel
# refuses. Lowering a score needs CAP_SYS_RESOURCE, which root lacks on these
# machines (the VM's capability bounding set), so every gVisor pod would fail
# to start. containerd's runc shim (shim.AdjustOOMScore) takes its parent's
# score + 1 instead, which any process may set. The module, as downloaded, is
# linked (not copied) into WORK_DIR and one line of one file is changed;
# nothing else.
set -euo pipefail
work=$1
dir=$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)
rel=pkg/shim/v1/manager.go
old='sys.SetOOMScore(cmd.Process.Pid, oomScoreMax)'
grep -qF "$old" "$dir/$rel" || { echo "oom-score.sh: $rel no longer has: $old" >&2; exit 1; }
cp -al "$dir" "$work/gvisor"
chmod u+w "$work/gvisor/$(dirname "$rel")"
rm "$work/gvisor/$rel"
{
	sed "s/$old/shim.AdjustOOMScore(cmd.Process.Pid)/" "$dir/$rel"
	printf '\n// Still imported for the other platforms this file builds for.\nvar _ = sys.SetOOMScore\n'
} >"$work/gvisor/$rel"
cp go.mod "$work/go.mod"
cp go.sum "$work/go.sum"
go mod edit -modfile="$work/go.mod" -replace="gvisor.dev/gvisor=$work/gvisor"
echo "$work/go.mod"
