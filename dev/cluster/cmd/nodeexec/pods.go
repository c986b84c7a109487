package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// podSandbox is one running pod: its PID 1 and its root, keyed by pod UID so a
// pod re-created under the same name (resume) starts from a fresh root.
type podSandbox struct {
	uid     types.UID
	initPID int
	dir     string // <state>/pods/<uid>: root/ and emptyDir volumes
	cgroup  *podCgroup
	exited  chan struct{}
}

// podManager creates a pod's namespaces when the pod runs (or at its first
// exec) and destroys them (killing every process in the pod) when the pod is
// deleted.
type podManager struct {
	stateDir string
	// nodeName is the node whose pods get their own pod init; sharedNode
	// (optional) is a node whose pods are API objects only (the scale node):
	// their execs run in one pod init shared by all of them, so 1,000 of them
	// cost one process, not 1,000, and nothing per pod is left to tear down.
	nodeName, sharedNode string
	client               kubernetes.Interface
	pods                 corelisters.PodLister
	pvcs                 corelisters.PersistentVolumeClaimLister
	pvs                  corelisters.PersistentVolumeLister
	// cgroups are the hierarchies pods get a cgroup in (cgroup.go), podPids
	// the pid limit of each pod (0: none), as the kubelet's podPidsLimit.
	cgroups []cgroupHierarchy
	podPids int64

	mu   sync.Mutex
	live map[types.UID]*podSandbox
}

func newPodManager(stateDir, nodeName, sharedNode string, podPids int64, client kubernetes.Interface, podFactory, factory informers.SharedInformerFactory) *podManager {
	m := &podManager{
		cgroups:    hostCgroupHierarchies(),
		podPids:    podPids,
		stateDir:   stateDir,
		nodeName:   nodeName,
		sharedNode: sharedNode,
		client:     client,
		pods:       podFactory.Core().V1().Pods().Lister(),
		pvcs:       factory.Core().V1().PersistentVolumeClaims().Lister(),
		pvs:        factory.Core().V1().PersistentVolumes().Lister(),
		live:       map[types.UID]*podSandbox{},
	}
	_, _ = podFactory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { m.startIfRunning(obj) },
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				m.teardown(p.UID)
				return
			}
			m.startIfRunning(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				m.teardown(p.UID)
			}
		},
	})
	return m
}

// startIfRunning sets up a running pod's namespaces before its first exec,
// as a kubelet has started the containers by the time a pod is Running (so
// a first exec does not pay for the setup). Best effort: the PVC may not be
// bound yet, and then the first exec sets the pod up.
func (m *podManager) startIfRunning(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || len(pod.Spec.Containers) == 0 {
		return
	}
	m.mu.Lock()
	_, live := m.live[pod.UID]
	m.mu.Unlock()
	if live {
		return
	}
	go func() {
		c := &pod.Spec.Containers[0]
		if _, err := m.ensure(pod, c, limitsFor(c, m.podPids)); err != nil {
			klog.V(2).Infof("pod %s/%s: early setup: %v", pod.Namespace, pod.Name, err)
			return
		}
		// A deletion seen while setting up found nothing to tear down yet.
		if cur, err := m.pods.Pods(pod.Namespace).Get(pod.Name); err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			m.teardown(pod.UID)
		}
	}()
}

// execSpec is how an exec runs in its container.
type execSpec struct {
	env      []string
	workDir  string
	security procSecurity
}

// enter returns the pod's sandbox (starting it if needed) and how an exec
// runs in the container.
func (m *podManager) enter(ns, name, uid, container string) (*podSandbox, execSpec, error) {
	// The API server's own cache (resourceVersion 0), not this informer's:
	// kwok reports readiness from its own watch, so right after a pod is
	// re-created under the same name (resume) the informer can still hold the
	// old pod, whose root and processes are not gone yet, while the client
	// was already told the new one is Ready. A kubelet that reports
	// readiness itself cannot disagree with itself like that.
	pod, err := m.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		if pod, err = m.pods.Pods(ns).Get(name); err != nil {
			return nil, execSpec{}, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
	}
	if uid != "" && string(pod.UID) != uid {
		return nil, execSpec{}, fmt.Errorf("pod %s/%s has UID %s, not %s", ns, name, pod.UID, uid)
	}
	if pod.DeletionTimestamp != nil {
		return nil, execSpec{}, fmt.Errorf("pod %s/%s is being deleted", ns, name)
	}
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, execSpec{}, fmt.Errorf("container %q not found in pod %s/%s", container, ns, name)
	}
	// The pod's "image" is the host's /usr and /etc (see podinit.go).
	sec, err := securityFor(pod, c, "/etc/passwd")
	if err != nil {
		return nil, execSpec{}, err
	}
	// The pod informer sees only this node's pods, so a pod init started
	// here for another node's pod would never be torn down.
	var sb *podSandbox
	switch placement(pod, m.nodeName, m.sharedNode) {
	case ownPod:
		sb, err = m.ensure(pod, c, limitsFor(c, m.podPids))
	case sharedPod:
		// Not a pod: the shared init of many, limited by none of them.
		if sb, err = m.ensure(sharedStandIn(m.sharedNode), &corev1.Container{}, cgroupLimits{}); err == nil {
			err = sharedWorkDir(sb, workDir(c))
		}
	default:
		err = fmt.Errorf("pod %s/%s is on node %q, which this server does not run", ns, name, pod.Spec.NodeName)
	}
	if err != nil {
		return nil, execSpec{}, err
	}
	return sb, execSpec{env: containerEnv(pod, c, sec.home), workDir: workDir(c), security: sec}, nil
}

type podPlacement int

const (
	otherNode podPlacement = iota
	ownPod                 // this node: a pod init of its own
	sharedPod              // the shared node: the one shared pod init
)

// placement says where an exec into pod runs.
func placement(pod *corev1.Pod, nodeName, sharedNode string) podPlacement {
	switch n := pod.Spec.NodeName; {
	case n != "" && n == nodeName:
		return ownPod
	case n != "" && n == sharedNode:
		return sharedPod
	}
	return otherNode
}

// sharedStandIn is the pod whose pod init the shared node's pods share: no
// volumes (theirs are not materialised), its UID a name no real pod has.
func sharedStandIn(node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: "-", UID: types.UID("shared-node-" + node)}}
}

// sharedWorkDir makes the container's working directory in the shared root,
// as a runtime makes a missing one, but writable by every user (mode 1777,
// like /tmp): the pods sharing the root run as different users, and their
// volumes at that path are not materialised.
func sharedWorkDir(sb *podSandbox, dir string) error {
	path := filepath.Join(fmt.Sprintf("/proc/%d/root", sb.initPID), filepath.Clean("/"+dir))
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("working directory %s in the shared root: %w", dir, err)
	}
	return os.Chmod(path, 0o777|os.ModeSticky)
}

// workDir is the container's working directory ("/" when unset).
func workDir(c *corev1.Container) string {
	if c.WorkingDir == "" {
		return "/"
	}
	return c.WorkingDir
}

// containerEnv is the process environment of an exec: the image defaults a
// Debian image would have, HOME as the runtime sets it for the user, then the
// container's literal env entries.
func containerEnv(pod *corev1.Pod, c *corev1.Container, home string) []string {
	keys := []string{"PATH", "HOSTNAME", "HOME"}
	vals := map[string]string{
		"PATH":     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME": pod.Name,
		"HOME":     home,
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue // secret/configMap/field refs are not resolved on this node
		}
		if _, seen := vals[e.Name]; !seen {
			keys = append(keys, e.Name)
		}
		vals[e.Name] = e.Value
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}

func (m *podManager) ensure(pod *corev1.Pod, c *corev1.Container, limits cgroupLimits) (*podSandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.live[pod.UID]; ok {
		return sb, nil
	}
	dir := filepath.Join(m.stateDir, "pods", string(pod.UID))
	mounts, err := m.mountsFor(pod, c, dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
		return nil, err
	}
	cg, err := newPodCgroup(m.cgroups, string(pod.UID), limits)
	if err != nil {
		return nil, err
	}
	spec, _ := json.Marshal(podSpec{Root: filepath.Join(dir, "root"), Hostname: pod.Name, Mounts: mounts,
		WorkDir: workDir(c), Cgroups: cg.mounts()})
	r, w, err := os.Pipe()
	if err != nil {
		cg.remove()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", podInitArg, string(spec))
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Setsid:     true,
	}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		cg.remove()
		return nil, fmt.Errorf("start pod init: %w", err)
	}
	// The init forks nothing: the pod's other processes are execs, which
	// join the cgroup themselves (startInPod).
	joined := cg.addProcess(cmd.Process.Pid)
	msg := make([]byte, 4096)
	n, _ := r.Read(msg)
	_ = r.Close()
	if string(msg[:n]) != "ok" || joined != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		cg.remove()
		return nil, fmt.Errorf("pod %s/%s root setup failed: %s %v", pod.Namespace, pod.Name, msg[:n], joined)
	}
	sb := &podSandbox{uid: pod.UID, initPID: cmd.Process.Pid, dir: dir, cgroup: cg, exited: make(chan struct{})}
	// Recorded so that `cluster.sh down` can kill pod inits even if nodeexec died.
	_ = os.WriteFile(filepath.Join(dir, "init.pid"), []byte(fmt.Sprint(sb.initPID)), 0o644)
	go func() {
		_ = cmd.Wait()
		close(sb.exited)
	}()
	m.live[pod.UID] = sb
	klog.Infof("pod %s/%s (%s): init pid %d", pod.Namespace, pod.Name, pod.UID, sb.initPID)
	return sb, nil
}

// mountsFor maps the container's volumeMounts to host directories: PVCs to
// their PersistentVolume's path, emptyDirs to a per-pod directory (mode
// 0777, as a kubelet makes it). Both are given to the pod's fsGroup, if it
// has one, as a kubelet does. Other volume types (configMap, secret,
// projected) are not materialised.
func (m *podManager) mountsFor(pod *corev1.Pod, c *corev1.Container, dir string) ([]mountSpec, error) {
	sources := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		var path string
		readOnly := false
		switch {
		case v.PersistentVolumeClaim != nil:
			p, err := m.pvcPath(pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, err
			}
			path, readOnly = p, v.PersistentVolumeClaim.ReadOnly
		case v.EmptyDir != nil:
			path = filepath.Join(dir, "volumes", v.Name)
			if err := os.MkdirAll(path, 0o777); err != nil {
				return nil, err
			}
			if err := os.Chmod(path, 0o777); err != nil { // not the umask's 0755
				return nil, err
			}
		default:
			continue
		}
		if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
			if err := applyFSGroup(path, *sc.FSGroup, sc.FSGroupChangePolicy, readOnly); err != nil {
				return nil, fmt.Errorf("volume %q: fsGroup: %w", v.Name, err)
			}
		}
		sources[v.Name] = path
	}
	var mounts []mountSpec
	for _, vm := range c.VolumeMounts {
		src, ok := sources[vm.Name]
		if !ok {
			continue
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
			if err := os.MkdirAll(src, 0o777); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, mountSpec{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	return mounts, nil
}

func (m *podManager) pvcPath(ns, name string) (string, error) {
	// The informers can lag behind a volume bound a moment ago (seen right
	// after a pod was re-created): on a miss, ask the API server.
	ctx := context.Background()
	pvc, err := m.pvcs.PersistentVolumeClaims(ns).Get(name)
	if err != nil || pvc.Spec.VolumeName == "" {
		pvc, err = m.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("PVC %s/%s: %w", ns, name, err)
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("PVC %s/%s is not bound", ns, name)
	}
	pv, err := m.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		pv, err = m.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("PV %s: %w", pvc.Spec.VolumeName, err)
	}
	if pv.Spec.Local == nil || !strings.HasPrefix(pv.Spec.Local.Path, m.stateDir) {
		return "", fmt.Errorf("PV %s is not provisioned by this node", pv.Name)
	}
	return pv.Spec.Local.Path, nil
}

// teardown kills the pod's PID 1 — the kernel then kills every process in
// the pod's PID namespace — and removes its root and its cgroup.
func (m *podManager) teardown(uid types.UID) {
	m.mu.Lock()
	sb, ok := m.live[uid]
	delete(m.live, uid)
	m.mu.Unlock()
	if !ok {
		return
	}
	_ = syscall.Kill(sb.initPID, syscall.SIGKILL)
	<-sb.exited
	sb.cgroup.remove()
	if err := os.RemoveAll(sb.dir); err != nil {
		klog.Errorf("remove %s: %v", sb.dir, err)
	}
	klog.Infof("pod %s: stopped", uid)
}

func (m *podManager) shutdown() {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.live))
	for uid := range m.live {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.teardown(uid)
	}
}
