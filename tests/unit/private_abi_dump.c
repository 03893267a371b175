// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Prints what private_abi_probe.c measured, one "key = value" per line. */
#include <stdio.h>

#include "private_abi_probe.h"

int main(void)
{
	for (size_t i = 0; i < trdma_probe_count; i++)
		printf("%s = %zu\n", trdma_probe_values[i].key,
		       trdma_probe_values[i].value);
	return 0;
}
