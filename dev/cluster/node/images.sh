#!/usr/bin/env bash
# Builds the real node's images from Debian packages (no registry is
# reachable from the test machines) as OCI archives that `ctr images import`
# takes:
#
#   images.sh OUT_DIR K8S_MODULE_DIR
#
#   OUT_DIR/debian.tar   docker.io/library/debian:bookworm-slim: Debian 12
#                        minbase + python3, nodejs and procps (the tests'
#                        servers and `ps`), user `sandbox` (1000:1000). Named
#                        as the shipped templates name their image, so they
#                        run unchanged.
#   OUT_DIR/busybox.tar  docker.io/library/busybox:1.35: BusyBox alone (static,
#                        its applets as links in /bin), to hold the README's
#                        claim of what an image needs.
#   OUT_DIR/pause.tar    registry.k8s.io/pause:3.10.2: the pod sandbox image,
#                        built from the Kubernetes source at the pinned version
#                        (build/pause/linux/pause.c), as upstream builds it.
#
# Needs root (mmdebstrap --mode=root), mmdebstrap, umoci, gcc with a static
# libc. cluster.sh calls it and caches OUT_DIR by a hash of this file.
set -euo pipefail

out=$1 k8s=$2
work=$(mktemp -d)
chmod 755 "$work" # apt-get download drops to user _apt
trap 'rm -rf "$work"' EXIT
# Timestamps in the images (and so their digests) depend only on this.
export SOURCE_DATE_EPOCH=1700000000

# oci_archive NAME REF ROOTFS_TAR UMOCI_CONFIG_ARGS...: one-layer image.
oci_archive() {
	local name=$1 ref=$2 layer=$3
	shift 3
	umoci init --layout "$work/$name"
	umoci new --image "$work/$name:$ref"
	# Added as it is (umoci would otherwise re-pack and drop device nodes).
	umoci raw add-layer --image "$work/$name:$ref" "$layer"
	umoci config --image "$work/$name:$ref" "$@"
	tar -C "$work/$name" -cf "$out/$name.tar" .
}

mkdir -p "$out"

# Debian: the packages a `debian:bookworm-slim` has (minbase) plus what the
# tests run inside (python3 and node servers, ps).
mmdebstrap --mode=root --variant=minbase --include=python3,procps,nodejs \
	--customize-hook='chroot "$1" useradd -u 1000 -U -m -s /bin/bash sandbox' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
	bookworm "$work/debian-rootfs.tar" http://deb.debian.org/debian
oci_archive debian bookworm-slim "$work/debian-rootfs.tar" \
	--config.cmd=/bin/bash --config.workingdir=/ \
	--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# BusyBox: the static binary of Debian's busybox-static and a link per applet.
mkdir -p "$work/bb" "$work/bbroot/bin" "$work/bbroot/etc" "$work/bbroot/tmp"
(cd "$work/bb" && apt-get download -q busybox-static >/dev/null && dpkg-deb -x busybox-static_*.deb .)
cp "$work/bb/bin/busybox" "$work/bbroot/bin/busybox"
for applet in $("$work/bbroot/bin/busybox" --list); do
	[[ $applet == busybox ]] || ln -s busybox "$work/bbroot/bin/$applet"
done
chmod 1777 "$work/bbroot/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n' >"$work/bbroot/etc/passwd"
printf 'root:x:0:\nsandbox:x:1000:\n' >"$work/bbroot/etc/group"
tar -C "$work/bbroot" --owner=0 --group=0 --mtime=@$SOURCE_DATE_EPOCH -cf "$work/busybox-rootfs.tar" .
oci_archive busybox 1.35 "$work/busybox-rootfs.tar" --config.cmd=/bin/sh \
	--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# pause, as build/pause/Makefile builds it (-static, the image runs as 65535).
mkdir -p "$work/pauseroot"
gcc -Os -Wall -Werror -static -DVERSION=v3.10.2-local -o "$work/pauseroot/pause" "$k8s/build/pause/linux/pause.c"
tar -C "$work/pauseroot" --owner=0 --group=0 --mtime=@$SOURCE_DATE_EPOCH -cf "$work/pause-rootfs.tar" pause
oci_archive pause 3.10.2 "$work/pause-rootfs.tar" --config.entrypoint=/pause --config.user=65535:65535
