// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// A TCP ping-pong that polls, as perftest's ib_send_lat polls its CQ: the
// round-trip time of the kernel's TCP for a small message between two
// processes that never sleep, the floor of any transport that TCP carries
// (tools/bench runs it in the lab guest beside ib_send_lat; qperf's
// tcp_lat sleeps in recv() and measures the scheduler's wake-ups as well).
//
// The client sends SIZE bytes, the server sends them back as soon as they
// are all in, ITERS times; each side receives with recv(MSG_DONTWAIT) in a
// loop (--block: a blocking recv() instead).  TCP_NODELAY on both sides.
// Each round trip is timed with the TSC (as perftest does, so that the
// timing itself costs no system call where the clocksource is emulated),
// converted with its rate over the whole run against CLOCK_MONOTONIC.
// The client prints perftest's latency columns, in microseconds:
//
//   #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
//
//   usage: trdma_tcp_pingpong [-p PORT] [-s SIZE] [-n ITERS] [--block] [ADDR]
//          (the server without ADDR: it serves one client, then exits)
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

bool g_block;

double MonoSecs()
{
	timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

// All len bytes into buf; false on error or end of stream.
bool RecvAll(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = recv(fd, buf + got, len - got,
				 g_block ? 0 : MSG_DONTWAIT);

		if (r > 0) {
			got += r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		return false;
	}
	return true;
}

bool SendAll(int fd, const char *buf, size_t len)
{
	size_t sent = 0;

	while (sent < len) {
		ssize_t r = send(fd, buf + sent, len - sent, MSG_NOSIGNAL);

		if (r > 0) {
			sent += r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		return false;
	}
	return true;
}

int Fail(const char *what)
{
	fprintf(stderr, "trdma_tcp_pingpong: %s: %s\n", what, strerror(errno));
	return 1;
}

void NoDelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int Serve(int port, size_t size, long iters)
{
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
	sockaddr_in sa = {};

	if (lfd < 0)
		return Fail("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	if (bind(lfd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) ||
	    listen(lfd, 1))
		return Fail("bind/listen");
	fd = accept(lfd, nullptr, nullptr);
	if (fd < 0)
		return Fail("accept");
	close(lfd);
	NoDelay(fd);
	std::vector<char> buf(size);
	for (long i = 0; i < iters; i++)
		if (!RecvAll(fd, buf.data(), size) ||
		    !SendAll(fd, buf.data(), size))
			return Fail("ping-pong");
	close(fd);
	return 0;
}

int Measure(const char *addr, int port, size_t size, long iters)
{
	addrinfo hints = {}, *ai;
	std::string p = std::to_string(port);
	int fd = -1;

	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(addr, p.c_str(), &hints, &ai))
		return Fail("getaddrinfo");
	// The server may not listen yet: retry for a few seconds.
	for (int tries = 0; tries < 100; tries++) {
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			return Fail("socket");
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		close(fd);
		fd = -1;
		usleep(50000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return Fail("connect");
	NoDelay(fd);

	std::vector<char> buf(size, 'x');
	std::vector<unsigned long long> ticks(iters);
	double t0 = MonoSecs();
	unsigned long long c0 = __rdtsc(), prev = c0;

	for (long i = 0; i < iters; i++) {
		if (!SendAll(fd, buf.data(), size) ||
		    !RecvAll(fd, buf.data(), size))
			return Fail("ping-pong");
		unsigned long long now = __rdtsc();

		ticks[i] = now - prev;
		prev = now;
	}
	double per_us = (prev - c0) / ((MonoSecs() - t0) * 1e6);
	close(fd);

	std::vector<double> us(iters);
	double sum = 0, sq = 0;

	for (long i = 0; i < iters; i++) {
		us[i] = ticks[i] / per_us;
		sum += us[i];
	}
	double avg = sum / iters;

	for (double u : us)
		sq += (u - avg) * (u - avg);
	std::sort(us.begin(), us.end());
	auto pct = [&](double q) {
		return us[std::min<long>(iters - 1, (long)(q * iters))];
	};
	printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
	printf(" %-7zu %-10ld %-14.2f %-14.2f %-16.2f %-14.2f %-16.2f %-22.2f %.2f\n",
	       size, iters, us.front(), us.back(), pct(0.5), avg,
	       std::sqrt(sq / iters), pct(0.99), pct(0.999));
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	int port = 18516;
	size_t size = 8;
	long iters = 10000;
	const char *addr = nullptr;

	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];

		if (a == "-p" && i + 1 < argc)
			port = atoi(argv[++i]);
		else if (a == "-s" && i + 1 < argc)
			size = strtoul(argv[++i], nullptr, 0);
		else if (a == "-n" && i + 1 < argc)
			iters = strtol(argv[++i], nullptr, 0);
		else if (a == "--block")
			g_block = true;
		else if (a[0] != '-' && !addr)
			addr = argv[i];
		else {
			fprintf(stderr, "usage: trdma_tcp_pingpong [-p PORT] [-s SIZE] [-n ITERS] [--block] [ADDR]\n");
			return 2;
		}
	}
	if (!size || iters < 1 || port <= 0 || port > 65535) {
		fprintf(stderr, "trdma_tcp_pingpong: bad -s, -n or -p\n");
		return 2;
	}
	return addr ? Measure(addr, port, size, iters) :
		      Serve(port, size, iters);
}
