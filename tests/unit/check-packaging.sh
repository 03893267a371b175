#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Host checks of the packaging (docs/packaging.md), no root, no VM:
#   - the project version is the same in CMakeLists.txt, dkms.conf and
#     debian/changelog;
#   - the DKMS source tree (tools/package --dkms-source) holds every file
#     the module's Kbuild builds from: each kernel/ source and the uapi
#     headers;
#   - admin/trdma-links: its configuration parser (comments, blanks, bad
#     lines with their line numbers, names declared twice) and the rdma
#     commands up / add NETDEV / down run, through a stand-in `rdma`.
# The lab test tests/lab/run-package installs the real packages.
#   usage: tests/unit/check-packaging.sh [TOP]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "${1:-$here/../..}" && pwd)
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- versions -------------------------------------------------------------
v_cmake=$(sed -n 's/^project(trdma VERSION \([^ ]*\) .*/\1/p' "$top/CMakeLists.txt")
v_dkms=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$top/dkms.conf")
v_deb=$(sed -n '1s/^trdma (\([^)]*\)).*/\1/p' "$top/debian/changelog")
if [ -n "$v_cmake" ] && [ "$v_cmake" = "$v_dkms" ] && [ "$v_cmake" = "$v_deb" ]; then
	ok "version $v_cmake in CMakeLists.txt, dkms.conf, debian/changelog"
else
	bad "versions differ: CMakeLists.txt '$v_cmake', dkms.conf '$v_dkms', debian/changelog '$v_deb'"
fi

# ---- the DKMS source tree ------------------------------------------------
if "$top/tools/package" --dkms-source "$work/src" >/dev/null; then
	d=$work/src/trdma-$v_dkms
	missing=
	for f in dkms.conf Kbuild kernel/Kbuild $(cd "$top" && ls kernel/*.[ch] kernel/*.sh) \
		$(cd "$top" && find include/uapi -name '*.h'); do
		cmp -s "$top/$f" "$d/$f" || missing="$missing $f"
	done
	# Every object kernel/Kbuild names has its source there.
	for o in $(sed -n 's/\\$//; s/^trdma-y *:= *//p; s/^[[:space:]]\+\(trdma_.*\.o\)/\1/p' "$top/kernel/Kbuild"); do
		case $o in *.o) [ -e "$d/kernel/${o%.o}.c" ] || missing="$missing kernel/${o%.o}.c" ;; esac
	done
	if [ -z "$missing" ]; then
		ok "the DKMS source tree holds every source the Kbuild builds from"
	else
		bad "missing from the DKMS source tree:$missing"
	fi
	[ -x "$d/kernel/trdma_compat.sh" ] && ok "trdma_compat.sh is executable there" ||
		bad "trdma_compat.sh is not executable in the DKMS tree"
else
	bad "tools/package --dkms-source failed"
fi

# ---- trdma-links ---------------------------------------------------------
links=$top/admin/trdma-links
cat >"$work/rdma" <<'FAKE'
#!/bin/sh
echo "$*" >>"$RDMA_LOG"
FAKE
chmod +x "$work/rdma"
export RDMA_LOG=$work/rdma.log TRDMA_RDMA=$work/rdma
run() { : >"$RDMA_LOG"; "$links" -c "$work/links.conf" "$@" >"$work/out" 2>&1; }
# Names no RDMA device has; lo exists everywhere.
printf '%s\n' '# comment' '' 'trdmaunit0 lo   # on lo' \
	'  trdmaunit1 nosuchnetdev0' 'trdmaunit2 lo' >"$work/links.conf"
if run check; then ok "check: a well-formed file"; else bad "check refused a well-formed file: $(cat "$work/out")"; fi
run up
if [ "$(cat "$RDMA_LOG")" = "link add trdmaunit0 type trdma netdev lo
link add trdmaunit2 type trdma netdev lo" ]; then
	ok "up: adds the links whose netdev exists, in order"
else
	bad "up ran: $(cat "$RDMA_LOG")"
fi
run add nosuchnetdev0
if [ "$(cat "$RDMA_LOG")" = "link add trdmaunit1 type trdma netdev nosuchnetdev0" ]; then
	ok "add NETDEV: adds the links declared on it"
else
	bad "add nosuchnetdev0 ran: $(cat "$RDMA_LOG")"
fi
run down
if [ ! -s "$RDMA_LOG" ]; then ok "down: deletes no link that does not exist"; else bad "down ran: $(cat "$RDMA_LOG")"; fi
run status
if grep -qx "trdmaunit1 nosuchnetdev0 down (no netdev nosuchnetdev0)" "$work/out" &&
	grep -qx "trdmaunit0 lo down" "$work/out"; then
	ok "status"
else
	bad "status said: $(cat "$work/out")"
fi
# A failing rdma: up fails, and says which link.
printf '#!/bin/sh\necho "rdma: no such type" >&2; exit 1\n' >"$work/rdma"
if ! run up && grep -q "rdma link add trdmaunit0 type trdma netdev lo failed: rdma: no such type" "$work/out"; then
	ok "up: fails when a link cannot be added, with rdma's message"
else
	bad "up with a failing rdma: $(cat "$work/out")"
fi
printf '%s\n' 'trdmaunit0 lo' 'trdmaunit0 lo extra' 'bad/name lo' 'trdmaunit0 lo' >"$work/links.conf"
if ! run check && grep -q "links.conf:2: expected" "$work/out" &&
	grep -q "links.conf:3: expected" "$work/out" &&
	grep -q "links.conf:4: link trdmaunit0 declared twice" "$work/out"; then
	ok "check: malformed lines and names declared twice, with line numbers"
else
	bad "check on a malformed file: $(cat "$work/out")"
fi
: >"$RDMA_LOG"
if ! run up && [ ! -s "$RDMA_LOG" ]; then ok "up: a malformed file adds nothing"; else bad "up on a malformed file ran: $(cat "$RDMA_LOG")"; fi
"$links" bogus >/dev/null 2>&1
[ $? = 2 ] && ok "usage error: exit 2" || bad "an unknown command does not exit 2"
TRDMA_LINKS_CONF=$work/none "$links" up >/dev/null 2>&1 &&
	ok "no configuration file: up does nothing, succeeds" || bad "up without a file failed"

exit $fail
