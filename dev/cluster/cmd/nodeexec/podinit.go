package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// podInitArg makes the nodeexec binary act as a pod's PID 1.
const podInitArg = "pod-init"

// podSpec is what the pod init needs to build the pod's root.
type podSpec struct {
	Root     string      `json:"root"`
	Hostname string      `json:"hostname"`
	Mounts   []mountSpec `json:"mounts"`
	// WorkDir is the container's workingDir; created if missing, as container
	// runtimes do (runc makes the process's cwd).
	WorkDir string `json:"workDir"`
	// Cgroups are the pod's cgroup directories on the host by hierarchy name
	// ("memory", "cpu,cpuacct"), shown at /sys/fs/cgroup/<name> (cgroup.go).
	Cgroups map[string]string `json:"cgroups"`
}

// mountSpec bind-mounts Source (a host path) at Target inside the pod.
type mountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// podInitMain runs as PID 1 of new PID, mount, UTS and IPC namespaces: it
// builds the pod's root (host /usr and /etc read-only, a private writable
// rest, volumes bound in), reports readiness on fd 3, then reaps orphans
// until it is killed. Killing it kills every process of the pod.
func podInitMain(args []string) {
	ready := os.NewFile(3, "ready")
	var spec podSpec
	err := json.Unmarshal([]byte(args[0]), &spec)
	if err == nil {
		err = setupRoot(spec)
	}
	if err != nil {
		fmt.Fprintf(ready, "error: %v", err)
		os.Exit(1)
	}
	_, _ = ready.WriteString("ok")
	_ = ready.Close()

	// As PID 1 only signals with handlers are delivered from inside the pod;
	// ignore the usual ones so `kill 1` in a pod does nothing, as in a container
	// whose init does not handle it.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		<-chld
	}
}

func setupRoot(spec podSpec) error {
	must := func(err error, what string) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return must(err, "make mounts private")
	}
	if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
		return must(err, "sethostname")
	}
	r := spec.Root
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"usr", 0o755}, {"etc", 0o755}, {"dev", 0o755}, {"proc", 0o555}, {"tmp", 0o777 | os.ModeSticky},
		{"var/tmp", 0o777 | os.ModeSticky}, {"root", 0o700}, {"run", 0o755}, {"home", 0o755}, {"sys", 0o555}} {
		if err := os.MkdirAll(filepath.Join(r, d.path), d.mode); err != nil {
			return err
		}
		_ = os.Chmod(filepath.Join(r, d.path), d.mode)
	}
	// Debian's merged /usr: the top-level dirs are links into usr.
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if target, err := os.Readlink("/" + l); err == nil {
			_ = os.Symlink(target, filepath.Join(r, l))
		}
	}
	for _, ro := range []string{"/usr", "/etc"} {
		if err := bind(ro, filepath.Join(r, ro), true); err != nil {
			return err
		}
	}
	if err := setupDev(filepath.Join(r, "dev")); err != nil {
		return err
	}
	if err := syscall.Mount("proc", filepath.Join(r, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return must(err, "mount /proc")
	}
	if err := setupSys(filepath.Join(r, "sys"), spec.Cgroups); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		dst := filepath.Join(r, m.Target)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := bind(m.Source, dst, m.ReadOnly); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(r, spec.WorkDir), 0o755); err != nil {
		return must(err, "create the working directory")
	}
	if err := syscall.Chroot(r); err != nil {
		return must(err, "chroot")
	}
	return must(os.Chdir("/"), "chdir /")
}

// setupDev gives the pod a small /dev: a tmpfs with the usual character
// devices bound from the host, not the host's whole /dev.
func setupDev(dev string) error {
	if err := syscall.Mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID, "mode=755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, n)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := bind("/dev/"+n, p, false); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		_ = os.Symlink(target, filepath.Join(dev, name))
	}
	// Writable for every user, as the runtimes mount it (containerd: a 64 MiB
	// tmpfs, mode 1777): the provider keeps its run records there.
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("shm", shm, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// setupSys mounts /sys read-only, and at /sys/fs/cgroup a tmpfs with the
// pod's own cgroup of each hierarchy bound read-only under the hierarchy's
// name, as runc lays out cgroup v1 for a container that is not privileged:
// the pod reads its usage and limits, and changes neither. A co-mounted
// hierarchy ("cpu,cpuacct") also gets a link for each of its controllers.
func setupSys(sys string, cgroups map[string]string) error {
	ro := uintptr(syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
	if err := syscall.Mount("sysfs", sys, "sysfs", ro, ""); err != nil {
		return fmt.Errorf("mount /sys: %w", err)
	}
	fs := filepath.Join(sys, "fs", "cgroup")
	if err := syscall.Mount("tmpfs", fs, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=755"); err != nil {
		return fmt.Errorf("mount /sys/fs/cgroup: %w", err)
	}
	for name, dir := range cgroups {
		dst := filepath.Join(fs, name)
		if err := os.Mkdir(dst, 0o555); err != nil {
			return err
		}
		if err := bind(dir, dst, true); err != nil {
			return err
		}
		if strings.Contains(name, ",") {
			for _, c := range strings.Split(name, ",") {
				_ = os.Symlink(name, filepath.Join(fs, c))
			}
		}
	}
	if err := syscall.Mount("", fs, "", syscall.MS_REMOUNT|ro, "mode=755"); err != nil {
		return fmt.Errorf("remount /sys/fs/cgroup read-only: %w", err)
	}
	return nil
}

func bind(src, dst string, readOnly bool) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	if readOnly {
		if err := syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", dst, err)
		}
	}
	return nil
}
