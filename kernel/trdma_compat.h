/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * trdma: the differences between the kernels trdma.ko builds for, in one
 * place.  Each TRDMA_* flag comes from a probe of the kernel's headers at
 * build time (kernel/trdma_compat.sh, run by kernel/Kbuild), never from a
 * version number.
 */
#ifndef _TRDMA_COMPAT_H
#define _TRDMA_COMPAT_H

#include <linux/bvec.h>
#include <linux/highmem.h>
#include <linux/net.h>
#include <linux/socket.h>
#include <linux/uio.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <rdma/uverbs_ioctl.h>

/*
 * ib_device_ops.create_cq: its last argument is the udata, or (6.11 on)
 * the uverbs attribute bundle, NULL for a kernel CQ, whose driver_udata is
 * the udata.  trdma_cq.c implements it with the udata.
 */
int trdma_create_cq_udata(struct ib_cq *ibcq,
			  const struct ib_cq_init_attr *attr,
			  struct ib_udata *udata);

#ifdef TRDMA_CREATE_CQ_ATTRS
static inline int trdma_create_cq(struct ib_cq *ibcq,
				  const struct ib_cq_init_attr *attr,
				  struct uverbs_attr_bundle *attrs)
{
	return trdma_create_cq_udata(ibcq, attr,
				     attrs ? &attrs->driver_udata : NULL);
}
#else
static inline int trdma_create_cq(struct ib_cq *ibcq,
				  const struct ib_cq_init_attr *attr,
				  struct ib_udata *udata)
{
	return trdma_create_cq_udata(ibcq, attr, udata);
}
#endif

/*
 * ib_device_ops.reg_user_mr_dmabuf: its last argument is the udata, or
 * (6.11 on) the uverbs attribute bundle.  trdma_dmabuf.c implements it with
 * the udata.
 */
struct ib_mr *trdma_reg_user_mr_dmabuf_udata(struct ib_pd *ibpd, u64 offset,
					     u64 length, u64 iova, int fd,
					     int access, struct ib_udata *udata);

#ifdef TRDMA_REG_DMABUF_ATTRS
static inline struct ib_mr *
trdma_reg_user_mr_dmabuf(struct ib_pd *ibpd, u64 offset, u64 length, u64 iova,
			 int fd, int access, struct uverbs_attr_bundle *attrs)
{
	return trdma_reg_user_mr_dmabuf_udata(ibpd, offset, length, iova, fd,
					      access,
					      attrs ? &attrs->driver_udata :
						      NULL);
}
#else
static inline struct ib_mr *
trdma_reg_user_mr_dmabuf(struct ib_pd *ibpd, u64 offset, u64 length, u64 iova,
			 int fd, int access, struct ib_udata *udata)
{
	return trdma_reg_user_mr_dmabuf_udata(ibpd, offset, length, iova, fd,
					      access, udata);
}
#endif

/*
 * Hands len bytes of a page to the socket sk without copying them:
 * sendpage where the kernel has it, sendmsg with MSG_SPLICE_PAGES where
 * that replaced it (6.5 on).  A page TCP may not hold a reference to (slab
 * memory of a kernel consumer, !sendpage_ok) is copied instead, as
 * nvme-tcp does.  Process context; locked: the caller owns the socket
 * (lock_sock()), which must be TCP's own (not kTLS's).
 */
static inline int trdma_sendpage(struct sock *sk, bool locked,
				 struct page *page, int offset, size_t len,
				 int flags)
{
	struct socket *sock = sk->sk_socket;

	if (!sendpage_ok(page)) {
		struct msghdr msg = { .msg_flags = flags };
		struct kvec iov;
		void *va = kmap_local_page(page);
		int rv;

		iov.iov_base = va + offset;
		iov.iov_len = len;
		rv = locked ? kernel_sendmsg_locked(sk, &msg, &iov, 1, len) :
			      kernel_sendmsg(sock, &msg, &iov, 1, len);
		kunmap_local(va);
		return rv;
	}
#ifdef TRDMA_HAVE_KERNEL_SENDPAGE
	if (locked)
		return kernel_sendpage_locked(sk, page, offset, len, flags);
	return kernel_sendpage(sock, page, offset, len, flags);
#else
	struct msghdr msg = { .msg_flags = flags | MSG_SPLICE_PAGES };
	struct bio_vec bvec;

	bvec_set_page(&bvec, page, len, offset);
	iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, &bvec, 1, len);
	if (locked)
		return tcp_sendmsg_locked(sk, &msg, len);
	return sock_sendmsg(sock, &msg);
#endif
}

/*
 * TCP copies what is sent into sk_page_frag(): current's task_frag unless
 * the socket says otherwise (sk_use_task_frag, 6.2 on and Debian's 6.1),
 * else, before that, unless sk_allocation is atomic.
 */
static inline void trdma_sk_no_task_frag(struct sock *sk)
{
#ifdef TRDMA_HAVE_SK_USE_TASK_FRAG
	sk->sk_use_task_frag = false;
#endif
}

/*
 * The device capability flag of RDMA ATOMIC WRITE (IB_DEVICE_ATOMIC_WRITE,
 * 6.2 on): 0 where the kernel has none.  User QPs execute atomic writes
 * either way (TRDMA_WR_ATOMIC_WRITE).
 */
#ifdef TRDMA_HAVE_DEVICE_ATOMIC_WRITE
#define TRDMA_DEVICE_ATOMIC_WRITE	IB_DEVICE_ATOMIC_WRITE
#else
#define TRDMA_DEVICE_ATOMIC_WRITE	0
#endif

#endif /* _TRDMA_COMPAT_H */
