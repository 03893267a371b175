/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause */
/*
 * trdma kernel <-> provider ABI.
 *
 * Shared verbatim by the kernel module (kernel/) and the rdma-core provider
 * (provider/).  Only fixed-width types, explicit padding, no kernel
 * pointers.  Every incompatible change bumps TRDMA_ABI_VERSION, which the
 * kernel publishes as the uverbs ABI version of each trdma device and which
 * the provider checks on device match and again in the ucontext handshake.
 */
#ifndef _UAPI_RDMA_TRDMA_ABI_H
#define _UAPI_RDMA_TRDMA_ABI_H

#include <linux/types.h>

#define TRDMA_ABI_VERSION	1

/* Value of the "hca_type" sysfs attribute of every trdma ib_device. */
#define TRDMA_HCA_TYPE		"trdma"

/* Provider -> kernel: driver data of the GET_CONTEXT command. */
struct trdma_alloc_ucontext_req {
	__u32 abi_version;	/* TRDMA_ABI_VERSION the provider speaks */
	__u32 reserved;		/* must be zero */
};

/* Kernel -> provider: driver data of the GET_CONTEXT response. */
struct trdma_alloc_ucontext_resp {
	__u32 abi_version;	/* TRDMA_ABI_VERSION the kernel speaks */
	__u32 reserved;
};

#endif /* _UAPI_RDMA_TRDMA_ABI_H */
