# shellcheck shell=sh
# Carries one TCP connection between this exec's stdin and stdout and port $1
# on the sandbox's loopback (exec/relay.rs: RELAY): what pods/portforward
# does, for nodes that cannot (under gVisor the kubelet dials the pod's
# host-side network namespace, where nothing of the sandbox listens; Kata
# refuses port-forward outright). Dials 127.0.0.1, then ::1, with the first
# tool the image has: perl with IO::Socket::IP (in Debian's perl-base),
# python3, bash's /dev/tcp with cat, or BusyBox nc. Ends when either side
# does. Exit 90 when nothing listens on either address, 97 when the image has
# none of the tools. Everything else the tools print goes to stderr.

relay_port=$1

# The two language relays copy whichever side is readable to the other, with
# a blocking write (the exec stream pushes back on stdout; the socket on a
# slow server), and exit at the first end of either.
perl_relay='use IO::Socket::IP;
my $s;
for ("127.0.0.1", "::1") { $s = IO::Socket::IP->new(PeerHost => $_, PeerPort => $ARGV[0], Proto => "tcp") and last }
$s or exit 90;
my $all = "";
vec($all, 0, 1) = 1;
vec($all, fileno $s, 1) = 1;
while (1) {
	my $ready = $all;
	select($ready, undef, undef, undef) > 0 or next;
	for ([\*STDIN, $s], [$s, \*STDOUT]) {
		my ($from, $to) = @$_;
		vec($ready, fileno $from, 1) or next;
		sysread($from, my $data, 65536) or exit 0;
		while (length $data) {
			my $wrote = syswrite($to, $data) or exit 0;
			substr($data, 0, $wrote) = "";
		}
	}
}'
python_relay='import os, select, socket, sys
s = None
for host in ("127.0.0.1", "::1"):
	try:
		s = socket.create_connection((host, int(sys.argv[1])))
		break
	except OSError:
		pass
if s is None:
	sys.exit(90)
while True:
	ready = select.select([0, s], [], [])[0]
	if 0 in ready:
		data = os.read(0, 65536)
		if not data:
			break
		s.sendall(data)
	if s in ready:
		data = s.recv(65536)
		if not data:
			break
		while data:
			data = data[os.write(1, data):]'
# bash gives background jobs /dev/null as stdin: the copy to the port reads
# the exec's stdin through fd 4. `wait -n` returns at the first copy's end.
bash_relay='exec 3<>"/dev/tcp/127.0.0.1/$1" || exec 3<>"/dev/tcp/::1/$1" || exit 90
exec 4<&0
cat <&3 &
cat <&4 >&3 &
wait -n
kill %1 %2'

has() {
	command -v "$1" >/dev/null 2>&1
}

if has perl && perl -MIO::Socket::IP -e 1 2>/dev/null; then
	exec perl -e "$perl_relay" "$relay_port"
elif has python3; then
	exec python3 -c "$python_relay" "$relay_port"
elif has bash && has cat; then
	exec bash -c "$bash_relay" relay "$relay_port" 2>/dev/null
elif has nc; then
	# BusyBox nc says "Connection refused" and exits 1; relay.rs reads that.
	exec nc 127.0.0.1 "$relay_port"
fi
exit 97
