/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The ioctls of trdma_test_dmabuf.ko, the lab's test-only dma-buf exporter
 * (/dev/trdma_test_dmabuf).  Shared by the module and tests/lab.
 */
#ifndef TRDMA_TEST_DMABUF_H
#define TRDMA_TEST_DMABUF_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Entries without a struct page (sg_page() NULL): importers must refuse. */
#define TTD_CREATE_NO_PAGES	1u

struct ttd_create {
	__u32 npages;		/* in: buffer size in pages */
	__u32 flags;		/* in: TTD_CREATE_* */
	__s32 fd;		/* out: the dma-buf */
	__u32 pad;
};

struct ttd_rw {
	__s32 fd;		/* a dma-buf of this exporter */
	__u32 pad;
	__u64 offset;
	__u64 len;
	__u64 uaddr;		/* user buffer of len bytes */
};

struct ttd_move {
	__s32 fd;
	__u32 pad;
	__u64 moves;		/* out: moves of this buffer so far */
};

#define TTD_CREATE	_IOWR('T', 0x40, struct ttd_create)
/* Reads / writes the buffer's bytes, under its reservation lock. */
#define TTD_READ	_IOW('T', 0x41, struct ttd_rw)
#define TTD_WRITE	_IOW('T', 0x42, struct ttd_rw)
/*
 * Moves the buffer: under its reservation lock, tells the importers
 * (dma_buf_move_notify), copies the bytes into newly allocated pages and
 * frees the old ones.
 */
#define TTD_MOVE	_IOWR('T', 0x43, struct ttd_move)

#endif
