// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Host smoke test of libtrdma-rdmav34.so inside the real libibverbs.
 *
 * No trdma device exists on a build host, so this builds a fake one:
 * libibverbs enumerates devices from $SYSFS_PATH/class/infiniband_verbs
 * when RDMA netlink is unavailable, and only needs a character device
 * under /dev/infiniband.  In a private mount namespace the test puts a
 * tmpfs on /dev (holding /dev/infiniband/uverbsN nodes that are really
 * /dev/null) and an empty tmpfs on /etc/libibverbs.d (so no other provider
 * is loaded), dlopen()s the provider and checks that:
 *
 *  - the provider loads (all its libibverbs symbols resolve) and registers;
 *  - only the device whose hca_type is "trdma" and whose uverbs ABI is
 *    TRDMA_ABI_VERSION is bound, as an IB CA;
 *  - opening it fails cleanly with EPROTO: the "kernel" (/dev/null) answers
 *    the GET_CONTEXT handshake with ABI version 0.
 *
 * Exits 77 (skipped) when it cannot build that environment: not allowed to
 * create mount namespaces, or RDMA netlink present (then libibverbs
 * ignores $SYSFS_PATH).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/trdma-abi.h>

#define SKIP 77

static char root[] = "/tmp/trdma-smoke.XXXXXX";
static int root_made;
static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,          \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			failures++;                                            \
		}                                                              \
	} while (0)

static void cleanup(void)
{
	if (root_made) {
		umount(root);
		rmdir(root);
		root_made = 0;
	}
}

static void die(const char *what)
{
	perror(what);
	cleanup();
	exit(1);
}

static void write_file(const char *content, const char *fmt, ...)
{
	char path[512];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);

	f = fopen(path, "w");
	if (!f || fputs(content, f) < 0 || fclose(f))
		die(path);
}

static void make_dir(const char *fmt, ...)
{
	char path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);

	if (mkdir(path, 0755) && errno != EEXIST)
		die(path);
}

/*
 * One uverbs device: /dev/infiniband/<uverbs>, its sysfs uverbs entry and
 * its ib_device directory.  hca_type NULL: no such attribute (like rxe).
 */
static void add_device(const char *uverbs, const char *ibdev,
		       const char *hca_type, unsigned int abi_version,
		       dev_t cdev)
{
	char buf[64];
	char path[256];

	make_dir("%s/class/infiniband_verbs/%s", root, uverbs);
	snprintf(buf, sizeof(buf), "%s\n", ibdev);
	write_file(buf, "%s/class/infiniband_verbs/%s/ibdev", root, uverbs);
	snprintf(buf, sizeof(buf), "%u:%u\n", major(cdev), minor(cdev));
	write_file(buf, "%s/class/infiniband_verbs/%s/dev", root, uverbs);
	snprintf(buf, sizeof(buf), "%u\n", abi_version);
	write_file(buf, "%s/class/infiniband_verbs/%s/abi_version", root,
		   uverbs);

	make_dir("%s/class/infiniband/%s", root, ibdev);
	write_file("1: CA\n", "%s/class/infiniband/%s/node_type", root, ibdev);
	if (hca_type) {
		snprintf(buf, sizeof(buf), "%s\n", hca_type);
		write_file(buf, "%s/class/infiniband/%s/hca_type", root, ibdev);
	}

	snprintf(path, sizeof(path), "/dev/infiniband/%s", uverbs);
	if (mknod(path, S_IFCHR | 0666, cdev))
		die(path);
}

static int setup_namespace(void)
{
	struct stat st;
	int fd;

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
	if (fd >= 0) {
		close(fd);
		printf("SKIP: RDMA netlink is available, libibverbs would "
		       "ignore SYSFS_PATH\n");
		return SKIP;
	}

	if (unshare(CLONE_NEWNS)) {
		printf("SKIP: cannot create a mount namespace: %s\n",
		       strerror(errno));
		return SKIP;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		die("make / private");

	/* Real /dev/null numbers, before /dev is covered. */
	if (stat("/dev/null", &st) || !S_ISCHR(st.st_mode))
		die("/dev/null");

	if (!mkdtemp(root))
		die("mkdtemp");
	root_made = 1;
	/* Vanishes with the namespace; only the empty directory is left. */
	if (mount("trdma-smoke", root, "tmpfs", 0, "mode=0755"))
		die("tmpfs on fake sysfs");
	if (mount("trdma-smoke", "/dev", "tmpfs", 0, "mode=0755"))
		die("tmpfs on /dev");
	make_dir("/dev/infiniband");
	if (mknod("/dev/null", S_IFCHR | 0666, st.st_rdev)) {
		printf("SKIP: cannot create device nodes: %s\n",
		       strerror(errno));
		return SKIP;
	}
	if (stat("/etc/libibverbs.d", &st) == 0 &&
	    mount("trdma-smoke", "/etc/libibverbs.d", "tmpfs", 0, "mode=0755"))
		die("tmpfs on /etc/libibverbs.d");

	make_dir("%s/class", root);
	make_dir("%s/class/infiniband", root);
	make_dir("%s/class/infiniband_verbs", root);
	write_file("6\n", "%s/class/infiniband_verbs/abi_version", root);

	if (stat("/dev/null", &st))
		die("/dev/null");
	add_device("uverbs0", "trdma0", TRDMA_HCA_TYPE, TRDMA_ABI_VERSION,
		   st.st_rdev);
	add_device("uverbs1", "rxe0", NULL, 2, st.st_rdev);
	add_device("uverbs2", "mlx5_0", "MT4119", 1, st.st_rdev);
	add_device("uverbs3", "trdma1", TRDMA_HCA_TYPE, TRDMA_ABI_VERSION + 1,
		   st.st_rdev);
	add_device("uverbs4", "trdmax0", TRDMA_HCA_TYPE "x", TRDMA_ABI_VERSION,
		   st.st_rdev);

	if (setenv("SYSFS_PATH", root, 1))
		die("setenv");
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_device *trdma = NULL;
	struct ibv_context *ctx;
	void *provider;
	int num, ret, i;

	if (argc != 2) {
		fprintf(stderr, "usage: %s /path/to/libtrdma-rdmav34.so\n",
			argv[0]);
		return 2;
	}

	ret = setup_namespace();
	if (ret) {
		cleanup();
		return ret;
	}

	/* The constructor registers the provider with libibverbs. */
	provider = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECK(provider, "dlopen: %s", dlerror());
	if (!provider)
		goto out;

	list = ibv_get_device_list(&num);
	CHECK(list, "ibv_get_device_list: %s", strerror(errno));
	if (!list)
		goto out;

	for (i = 0; i < num; i++) {
		const char *name = ibv_get_device_name(list[i]);

		printf("bound: %s\n", name);
		if (strcmp(name, "trdma0") == 0)
			trdma = list[i];
		else
			CHECK(0, "%s must not be bound to trdma", name);
	}
	CHECK(num == 1, "%d devices bound, want 1", num);
	CHECK(trdma, "trdma0 not bound");

	if (trdma) {
		CHECK(trdma->node_type == IBV_NODE_CA, "node_type %d",
		      trdma->node_type);
		CHECK(trdma->transport_type == IBV_TRANSPORT_IB,
		      "transport_type %d", trdma->transport_type);

		errno = 0;
		ctx = ibv_open_device(trdma);
		CHECK(!ctx && errno == EPROTO,
		      "ibv_open_device: ctx %p errno %d (%s), want NULL/EPROTO",
		      (void *)ctx, errno, strerror(errno));
		if (ctx)
			ibv_close_device(ctx);
	}

	ibv_free_device_list(list);
out:
	cleanup();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
