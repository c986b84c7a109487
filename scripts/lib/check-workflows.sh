#!/usr/bin/env bash
# check-workflows.sh FILE...: the release pipeline's supply-chain rules
# (issue 18 item 7, security review M7), checked on the workflow text by
# scripts/lint.sh. Every workflow here builds what is published, so each rule
# holds for every file under .github/workflows:
#   pin       every `uses:` names a full 40-hex commit, the tag in a comment
#             after it (a tag can be moved to other code; a commit cannot);
#             every `container:` / `image:` (a job's container, a service)
#             names its image by @sha256 digest, for the same reason
#   checkout  actions/checkout has `persist-credentials: false` (no GitHub
#             token left in .git/config for later steps)
#   cache     no actions/cache and no setup-node cache (a cache entry written
#             by any workflow would be restored into the release); setup-node
#             says `package-manager-cache: false` (it caches by itself once
#             package.json names a package manager)
#   pipe-sh   nothing downloaded is piped into a shell (`curl … | sh`):
#             installers are downloaded, their sha256 checked, then run
#   scripts   `npm ci` / `npm install` with --ignore-scripts (no dependency's
#             install script runs in a job of the release)
#   locked    every `napi build` / `cargo build` runs with --locked
# Prints one line per violation (file:line: rule: text) and exits 1 if any.
# `check-workflows.sh --self-test` shows that each rule fails on a workflow
# that breaks it and passes one that keeps them all (lint.sh runs both).
set -euo pipefail

if [[ ${1:-} == --self-test ]]; then
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	cat >"$dir/bad.yml" <<-'EOF'
		jobs:
		  build:
		    steps:
		      - uses: actions/checkout@v4
		      - uses: actions/setup-node@0123456789abcdef0123456789abcdef01234567 # v7.0.0
		        with:
		          cache: npm
		      - uses: actions/cache@0123456789abcdef0123456789abcdef01234567 # v4.2.0
		      - uses: some/action@0123456789abcdef0123456789abcdef01234567
		      - uses: other/action@0123456789abcdef # v1
		      - uses: docker://node:20
		      - run: curl -sSf https://sh.rustup.rs | sh -s -- -y
		      - run: npm ci
		      - run: npx napi build --release
		    container: node:20-bookworm
		    services:
		      db:
		        image: "postgres:16"
	EOF
	cat >"$dir/good.yml" <<-'EOF'
		jobs:
		  build:
		    steps:
		      - uses: actions/checkout@0123456789abcdef0123456789abcdef01234567 # v7.0.1
		        with:
		          persist-credentials: false
		      - uses: actions/setup-node@0123456789abcdef0123456789abcdef01234567 # v7.0.0
		        with:
		          package-manager-cache: false
		      - uses: ./.github/actions/local
		      - uses: docker://node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
		      - run: |
		          curl -sSfL -o rustup-init https://example.invalid/rustup-init
		          npm ci --ignore-scripts
		          npx napi build --release -- --locked
		    container:
		      image: node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
	EOF
	# line:rule, by line then rule
	expected="4:checkout 4:pin 5:cache 7:cache 8:cache 9:pin 10:pin 11:pin 12:pipe-sh 13:scripts 14:locked 15:pin 18:pin"
	got=$(bash "$0" "$dir/bad.yml" | awk -F': ' '{ n = split($1, a, ":"); print a[n] ":" $2 }' |
		sort -t: -k1,1n -k2,2 | paste -sd' ' || true)
	if [[ $got != "$expected" ]]; then
		echo "check-workflows self-test: a broken workflow gave [$got], expected [$expected]" >&2
		exit 1
	fi
	if ! bash "$0" "$dir/good.yml"; then
		echo "check-workflows self-test: a workflow that keeps every rule was refused" >&2
		exit 1
	fi
	exit 0
fi

status=0
for file in "$@"; do
	awk -v file="$file" -v q="'" '
	function report(rule, lineno, text) {
		sub(/^[ \t]+/, "", text)
		printf "%s:%d: %s: %s\n", file, lineno, rule, text
		bad = 1
	}
	# A list item (a step, a matrix entry) ends where a line is indented no
	# deeper than its dash; checkout and setup-node are checked per item.
	function close_item() {
		if (item_checkout && !item_no_persist) report("checkout", item_line, "actions/checkout without persist-credentials: false")
		if (item_setup_node && !item_no_pm_cache) report("cache", item_line, "actions/setup-node without package-manager-cache: false")
		item_checkout = item_setup_node = item_no_persist = item_no_pm_cache = 0
		item_indent = -1
	}
	# Whether what follows the last `sep` in s is exactly n lowercase hex
	# digits (no {n} intervals: the mawk of Debian lacks them).
	function hex_after(s, sep, n,    i, tail) {
		i = index(s, sep)
		if (!i) return 0
		tail = substr(s, i + length(sep))
		return length(tail) == n && tail ~ /^[0-9a-f]+$/
	}
	BEGIN { item_indent = -1 }
	{
		line = $0
		match(line, /^ */)
		indent = RLENGTH
		if (line !~ /^[ \t]*(#|$)/ && item_indent >= 0 && indent <= item_indent) close_item()
		if (line ~ /^ *- /) { close_item(); item_indent = indent; item_line = NR }
		code = line
		sub(/[ \t]+#.*$/, "", code)
		if (code ~ /^[ \t]*#/) next
	}
	code ~ /(^|[ \t-])uses:/ {
		ref = code
		sub(/.*uses:[ \t]*/, "", ref)
		gsub(/"/, "", ref)
		gsub(q, "", ref)
		if (ref ~ /^\.\//) {
			# a local action or workflow: pinned by this commit
		} else if (ref ~ /^docker:\/\//) {
			if (!hex_after(ref, "@sha256:", 64)) report("pin", NR, line)
		} else if (ref !~ /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.\/-]+@/ || !hex_after(ref, "@", 40) || line !~ /#[ \t]*[^ \t]/) {
			report("pin", NR, line)
		}
		if (ref ~ /^actions\/checkout@/) item_checkout = 1
		if (ref ~ /^actions\/setup-node@/) item_setup_node = 1
		if (ref ~ /^actions\/cache(\/[a-z]+)?@/) report("cache", NR, line)
	}
	# A container or service image, inline (`container: img`) or as the
	# `image:` of a container/services map.
	code ~ /^[ \t]*(container|image):[ \t]*[^ \t]/ {
		img = code
		sub(/^[ \t]*(container|image):[ \t]*/, "", img)
		gsub(/"/, "", img)
		gsub(q, "", img)
		if (!hex_after(img, "@sha256:", 64)) report("pin", NR, line)
	}
	code ~ /persist-credentials:[ \t]*false/ { item_no_persist = 1 }
	code ~ /package-manager-cache:[ \t]*false/ { item_no_pm_cache = 1 }
	code ~ /^[ \t]*cache:[ \t]*[^ \t]/ && item_setup_node { report("cache", NR, line) }
	code ~ /(curl|wget)[^|]*\|[ \t]*(sudo[ \t]+)?(ba|z|da)?sh([ \t]|$)/ { report("pipe-sh", NR, line) }
	code ~ /npm[ \t]+(ci|install|i)([ \t]|$)/ && code !~ /--ignore-scripts/ { report("scripts", NR, line) }
	code ~ /(napi|cargo)[ \t]+build([ \t]|$)/ && code !~ /--locked/ { report("locked", NR, line) }
	END { close_item(); exit bad }
	' "$file" || status=1
done
exit $status
