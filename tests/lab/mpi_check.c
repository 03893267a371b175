// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * An MPI program that checks the bytes it receives: ranks 0 and 1 exchange
 * messages of 1 B to 4 MiB in both directions, each filled with a pattern
 * of its size, sender and round; every byte received is compared.  Prints
 * "mpi_check: ok, N bytes checked" on rank 0 and exits 0, or names the
 * first wrong byte and exits 1.  Built and run by tests/lab/run-clients.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(size_t i, size_t size, int from, int round)
{
	return (unsigned char)(i * 131 + size * 7 + from * 61 + round * 17);
}

int main(int argc, char **argv)
{
	const size_t max = 4 << 20;
	unsigned char *out, *in;
	unsigned long long checked = 0;
	int rank, nranks, peer, round, bad = 0;
	size_t size, i;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_check: run with -np 2\n");
		MPI_Finalize();
		return 2;
	}
	peer = 1 - rank;
	out = malloc(max);
	in = malloc(max);
	if (!out || !in)
		MPI_Abort(MPI_COMM_WORLD, 2);

	for (round = 0; round < 3 && !bad; round++) {
		for (size = 1; size <= max && !bad; size *= 2) {
			for (i = 0; i < size; i++)
				out[i] = pattern(i, size, rank, round);
			memset(in, 0, size);
			MPI_Sendrecv(out, (int)size, MPI_BYTE, peer, round,
				     in, (int)size, MPI_BYTE, peer, round,
				     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (i = 0; i < size; i++) {
				if (in[i] != pattern(i, size, peer, round)) {
					fprintf(stderr,
						"mpi_check: rank %d: byte %zu of %zu (round %d) is %#x, not %#x\n",
						rank, i, size, round, in[i],
						pattern(i, size, peer, round));
					bad = 1;
					break;
				}
			}
			checked += size;
		}
	}
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0 && !bad)
		printf("mpi_check: ok, %llu bytes checked per rank\n", checked);
	free(out);
	free(in);
	MPI_Finalize();
	return bad;
}
