# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# shellcheck shell=bash
#
# Sourced by the tests that run tshark (check-wireshark-*.sh).
#
# tshark_env TSHARK WORKDIR: sets tshark to the path of TSHARK (a path, or a
# name looked up in PATH) and puts its directory first in PATH, or fails
# the test, saying so, where there is none; empties WORKDIR; keeps the
# user's preferences and personal plugins out (a copy of trdma.lua in
# ~/.local/lib/wireshark/plugins would register its protocols twice).
tshark_env() {
	if ! tshark=$(command -v "$1"); then
		echo "FAIL: tshark ('$1') not found: the test needs it." >&2
		echo "      Install it with tools/install-deps (Debian package tshark)." >&2
		exit 1
	fi
	PATH=$(dirname "$tshark"):$PATH
	rm -rf "$2"
	mkdir -p "$2/home"
	export HOME=$2/home XDG_CONFIG_HOME=$2/home/.config
	export WIRESHARK_CONFIG_DIR=$2/home/wireshark
	unset WIRESHARK_PLUGIN_DIR
}
