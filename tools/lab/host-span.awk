# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# tools/lab/bench-guest's check of the host's CPU sample against the run it
# is for.  The host side (tools/bench) rewrites "<ticks of host CPU this
# guest's qemu used> <ticks per s> <host uptime>" every 0.1 s; bench-guest
# reads it before and after a client run, and brackets the same run with
# the guest's own uptime (under TCG the guest's clock runs at the host's
# pace).  A writer starved on a loaded host leaves a sample that spans less
# of the run than the guest saw: its figures would be for another interval.
#
#   awk -v a="HOST SAMPLE BEFORE" -v b="HOST SAMPLE AFTER" \
#       -v s=GUEST_UPTIME_BEFORE -v e=GUEST_UPTIME_AFTER -f host-span.awk
#
# Prints "<host CPU s> <host wall s>" where the host's span is within 10%
# of the guest's plus 0.2 s (the writer's period, twice); otherwise nothing
# on stdout, and on stderr a line that says the sample was left out.
BEGIN {
	if (split(a, x, " ") != 3 || split(b, y, " ") != 3 || y[2] <= 0) {
		print "bench-guest: a host sample unreadable: left out" > "/dev/stderr"
		exit
	}
	w = y[3] - x[3]
	g = e - s
	d = w > g ? w - g : g - w
	if (d <= 0.1 * g + 0.2)
		print (y[1] - x[1]) / y[2], w
	else
		printf "bench-guest: a host sample of %.2f s for a %.2f s run: " \
			"left out\n", w, g > "/dev/stderr"
}
