package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// A pod's cgroup, as a container runtime makes one: every process of the pod
// (its init and each exec'd process) is in it, the container's memory limit,
// CPU limit and the node's pid limit are set on it, and the pod sees it at
// /sys/fs/cgroup. cgroup v1 only: the host here is hybrid (v1 controllers,
// an empty v2 hierarchy), and a v1 cgroup can be joined by one thread, which
// is how an exec's process enters it before it is forked (see join).

// cgroupControllers are the v1 controllers a pod gets a cgroup in: what
// `usage()` reads and the limits are set on.
var cgroupControllers = []string{"memory", "pids", "cpu", "cpuacct"}

// cgroupHierarchy is a mounted v1 hierarchy holding some of cgroupControllers.
type cgroupHierarchy struct {
	// name is the mount's directory name under /sys/fs/cgroup ("memory",
	// "cpu,cpuacct"), which is where the pod sees it.
	name string
	// controllers it holds (of cgroupControllers).
	controllers []string
	// parent is nodeexec's own cgroup in it, on the host: pod cgroups are
	// made below it, so they stay inside whatever limits nodeexec runs under.
	parent string
}

// cgroupHierarchies finds, from /proc/self/mountinfo and /proc/self/cgroup,
// the v1 hierarchies holding cgroupControllers and nodeexec's cgroup in each.
func cgroupHierarchies(mountinfo, selfCgroup string) []cgroupHierarchy {
	own := map[string]string{} // controller list as in /proc/self/cgroup → path
	for _, l := range strings.Split(selfCgroup, "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] != "" {
			own[f[1]] = f[2]
		}
	}
	var found []cgroupHierarchy
	for _, l := range strings.Split(mountinfo, "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		var ctrls []string
		for _, o := range strings.Split(g[2], ",") {
			for _, c := range cgroupControllers {
				if o == c {
					ctrls = append(ctrls, c)
				}
			}
		}
		if len(ctrls) == 0 {
			continue
		}
		// The hierarchy's line in /proc/self/cgroup lists its controllers
		// (and named options) in the kernel's order, as its mount options do.
		var path string
		for list, p := range own {
			if sameSet(strings.Split(list, ","), ctrls) {
				path = p
			}
		}
		root, mountPoint := f[3], f[4]
		rel, inside := strings.CutPrefix(path, root)
		if path == "" || !inside {
			continue // nodeexec's cgroup is not visible through this mount
		}
		found = append(found, cgroupHierarchy{
			name:        filepath.Base(mountPoint),
			controllers: ctrls,
			parent:      filepath.Join(mountPoint, rel),
		})
	}
	return found
}

// sameSet reports whether list holds exactly the controllers ctrls (other
// entries of list, such as a named hierarchy's `name=`, never match).
func sameSet(list, ctrls []string) bool {
	if len(list) != len(ctrls) {
		return false
	}
	for _, c := range ctrls {
		found := false
		for _, l := range list {
			found = found || l == c
		}
		if !found {
			return false
		}
	}
	return true
}

// cgroupLimits are what a pod's cgroup is limited to; 0 means no limit.
type cgroupLimits struct {
	memoryBytes int64
	cpuMillis   int64
	pids        int64
}

// limitsFor is the container's memory and CPU limits (a kubelet sets them
// on the container's cgroup) and the node's pid limit (the kubelet's
// podPidsLimit).
func limitsFor(c *corev1.Container, podPids int64) cgroupLimits {
	l := cgroupLimits{pids: max(podPids, 0)}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		l.memoryBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		l.cpuMillis = q.MilliValue()
	}
	return l
}

// podCgroup is a pod's cgroup: its directory in each hierarchy.
type podCgroup struct {
	dirs    map[string]string // hierarchy name → host directory
	parents map[string]string // hierarchy name → nodeexec's cgroup
}

// cfsPeriod is the CPU quota's period, in µs, as runc sets it.
const cfsPeriod = 100_000

// newPodCgroup makes the pod's cgroup below nodeexec's own in each hierarchy
// and sets its limits. A hierarchy where that fails is logged and left out
// (the host decides what it allows); a limit that cannot be set is an error.
func newPodCgroup(hierarchies []cgroupHierarchy, uid string, limits cgroupLimits) (*podCgroup, error) {
	cg := &podCgroup{dirs: map[string]string{}, parents: map[string]string{}}
	for _, h := range hierarchies {
		dir := filepath.Join(h.parent, "sandbox-pod-"+uid)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			klog.Warningf("pod %s: no %s cgroup: %v", uid, h.name, err)
			continue
		}
		cg.dirs[h.name], cg.parents[h.name] = dir, h.parent
		for _, c := range h.controllers {
			if err := setLimit(dir, c, limits); err != nil {
				cg.remove()
				return nil, fmt.Errorf("pod cgroup %s: %w", dir, err)
			}
		}
	}
	return cg, nil
}

func setLimit(dir, controller string, l cgroupLimits) error {
	write := func(file string, v int64) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0)
	}
	switch {
	case controller == "memory" && l.memoryBytes > 0:
		return write("memory.limit_in_bytes", l.memoryBytes)
	case controller == "pids" && l.pids > 0:
		return write("pids.max", l.pids)
	case controller == "cpu" && l.cpuMillis > 0:
		if err := write("cpu.cfs_period_us", cfsPeriod); err != nil {
			return err
		}
		// runc's minimum quota is 1 ms.
		return write("cpu.cfs_quota_us", max(l.cpuMillis*cfsPeriod/1000, 1000))
	}
	return nil
}

// addProcess moves the process pid (all its threads) into the cgroup.
func (cg *podCgroup) addProcess(pid int) error {
	return cg.write("cgroup.procs", pid)
}

// join moves the calling thread (locked to its goroutine) into the cgroup,
// so that a process it forks starts there: nothing the process runs, not
// even its first fork, escapes the pod's accounting and limits. leave moves
// it back once it has forked: the thread may be the main thread, which Go
// keeps when its locked goroutine ends (it then holds the pod's cgroup busy).
func (cg *podCgroup) join() error {
	return cg.write("tasks", unix.Gettid())
}

func (cg *podCgroup) leave() error {
	if cg == nil {
		return nil
	}
	return writeID(cg.parents, "tasks", unix.Gettid())
}

func (cg *podCgroup) write(file string, id int) error {
	if cg == nil {
		return nil
	}
	return writeID(cg.dirs, file, id)
}

// writeID writes a process or thread id to file in each of dirs.
func writeID(dirs map[string]string, file string, id int) error {
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(id)), 0); err != nil {
			return fmt.Errorf("write %s of cgroup %s: %w", file, dir, err)
		}
	}
	return nil
}

// remove deletes the pod's cgroup once its processes are gone. After the pod
// init is killed, the kernel is still ending the rest of the PID namespace:
// rmdir fails with EBUSY until they have exited, so it is retried for a while.
func (cg *podCgroup) remove() {
	if cg == nil {
		return
	}
	for _, dir := range cg.dirs {
		var err error
		for try := 0; try < 250; try++ {
			if err = syscall.Rmdir(dir); err != syscall.EBUSY {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			tasks, _ := os.ReadFile(filepath.Join(dir, "tasks"))
			klog.Errorf("remove cgroup %s: %v (tasks: %q)", dir, err, tasks)
		}
	}
}

// mounts is where the pod sees its cgroup: hierarchy name → host directory.
func (cg *podCgroup) mounts() map[string]string {
	if cg == nil {
		return nil
	}
	return cg.dirs
}

// hostCgroupHierarchies reads this process's hierarchies (none where the
// files cannot be read: pods then get no cgroup).
func hostCgroupHierarchies() []cgroupHierarchy {
	mi, err1 := os.ReadFile("/proc/self/mountinfo")
	self, err2 := os.ReadFile("/proc/self/cgroup")
	if err := errors.Join(err1, err2); err != nil {
		klog.Warningf("pods get no cgroup: %v", err)
		return nil
	}
	h := cgroupHierarchies(string(mi), string(self))
	if len(h) == 0 {
		klog.Warningf("pods get no cgroup: no cgroup v1 hierarchy with %v here", cgroupControllers)
	}
	return h
}
