# shellcheck shell=sh
# The kernel's TCP socket tables as the sandbox's network sees them
# (ports/mod.rs: LISTENING), IPv4's then IPv6's; no tool but cat needed.
# The IPv6 table is missing when the kernel has IPv6 off.

cat /proc/net/tcp || exit
[ ! -e /proc/net/tcp6 ] || cat /proc/net/tcp6
