#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Checks that every external command the project's tools and tests call
# comes from a Debian package tools/install-deps installs, directly or
# through the Depends/Pre-Depends closure, or from one every Debian system
# has (Essential: yes, or Priority: required).  A command installed by hand
# (as ethtool once was, for tests/lab/run-2host) fails here instead of on
# the next fresh machine.
#
#   tests/unit/check-commands.sh [TOP]
#
# TOP is the source tree (default: two levels above this script).  Offline:
# it reads only dpkg's database.  Candidate command words are taken, over-
# approximately, from
#   - every shell script under tools/ and tests/ (a sh/bash shebang, or
#     *.sh), comments stripped, heredocs kept;
#   - the string literals of the C/C++ and Python files there (Sh("..."),
#     system(), popen(), subprocess.run([...]) and all the others);
#   - the interpreter of every script there (#!/usr/bin/python3 ...);
#   - COMMAND and find_program() arguments of the project's CMake files.
# A word counts when it is neither a bash builtin nor a keyword nor a
# function the project's shell scripts define, and names an executable in
# the standard root PATH (/usr/local and sbin included).  It passes when a
# package owning that file, or the file its symlinks resolve to
# (/etc/alternatives), or their /usr-merge aliases, is in the allowed set.
# A word found only in files no package owns (/usr/local, ...) fails too.
# EXEMPT below lists the few words that are never run as commands.
#
# Limit: a command that is not installed at all on the machine running the
# check is indistinguishable from a plain word and is not checked; it fails
# loudly where it is used instead.  The check matters on machines where
# someone installed it by hand.
#
# KEEP_WORK=1 keeps the work directory (word lists, the allowed packages,
# the verdicts) for a look.
#
# Exit status: 0 when every command is covered, 1 when one is not, 77
# (ctest: skipped) without dpkg.
set -euo pipefail
export LC_ALL=C

# Words that name an executable here but are never run as one by the
# project: word -> why.  Keep it short; every entry hides a word for good.
declare -A EXEMPT=(
	[file]="qemu's -chardev file,... backend in tools/vm"
	[init]="the guest's /init and rdinit=/init, a guest-init stage name"
	[less]="prose: \"0.7x or less\" in tools/lab/bench-report's verdicts"
	[reboot]="qemu's -no-reboot and the kernel's \"reboot: Power down\""
	[write]="RDMA WRITE and write(2) in test and message strings"
)

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "${1:-$here/../..}" && pwd)

# The tools run as root with the standard Debian PATH, whatever the caller's
# PATH holds (~/.cargo/bin, pyenv shims, ...).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if ! command -v dpkg-query >/dev/null; then
	echo "SKIP: no dpkg-query: not a Debian system"
	exit 77
fi

work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT

# --- the allowed package set ------------------------------------------------

"$top/tools/install-deps" --list >"$work/seeds"
if ! [ -s "$work/seeds" ]; then
	echo "FAIL: tools/install-deps --list printed no packages" >&2
	exit 1
fi

dpkg-query -W -f='${db:Status-Status}\t${Package}\t${Essential}\t${Priority}\t${Provides}\t${Pre-Depends}, ${Depends}\n' \
	>"$work/status"

# Seeds: install-deps' packages plus the installed Essential/required ones.
# Closure over Depends and Pre-Depends of installed packages.  A plain
# dependency is added at once; an alternative "a | b" and a virtual package
# (one that is not itself installed but that installed packages Provide) are
# settled when the plain closure is complete: satisfied when one alternative
# or provider is already in the set, otherwise the first alternative, or
# every installed provider, is added, as apt would on a fresh machine.
awk -F'\t' '
function norm(s) {
	sub(/\(.*\)/, "", s)
	gsub(/[ \t]/, "", s)
	sub(/:.*/, "", s)
	return s
}
function add(p) {
	if (p == "" || (p in S)) return
	S[p] = 1
	queue[++qn] = p
}
function present(p,   n, i, a) {
	if (p in S) return 1
	if ((p in inst) || !(p in prov)) return 0
	n = split(prov[p], a, " ")
	for (i = 1; i <= n; i++) if (a[i] in S) return 1
	return 0
}
function settle(p,   n, i, a) {
	if ((p in inst) || !(p in prov)) { add(p); return }
	n = split(prov[p], a, " ")
	for (i = 1; i <= n; i++) if (a[i] in S) return
	for (i = 1; i <= n; i++) add(a[i])
}
FNR == NR { add($1); next }
$1 == "installed" {
	p = $2
	inst[p] = 1
	deps[p] = $6
	if ($3 == "yes" || $4 == "required") seed[p] = 1
	n = split($5, a, ",")
	for (i = 1; i <= n; i++) {
		v = norm(a[i])
		if (v != "" && index(" " prov[v] " ", " " p " ") == 0)
			prov[v] = prov[v] " " p
	}
}
END {
	for (p in seed) add(p)
	do {
		for (; qh < qn; ) {
			p = queue[++qh]
			if (!(p in inst)) { late[++ln] = p; continue }
			n = split(deps[p], g, ",")
			for (i = 1; i <= n; i++) {
				m = split(g[i], alt, "|")
				if (m == 0 || norm(alt[1]) == "") continue
				if (m == 1 && (norm(alt[1]) in inst)) add(norm(alt[1]))
				else late[++ln] = g[i]
			}
		}
		# Alternatives and virtual packages, once the plain closure is done.
		before = qn
		for (k = 1; k <= ln; k++) {
			m = split(late[k], alt, "|")
			ok = 0
			for (j = 1; j <= m; j++) if (present(norm(alt[j]))) ok = 1
			if (!ok) settle(norm(alt[1]))
			else if (m == 1 && !(norm(alt[1]) in inst)) settle(norm(alt[1]))
		}
		ln = 0
	} while (qn > before)
	for (p in S) print p
}' "$work/seeds" "$work/status" | sort -u >"$work/allowed"

# --- candidate command words -----------------------------------------------

# The candidate files by kind (text files only: grep -I skips binaries).
sh=() c=() py=() cm=()
: >"$work/text" # file<TAB>text: what the words are taken from
while IFS= read -r rel; do
	f=$top/$rel
	first=
	IFS= read -r first <"$f" || true
	case "$rel" in
	*CMakeLists.txt | *.cmake) cm+=("$f") ;;
	tools/* | tests/*)
		case "$first" in
		'#!'*)
			# The interpreter: "#!/usr/bin/env python3" -> env python3.
			printf '%s\t%s\n' "$rel" "${first#'#!'}" >>"$work/text"
			;;
		esac
		case "$f" in
		*.sh) sh+=("$f") ;;
		*.c | *.cc | *.cpp | *.h | *.hpp) c+=("$f") ;;
		*.py) py+=("$f") ;;
		*)
			case "$first" in
			'#!'*python*) py+=("$f") ;;
			'#!'*sh | '#!'*sh[[:space:]]*) sh+=("$f") ;;
			esac
			;;
		esac
		;;
	esac
done < <(cd "$top" && find . -mindepth 1 \( -name '.*' -o -name 'build*' \
	-o -name CMakeFiles -o -name __pycache__ -o -path ./tests/fuzz/corpus \) \
	-prune -o -type f -print0 | xargs -0 -r grep -Il '' | sed 's|^\./||' | sort)
nfiles=$((${#sh[@]} + ${#c[@]} + ${#py[@]} + ${#cm[@]}))
if ((${#sh[@]} == 0 || ${#c[@]} == 0)); then
	echo "FAIL: found no shell scripts or no C/C++ files under $top/tools, $top/tests" >&2
	exit 1
fi

# Shell: all but comment lines and trailing " # ..." comments; heredocs
# stay.  And the functions the scripts define.
: >"$work/functions"
((${#sh[@]} == 0)) || awk -v top="$top/" -v fn="$work/functions" '
FNR == 1 { f = substr(FILENAME, length(top) + 1); if (/^#!/) next }
/^[ \t]*#/ { next }
match($0, /^[ \t]*(function[ \t]+)?[A-Za-z0-9_][A-Za-z0-9_.+-]*[ \t]*\(\)/) {
	n = substr($0, 1, RLENGTH); sub(/[ \t]*\(\)$/, "", n)
	sub(/^[ \t]*(function[ \t]+)?/, "", n); print n > fn
}
{ l = $0; sub(/[ \t]#.*/, "", l); print f "\t" l }' "${sh[@]}" >>"$work/text"

# C/C++ and Python: the string literals (char literals dropped first);
# Python's '...' strings too.
literals() { # SINGLE FILE... (SINGLE=1: '...' strings too)
	local single=$1
	shift
	awk -v top="$top/" -v single="$single" '
	FNR == 1 { f = substr(FILENAME, length(top) + 1) }
	{
		l = $0
		gsub(/\047\\.\047/, "", l); gsub(/\047[^\047\\]\047/, "", l)
		while (match(l, /"([^"\\]|\\.)*"/)) {
			print f "\t" substr(l, RSTART, RLENGTH)
			l = substr(l, 1, RSTART - 1) " " substr(l, RSTART + RLENGTH)
		}
		if (single)
			while (match(l, /\047([^\047\\]|\\.)*\047/)) {
				print f "\t" substr(l, RSTART, RLENGTH)
				l = substr(l, RSTART + RLENGTH)
			}
	}' "$@"
}
((${#c[@]} == 0)) || literals 0 "${c[@]}" >>"$work/text"
((${#py[@]} == 0)) || literals 1 "${py[@]}" >>"$work/text"

# CMake: what follows COMMAND, and find_program()'s arguments.
((${#cm[@]} == 0)) || awk -v top="$top/" '
FNR == 1 { f = substr(FILENAME, length(top) + 1); fp = 0 }
fp { print f "\t" $0; if (/\)/) fp = 0; next }
match($0, /find_program\(/) {
	r = substr($0, RSTART + RLENGTH); print f "\t" r
	if (r !~ /\)/) fp = 1
}
match($0, /COMMAND/) { print f "\t" substr($0, RSTART + RLENGTH) }
' "${cm[@]}" >>"$work/text"

# word<TAB>file.  Backslash escapes (\n, \x2f, \033) split words instead of
# gluing a letter to the next one ("\nnft" -> "nft").
awk -F'\t' '{
	f = $1; t = substr($0, length(f) + 2)
	gsub(/\\(x[0-9A-Fa-f][0-9A-Fa-f]?|[0-7][0-7]?[0-7]?|[A-Za-z])/, " ", t)
	while (match(t, /[A-Za-z0-9_][A-Za-z0-9_.+-]*/)) {
		w = substr(t, RSTART, RLENGTH); t = substr(t, RSTART + RLENGTH)
		sub(/[.-]+$/, "", w)
		if (w != "") print w "\t" f
	}
}' "$work/text" | sort -u >"$work/words"

# --- resolve each word to the files and packages providing it ---------------

# name<TAB>path of every executable in PATH, in PATH order.
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	[ -d "$d" ] || continue
	find "$d/" -mindepth 1 -maxdepth 1 \( -type f -o -type l \) -printf '%f\t%p\n'
done | sed 's|//*|/|g' >"$work/path-index"
# word<TAB>path for every word that names an executable, except bash's
# builtins and keywords ("time", "kill", "echo": bash runs those itself) and
# the functions the project's shell scripts define (tests/lab/xhost-faults.sh
# has an xkill()).
{ compgen -b; compgen -k; cat "$work/functions"; } | sort -u >"$work/builtins"
awk -F'\t' '
FILENAME == ARGV[1] { skip[$1] = 1; next }
FILENAME == ARGV[2] { if (!($1 in skip)) want[$1] = 1; next }
($1 in want) && !seen[$2]++ { print }' \
	"$work/builtins" <(cut -f1 "$work/words") "$work/path-index" |
	while IFS=$'\t' read -r w p; do
		[ -f "$p" ] && [ -x "$p" ] && printf '%s\t%s\n' "$w" "$p"
	done >"$work/paths"

# path<TAB>candidate: the path, where its symlinks lead (/etc/alternatives
# included), and the /usr-merge alias of each.
mapfile -t plist < <(cut -f2 "$work/paths")
((${#plist[@]} == 0)) || readlink -f -- "${plist[@]}" |
	paste <(printf '%s\n' "${plist[@]}") - |
	awk -F'\t' '
	function out(c) {
		print $1 "\t" c
		if (c ~ /^\/usr\/(s?bin|lib|lib64)\//) print $1 "\t" substr(c, 5)
		else if (c ~ /^\/(s?bin|lib|lib64)\//) print $1 "\t/usr" c
	}
	{ out($1); out($2) }' | sort -u >"$work/cands"
[ -e "$work/cands" ] || : >"$work/cands"

# candidate<TAB>package, from dpkg-query -S over the candidates (its
# "diversion by" lines aside: the diverted file's owner is listed too).
cut -f2 "$work/cands" | sort -u >"$work/cand-list"
{ xargs -r -d '\n' dpkg-query -S <"$work/cand-list" 2>/dev/null || true; } |
	awk '/^diversion by / { next }
	{
		i = index($0, ": "); pk = substr($0, 1, i - 1); f = substr($0, i + 2)
		n = split(pk, a, ", ")
		for (k = 1; k <= n; k++) { sub(/:.*/, "", a[k]); print f "\t" a[k] }
	}' | sort -u >"$work/owners"

# --- verdict -----------------------------------------------------------------

# For each word: ok (an owner of one of its files is allowed), or its owners
# (or "-" when no package owns any of its files).
awk -F'\t' -v exempt="${!EXEMPT[*]}" '
FILENAME == ARGV[1] { allowed[$1] = 1; next }
FILENAME == ARGV[2] { own[$1] = own[$1] " " $2; next }
FILENAME == ARGV[3] { cands[$1] = cands[$1] " " $2; next }
FILENAME == ARGV[4] { w = $1; p = $2; paths[w] = paths[w] " " p; words[w] = 1
	n = split(cands[p], c, " ")
	for (i = 1; i <= n; i++) {
		m = split(own[c[i]], o, " ")
		for (j = 1; j <= m; j++) {
			if (o[j] in allowed) ok[w] = 1
			if (index(" " pk[w] " ", " " o[j] " ") == 0) pk[w] = pk[w] " " o[j]
		}
	}
}
END {
	split(exempt, e, " "); for (i in e) exempted[e[i]] = 1
	for (w in words) {
		if (w in ok) print "ok\t" w
		else if (w in exempted) print "exempt\t" w
		else print "bad\t" w "\t" (pk[w] == "" ? "-" : substr(pk[w], 2)) "\t" substr(paths[w], 2)
	}
}' "$work/allowed" "$work/owners" "$work/cands" "$work/paths" |
	sort >"$work/verdict"

checked=$(grep -c '^ok' "$work/verdict" || true)
nexempt=$(grep -c '^exempt' "$work/verdict" || true)
if grep -q '^bad' "$work/verdict"; then
	echo "FAIL: commands the tools and tests use that tools/install-deps does not provide:"
	while IFS=$'\t' read -r _ w pk paths; do
		files=$(awk -F'\t' -v w="$w" '$1 == w { printf "%s%s", s, $2; s = ", " }' "$work/words")
		if [ "$pk" = - ]; then
			echo "  $w ($paths): owned by no Debian package; used in $files"
			echo "    -> install it from a package in tools/install-deps, or exempt it in $0"
		else
			echo "  $w ($paths): package $pk; used in $files"
			case "$pk" in
			*' '*) echo "    -> add one of $pk to PACKAGES in tools/install-deps" ;;
			*) echo "    -> add $pk to PACKAGES in tools/install-deps" ;;
			esac
		fi
	done < <(grep '^bad' "$work/verdict")
	echo "($checked commands covered, $nexempt exempt, from $nfiles files)"
	exit 1
fi
echo "ok: $checked commands from $nfiles files are provided by tools/install-deps' packages or every Debian system ($nexempt exempt, $(wc -l <"$work/allowed") packages allowed)"
