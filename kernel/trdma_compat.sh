#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Kbuild-time probes of the kernel API trdma.ko is built against (kernel/Kbuild
# runs this with Kbuild's $(srctree)): prints the -D flags that
# kernel/trdma_compat.h turns into one way of doing each thing.  Probes look
# at the headers, never at version numbers, so a distribution kernel with a
# backport gets what its headers say.
inc=$1/include

# create_cq takes the uverbs attribute bundle (6.11) instead of the udata.
if grep -A2 'int (\*create_cq)(' "$inc/rdma/ib_verbs.h" |
	grep -q uverbs_attr_bundle; then
	echo -DTRDMA_CREATE_CQ_ATTRS
fi
# kernel_sendpage() (gone in 6.5: sendmsg with MSG_SPLICE_PAGES replaces
# it; Debian's 6.1 defines MSG_SPLICE_PAGES but its TCP ignores it).
if grep -q '^int kernel_sendpage(' "$inc/linux/net.h"; then
	echo -DTRDMA_HAVE_KERNEL_SENDPAGE
fi
# sk_use_task_frag (6.2, and Debian's 6.1): TCP appends to current's
# task_frag unless it is off; on 6.1 GFP_ATOMIC alone kept it off.
if grep -q 'sk_use_task_frag;' "$inc/net/sock.h"; then
	echo -DTRDMA_HAVE_SK_USE_TASK_FRAG
fi
# IB_DEVICE_ATOMIC_WRITE (6.2): the device flag of RDMA ATOMIC WRITE.
if grep -q 'IB_DEVICE_ATOMIC_WRITE' "$inc/rdma/ib_verbs.h"; then
	echo -DTRDMA_HAVE_DEVICE_ATOMIC_WRITE
fi
# reg_user_mr_dmabuf takes the uverbs attribute bundle (6.11) instead of
# the udata.
if grep -A3 'reg_user_mr_dmabuf)(' "$inc/rdma/ib_verbs.h" |
	grep -q uverbs_attr_bundle; then
	echo -DTRDMA_REG_DMABUF_ATTRS
fi
exit 0
