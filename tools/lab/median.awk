# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# med(S): the median of the space-separated numbers in S; sets lo and hi
# to their least and greatest.  The benchmark reports' one median
# (tools/bench-cm, tools/bench-scale, tools/bench-nvmeof), put in front of
# their awk programs.
function med(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	lo = a[1]; hi = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
