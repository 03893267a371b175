// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// Copy bandwidth of this machine, the ceiling of any transport that copies
// its payload once (tools/bench runs it in the lab guest, beside the
// transports).  Four figures, one line each, in MB/s (10^6 bytes):
//
//   hot           user space memcpy of 64 KiB between two buffers that stay
//                 in the cache, as perftest's 64 KiB ib_write_bw reuses one
//                 buffer per QP;
//   stream        the same 64 KiB at a time through 256 MiB, beyond any
//                 cache;
//   kernel_hot    the kernel's copy: pread() of 64 KiB from a memfd into
//                 one buffer, over and over (copy_to_user from the page
//                 cache; a transport's receive copy is the kernel's);
//   kernel_stream the same through a 256 MiB memfd.
//
// Each runs for --secs seconds (default 2) after a warm-up of a quarter of
// that, on one thread.
//
//   usage: trdma_memcpy_bw [--secs S]
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Calls step(off) for one chunk at offset off, walking through span bytes
// and around again, batch calls between looks at the clock, until secs
// have passed; returns MB/s, or -1 when a step fails.
template <typename Step>
double Timed(size_t span, size_t chunk, double secs, int batch, Step step)
{
	size_t off = 0;
	unsigned long long bytes = 0;
	const auto start = Clock::now();
	const auto end = start + std::chrono::duration<double>(secs);
	auto now = start;
	while (now < end) {
		for (int i = 0; i < batch; i++) {
			if (!step(off))
				return -1;
			bytes += chunk;
			off += chunk;
			if (off + chunk > span)
				off = 0;
		}
		now = Clock::now();
	}
	const double s = std::chrono::duration<double>(now - start).count();
	return bytes / s / 1e6;
}

// Copies chunk bytes at a time through src into dst until secs have passed;
// returns MB/s.
double Measure(std::vector<char> &src, std::vector<char> &dst, size_t chunk,
               double secs)
{
	return Timed(src.size(), chunk, secs, 64, [&](size_t off) {
		std::memcpy(dst.data() + off, src.data() + off, chunk);
		// Keep the compiler from dropping the copy.
		asm volatile("" : : "r"(dst.data()) : "memory");
		return true;
	});
}

// pread()s chunk bytes at a time through a memfd of span bytes until secs
// have passed; returns MB/s, or -1 on error.
double MeasureKernel(size_t span, size_t chunk, double secs)
{
	int fd = memfd_create("trdma_memcpy_bw", 0);
	if (fd < 0)
		return -1;
	std::vector<char> buf(chunk, 1);
	for (size_t off = 0; off < span; off += chunk) {
		if (pwrite(fd, buf.data(), chunk, off) != (ssize_t)chunk) {
			close(fd);
			return -1;
		}
	}
	const double mbps = Timed(span, chunk, secs, 16, [&](size_t off) {
		return pread(fd, buf.data(), chunk, off) == (ssize_t)chunk;
	});
	close(fd);
	return mbps;
}

} // namespace

int main(int argc, char **argv)
{
	double secs = 2;

	for (int i = 1; i < argc; i++) {
		if (std::string(argv[i]) == "--secs" && i + 1 < argc) {
			secs = std::atof(argv[++i]);
		} else {
			std::fprintf(stderr, "usage: %s [--secs S]\n", argv[0]);
			return 2;
		}
	}
	if (!(secs > 0)) {
		std::fprintf(stderr, "%s: --secs takes a positive number\n",
			     argv[0]);
		return 2;
	}
	const size_t chunk = 64 * 1024;
	std::vector<char> hot_src(chunk, 1), hot_dst(chunk, 0);
	std::vector<char> big_src(256u << 20, 1), big_dst(256u << 20, 0);

	Measure(hot_src, hot_dst, chunk, secs / 4);
	std::printf("hot %.0f\n", Measure(hot_src, hot_dst, chunk, secs));
	Measure(big_src, big_dst, chunk, secs / 4);
	std::printf("stream %.0f\n", Measure(big_src, big_dst, chunk, secs));
	MeasureKernel(chunk, chunk, secs / 4);
	std::printf("kernel_hot %.0f\n", MeasureKernel(chunk, chunk, secs));
	std::printf("kernel_stream %.0f\n",
		    MeasureKernel(256u << 20, chunk, secs));
	// Use the data, so no copy is provably dead.
	return hot_dst[chunk - 1] + big_dst[12345] == 2 ? 0 : 1;
}
