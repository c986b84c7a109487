package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// The hierarchies and nodeexec's cgroup in each, from this VM's files (hybrid
// v1: separate cpu and cpuacct, nodeexec in a nested memory cgroup) and a
// Docker host's (co-mounted cpu,cpuacct; a mount whose root is a subtree).
func TestCgroupHierarchies(t *testing.T) {
	mountinfo := `25 30 0:22 / /sys rw,nosuid - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:31 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:34 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
40 31 0:35 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`
	self := `9:name=systemd:/
8:pids:/
5:devices:/
4:memory:/process_api/b22
2:cpuacct:/
1:cpu:/
0::/
`
	got := cgroupHierarchies(mountinfo, self)
	want := []cgroupHierarchy{
		{"cpu", []string{"cpu"}, "/sys/fs/cgroup/cpu"},
		{"cpuacct", []string{"cpuacct"}, "/sys/fs/cgroup/cpuacct"},
		{"memory", []string{"memory"}, "/sys/fs/cgroup/memory/process_api/b22"},
		{"pids", []string{"pids"}, "/sys/fs/cgroup/pids"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hybrid host:\n got %+v\nwant %+v", got, want)
	}

	docker := `40 31 0:33 /kubepods/pod1 /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
41 31 0:34 /kubepods/pod1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
42 31 0:35 /other /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids`
	got = cgroupHierarchies(docker, "3:cpu,cpuacct:/kubepods/pod1/node\n2:memory:/kubepods/pod1\n1:pids:/kubepods/pod1\n")
	want = []cgroupHierarchy{
		{"cpu,cpuacct", []string{"cpu", "cpuacct"}, "/sys/fs/cgroup/cpu,cpuacct/node"},
		{"memory", []string{"memory"}, "/sys/fs/cgroup/memory"},
		// pids: nodeexec's cgroup is outside the mount's root, so unusable.
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("nested mounts:\n got %+v\nwant %+v", got, want)
	}
	if got := cgroupHierarchies(mountinfo, "0::/\n"); len(got) != 0 {
		t.Errorf("pure v2: %+v", got)
	}
}

// A pod's cgroup on this host: limits set, an exec's process (and what it
// forks) inside from its start, the cgroup gone after the pod. Needs root
// and writable v1 hierarchies (skipped otherwise).
func TestPodCgroupHoldsExecsAndLimits(t *testing.T) {
	initPID := standInPod(t, "nsenter")
	hs := hostCgroupHierarchies()
	if len(hs) == 0 {
		t.Skip("no cgroup v1 hierarchy here")
	}
	cg, err := newPodCgroup(hs, "test-"+filepath.Base(t.TempDir()), cgroupLimits{memoryBytes: 256 << 20, pids: 64, cpuMillis: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(cg.dirs) == 0 {
		t.Skip("the host allows no pod cgroup")
	}
	read := func(name, file string) string {
		b, err := os.ReadFile(filepath.Join(cg.dirs[name], file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for name, file := range map[string]string{"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"} {
		if _, ok := cg.dirs[name]; ok {
			if got, want := read(name, file), map[string]string{"memory": "268435456", "pids": "64", "cpu": "50000"}[name]; got != want {
				t.Errorf("%s/%s = %s, want %s", name, file, got, want)
			}
		}
	}
	if err := cg.addProcess(initPID); err != nil {
		t.Fatal(err)
	}
	spec := execSpec{env: []string{"PATH=/usr/bin:/bin"}, workDir: "/", security: procSecurity{caps: defaultCaps}}
	// The shell's child prints its own cgroups: forked inside, as the shell was.
	c := podCommand(initPID, spec, []string{"sh", "-c", `cat /proc/self/cgroup; exec sleep 30`})
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- attach(context.Background(), c, func(c *exec.Cmd) error { return startInPod(c, initPID, cg) }, nil, w, nil)
		_ = w.Close()
	}()
	lines := bufio.NewScanner(out)
	seen := map[string]bool{}
	for lines.Scan() && len(seen) < len(cg.dirs) {
		for name, dir := range cg.dirs {
			if f := strings.SplitN(lines.Text(), ":", 3); len(f) == 3 && f[1] == name && strings.HasSuffix(dir, f[2]) && f[2] != "/" {
				seen[name] = true
			}
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if len(seen) != len(cg.dirs) {
		t.Errorf("the exec's child is in %v of %v", seen, cg.dirs)
	}
	procs := read("memory", "cgroup.procs")
	if !strings.Contains(procs, "\n") { // init and the sleep
		t.Errorf("memory cgroup.procs = %q, want the init and the exec's process", procs)
	}
	_ = c.Process.Kill()
	<-done
	// As teardown does: the init killed and reaped (the test's cleanup
	// then finds it gone).
	_ = syscall.Kill(initPID, syscall.SIGKILL)
	_, _ = syscall.Wait4(initPID, nil, 0, nil)
	cg.remove()
	for _, dir := range cg.dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", dir, err)
		}
	}
}
