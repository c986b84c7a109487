package main

// Tests of what the node applies from a container's securityContext: the
// effective settings (pure), and, as root, a command really run through
// nsenter and setpriv, and a volume really given to its fsGroup.

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func ptr[T any](v T) *T { return &v }

func TestSecurityForTakesTheContainersFieldsOverThePods(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1001::/home/agent:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
		RunAsUser: ptr(int64(1000)), RunAsNonRoot: ptr(true), FSGroup: ptr(int64(2000)), SupplementalGroups: []int64{3000},
	}}}
	restricted := &corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CAP_NET_BIND_SERVICE"}},
	}}
	s, err := securityFor(pod, restricted, passwd)
	if err != nil {
		t.Fatal(err)
	}
	want := procSecurity{uid: 1000, gid: 1001, groups: []int64{2000, 3000}, noNewPrivs: true,
		caps: []string{"NET_BIND_SERVICE"}, home: "/home/agent"}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v, want %+v", s, want)
	}

	// The container's user and group win; a uid without a passwd entry gets HOME=/ and gid 0.
	own := &corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(4242)),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"net_raw"}}}}
	s, err = securityFor(pod, own, passwd)
	if err != nil {
		t.Fatal(err)
	}
	if s.uid != 4242 || s.gid != 0 || s.home != "/" || s.noNewPrivs || len(s.caps) != len(defaultCaps)-1 {
		t.Fatalf("got %+v", s)
	}
	if strings.Contains(strings.Join(s.caps, ","), "NET_RAW") {
		t.Fatalf("NET_RAW was dropped: %v", s.caps)
	}

	// Nothing set: the image's user (root here), the runtime's default capabilities.
	s, err = securityFor(&corev1.Pod{}, &corev1.Container{Name: "c"}, passwd)
	if err != nil || s.uid != 0 || s.home != "/root" || !reflect.DeepEqual(s.caps, defaultCaps) || s.groups != nil {
		t.Fatalf("got %+v, %v", s, err)
	}
	// Privileged: every capability (no bounding set).
	s, _ = securityFor(&corev1.Pod{}, &corev1.Container{SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}, passwd)
	if s.caps != nil {
		t.Fatalf("privileged got caps %v", s.caps)
	}
	// runAsNonRoot with no user: refused, as a kubelet refuses to start it.
	root := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}}}
	if _, err := securityFor(root, &corev1.Container{Name: "c"}, passwd); err == nil || !strings.Contains(err.Error(), "runAsNonRoot") {
		t.Fatalf("err = %v", err)
	}
}

func TestSetprivArguments(t *testing.T) {
	s := procSecurity{uid: 1000, gid: 1000, groups: []int64{1000, 5}, noNewPrivs: true, caps: []string{}}
	got := strings.Join(s.setpriv(), " ")
	want := "setpriv --reuid=1000 --regid=1000 --groups=1000,5 --no-new-privs --bounding-set=-all --inh-caps=-all --"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	got = strings.Join(procSecurity{caps: []string{"CHOWN", "KILL"}}.setpriv(), " ")
	want = "setpriv --reuid=0 --regid=0 --clear-groups --bounding-set=-all,+chown,+kill --inh-caps=-all --"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A stand-in pod (new PID, mount, UTS and IPC namespaces) in which the
// command runs through podCommand as a real exec does; its stdout.
func runInPod(t *testing.T, sec procSecurity, script string) string {
	t.Helper()
	initPID := standInPod(t, "nsenter", "setpriv")
	var out, errOut bytes.Buffer
	spec := execSpec{env: []string{"PATH=/usr/bin:/bin"}, workDir: "/", security: sec}
	c := podCommand(initPID, spec, []string{"sh", "-c", script})
	err := attach(context.Background(), c, func(c *exec.Cmd) error { return startInPod(c, initPID, nil) }, nil, &out, &errOut)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	return out.String()
}

// statusOf picks fields of /proc/self/status as the command saw them.
func statusOf(t *testing.T, status string, keys ...string) []string {
	var got []string
	for _, k := range keys {
		for _, l := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(l, k+":"); ok {
				got = append(got, strings.Join(strings.Fields(v), " "))
			}
		}
	}
	return got
}

func TestExecRunsAsTheContainersUserWithItsPrivileges(t *testing.T) {
	restricted := procSecurity{uid: 1000, gid: 1000, groups: []int64{1000}, noNewPrivs: true, caps: []string{}}
	st := runInPod(t, restricted, "cat /proc/self/status")
	got := statusOf(t, st, "Uid", "Gid", "Groups", "NoNewPrivs", "CapEff", "CapBnd", "CapInh")
	want := []string{"1000 1000 1000 1000", "1000 1000 1000 1000", "1000", "1",
		"0000000000000000", "0000000000000000", "0000000000000000"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restricted: got %q, want %q", got, want)
	}

	// Root with the runtime's default capabilities: docker's well-known 00000000a80425fb.
	st = runInPod(t, procSecurity{caps: defaultCaps}, "cat /proc/self/status")
	got = statusOf(t, st, "Uid", "Groups", "NoNewPrivs", "CapEff", "CapBnd")
	want = []string{"0 0 0 0", "", "0", "00000000a80425fb", "00000000a80425fb"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("root: got %q, want %q", got, want)
	}
}

func TestApplyFSGroupGivesTheVolumeToTheGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change groups")
	}
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{vol + "/sub"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{vol + "/sub/f", outside} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, vol+"/link"); err != nil {
		t.Fatal(err)
	}
	if err := applyFSGroup(vol, 4321, nil, false); err != nil {
		t.Fatal(err)
	}
	check := func(path string, gid int64, mode fs.FileMode) {
		t.Helper()
		info, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !ownedBy(info, gid) || info.Mode()&(fs.ModePerm|fs.ModeSetgid) != mode {
			t.Fatalf("%s: gid %d? mode %v, want gid %d mode %v", path, info.Sys().(*syscall.Stat_t).Gid, info.Mode(), gid, mode)
		}
	}
	check(vol, 4321, 0o775|fs.ModeSetgid)
	check(vol+"/sub", 4321, 0o775|fs.ModeSetgid)
	check(vol+"/sub/f", 4321, 0o660)
	check(outside, 0, 0o600) // a symlink is not followed

	// OnRootMismatch: a top directory already right is not walked; Always walks.
	if err := os.Chown(vol+"/sub/f", -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := applyFSGroup(vol, 4321, ptr(corev1.FSGroupChangeOnRootMismatch), false); err != nil {
		t.Fatal(err)
	}
	check(vol+"/sub/f", 0, 0o660)
	if err := applyFSGroup(vol, 4321, ptr(corev1.FSGroupChangeAlways), false); err != nil {
		t.Fatal(err)
	}
	check(vol+"/sub/f", 4321, 0o660)
}
