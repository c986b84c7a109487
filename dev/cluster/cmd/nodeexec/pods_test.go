package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An exec into another node's pod must never start a pod init here: the pod
// informer (this node's pods only) would never see that pod go, so its init
// and root would leak. The shared (scale) node's pods share one init.
func TestPlacementByNodeName(t *testing.T) {
	on := func(node string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}} }
	for _, c := range []struct {
		pod, shared string
		want        podPlacement
	}{
		{"kwok-node-0", "", ownPod},
		{"kwok-node-0", "kwok-node-1", ownPod},
		{"kwok-node-1", "kwok-node-1", sharedPod},
		{"kwok-node-1", "", otherNode},
		{"elsewhere", "kwok-node-1", otherNode},
		{"", "", otherNode}, // not scheduled: no shared-node match on ""
	} {
		if got := placement(on(c.pod), "kwok-node-0", c.shared); got != c.want {
			t.Errorf("pod on %q, shared node %q: got %v, want %v", c.pod, c.shared, got, c.want)
		}
	}
	if a, b := sharedStandIn("kwok-node-1"), sharedStandIn("kwok-node-1"); a.UID != b.UID || a.UID == "" {
		t.Errorf("the shared stand-in's UID must be stable and set: %q, %q", a.UID, b.UID)
	}
}
