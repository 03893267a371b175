/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
#ifndef _TRDMA_VERBS_H
#define _TRDMA_VERBS_H

#include <rdma/ib_verbs.h>

int trdma_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		       struct ib_udata *udata);
int trdma_query_port(struct ib_device *ibdev, u32 port,
		     struct ib_port_attr *attr);
int trdma_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey);
int trdma_get_port_immutable(struct ib_device *ibdev, u32 port,
			     struct ib_port_immutable *immutable);
enum rdma_link_layer trdma_get_link_layer(struct ib_device *ibdev, u32 port);
void trdma_get_dev_fw_str(struct ib_device *ibdev, char *str);
int trdma_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata);
void trdma_dealloc_ucontext(struct ib_ucontext *ibuctx);

#endif /* _TRDMA_VERBS_H */
