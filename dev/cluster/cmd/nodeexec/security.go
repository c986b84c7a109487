package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// What a container runtime applies to a container's processes from the
// container's effective securityContext, so that exec'd commands here run
// as they would under a kubelet: as the pod's user and groups, with
// no_new_privs and the capability bounding set the spec asks for. setpriv
// (util-linux, like nsenter) applies it between nsenter and the command, so
// the command keeps its pid and nothing of this shows inside the pod.
// Not applied: seccomp (the host kernel's, unconfined) and SELinux/AppArmor.

// defaultCaps is the capability set containerd and CRI-O give a container
// that is not privileged, before the spec's drop and add.
var defaultCaps = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// procSecurity is how a container's processes run.
type procSecurity struct {
	uid, gid int64
	// groups are the supplementary groups: the pod's fsGroup and
	// supplementalGroups (the image's /etc/group memberships are not merged).
	groups     []int64
	noNewPrivs bool
	// caps is the bounding set (the capabilities a root process has; a
	// non-root one has none); nil for a privileged container: all of them.
	caps []string
	// home is the user's home directory from the image's /etc/passwd, "/"
	// when the uid has no entry there (as runc sets HOME).
	home string
}

// securityFor is the effective securityContext of container c of pod:
// the container's fields over the pod's, the image's user (root: this
// node's "image" is the host's /usr and /etc) where neither names one.
// passwd is the image's /etc/passwd. Like a kubelet, it refuses a container
// that must not run as root but would.
func securityFor(pod *corev1.Pod, c *corev1.Container, passwd string) (procSecurity, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	pick := func(own, pod *int64, dflt int64) int64 {
		if own != nil {
			return *own
		}
		if pod != nil {
			return *pod
		}
		return dflt
	}
	s := procSecurity{uid: pick(csc.RunAsUser, psc.RunAsUser, 0)}
	entry, found := lookupUser(passwd, s.uid)
	s.home, s.gid = "/", 0
	if found {
		s.home, s.gid = entry.home, entry.gid
	}
	s.gid = pick(csc.RunAsGroup, psc.RunAsGroup, s.gid)
	nonRoot := csc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && s.uid == 0 {
		return s, fmt.Errorf("container %q has runAsNonRoot and would run as root: a kubelet does not start it "+
			"(CreateContainerConfigError)", c.Name)
	}
	if psc.FSGroup != nil {
		s.groups = append(s.groups, *psc.FSGroup)
	}
	s.groups = append(s.groups, psc.SupplementalGroups...)
	if csc.Privileged != nil && *csc.Privileged {
		return s, nil
	}
	s.noNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	s.caps = slices.Clone(defaultCaps)
	if csc.Capabilities != nil {
		for _, d := range csc.Capabilities.Drop {
			name := capName(d)
			if name == "ALL" {
				s.caps = s.caps[:0]
			}
			s.caps = slices.DeleteFunc(s.caps, func(c string) bool { return c == name })
		}
		for _, a := range csc.Capabilities.Add {
			if name := capName(a); !slices.Contains(s.caps, name) {
				s.caps = append(s.caps, name)
			}
		}
	}
	return s, nil
}

// capName is a capability as the spec may write it (NET_RAW, CAP_NET_RAW).
func capName(c corev1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

// setpriv is the setpriv(1) command line that applies s, then runs what follows.
func (s procSecurity) setpriv() []string {
	args := []string{"setpriv", "--reuid=" + strconv.FormatInt(s.uid, 10), "--regid=" + strconv.FormatInt(s.gid, 10)}
	if len(s.groups) == 0 {
		args = append(args, "--clear-groups")
	} else {
		ids := make([]string, len(s.groups))
		for i, g := range s.groups {
			ids[i] = strconv.FormatInt(g, 10)
		}
		args = append(args, "--groups="+strings.Join(ids, ","))
	}
	if s.noNewPrivs {
		args = append(args, "--no-new-privs")
	}
	if s.caps != nil {
		set := "-all"
		for _, c := range s.caps {
			set += ",+" + strings.ToLower(c)
		}
		// Inheritable too: otherwise a file's inheritable capabilities could
		// still be gained from it.
		args = append(args, "--bounding-set="+set, "--inh-caps=-all")
	}
	return append(args, "--")
}

type passwdEntry struct {
	gid  int64
	home string
}

// lookupUser finds uid in an /etc/passwd file.
func lookupUser(passwd string, uid int64) (passwdEntry, bool) {
	f, err := os.Open(passwd)
	if err != nil {
		return passwdEntry{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 6 || fields[2] != strconv.FormatInt(uid, 10) {
			continue
		}
		gid, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil {
			return passwdEntry{}, false
		}
		return passwdEntry{gid: gid, home: fields[5]}, true
	}
	return passwdEntry{}, false
}

// applyFSGroup gives the volume at dir to group fsGroup as a kubelet does
// for volume types that support ownership management (emptyDir, and PVCs of
// most block and CSI drivers): every file's group becomes fsGroup and gains
// read-write (read-only for a read-only mount), directories also the setgid
// bit so what is created later inherits the group. With
// fsGroupChangePolicy OnRootMismatch it stops at a top directory that is
// already so. Symlinks are re-owned but never followed.
func applyFSGroup(dir string, fsGroup int64, policy *corev1.PodFSGroupChangePolicy, readOnly bool) error {
	mask := fs.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	if policy != nil && *policy == corev1.FSGroupChangeOnRootMismatch {
		if info, err := os.Stat(dir); err == nil && ownedBy(info, fsGroup) &&
			info.Mode()&(mask|0o110|fs.ModeSetgid) == mask|0o110|fs.ModeSetgid {
			return nil
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(fsGroup)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if d.IsDir() {
			m |= 0o110 | fs.ModeSetgid
		}
		return os.Chmod(path, info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)|m)
	})
}

// ownedBy: the file's group is gid.
func ownedBy(info fs.FileInfo, gid int64) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int64(st.Gid) == gid
}
