// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: implicit on-demand paging MRs, ibv_reg_mr(pd, NULL, SIZE_MAX,
 * IBV_ACCESS_ON_DEMAND | ...): one key for the whole user address space of
 * the registering process, [0, TASK_SIZE).
 *
 * ib_core's implicit umem (ib_umem_odp_alloc_implicit()) maps nothing; the
 * pages are in child umems (ib_umem_odp_alloc_child()), one per
 * TRDMA_IMR_CHILD_SIZE-aligned chunk of addresses, each with its own mmu
 * interval notifier.  trdma places bytes with the CPU and has no device
 * translation table to fill, so a child is only what explicit ODP has for a
 * whole MR: a dma_list the lookups read (trdma_mem.c), faulted in and
 * invalidated the same way, under the MR's odp_lock, odp_writers and
 * inv_lo/inv_hi (struct trdma_mr).
 *
 * Chunks of 2 MiB: a child costs 16 bytes of lists per page of its chunk,
 * allocated when it is made, so the chunk bounds what an address touched
 * once costs (8 KiB of lists with 4 KiB pages), while a fault of the
 * receive path (TRDMA_ODP_FAULT_AHEAD) stays inside one child.  A buffer
 * of N bytes uses about N / 2 MiB children and as many interval notifiers
 * of the process.
 *
 * Children are made in process context only (ibv_advise_mr(), the
 * transmitter faulting a source page or a READ's local buffer in, or
 * odp_work for the receive path, which itself only looks children up),
 * and only for a chunk where the process has memory at the faulting
 * address: what a peer holding the rkey can make the kernel allocate is
 * bounded by what the process maps.  They are kept until dereg (a chunk whose memory went
 * away keeps its child, mapping nothing, until then), so a lookup under
 * an MR reference needs no lock and no grace period.
 *
 * Locking: make_mutex serializes the making of children (never taken by
 * an invalidation, so allocating under it is safe); children are stored
 * in the xarray once complete and private set.  The MR's inv_lo/inv_hi
 * describe one invalidation at a time, and children have a umem_mutex
 * each: inv_mutex (taken inside the child's umem_mutex, by
 * trdma_odp_invalidate()) makes their invalidations take turns.
 */
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/xarray.h>
#include <rdma/ib_umem_odp.h>

#include "trdma.h"

#ifdef CONFIG_INFINIBAND_ON_DEMAND_PAGING

struct trdma_imr {
	const struct mmu_interval_notifier_ops *ops;
	struct mm_struct *mm;		/* the root's owning_mm, grabbed */
	struct xarray children;		/* uva >> TRDMA_IMR_CHILD_SHIFT */
	struct mutex make_mutex;	/* making children */
	struct mutex inv_mutex;		/* one child invalidation at a time */
};

/*
 * Makes mr (iova 0, length the end of the user address space) an implicit
 * ODP MR of the calling process; its children get ops.
 */
int trdma_imr_init(struct trdma_mr *mr, struct ib_device *ibdev, int access,
		   const struct mmu_interval_notifier_ops *ops)
{
	struct ib_umem_odp *root;
	struct trdma_imr *imr;

	imr = kzalloc(sizeof(*imr), GFP_KERNEL);
	if (!imr)
		return -ENOMEM;
	root = ib_umem_odp_alloc_implicit(ibdev, access);
	if (IS_ERR(root)) {
		kfree(imr);
		return PTR_ERR(root);
	}
	/* ib_core holds no reference on the root's mm: children need it. */
	imr->mm = root->umem.owning_mm;
	mmgrab(imr->mm);
	imr->ops = ops;
	xa_init(&imr->children);
	mutex_init(&imr->make_mutex);
	mutex_init(&imr->inv_mutex);
	mr->imr = imr;
	mr->odp = root;
	mr->umem = &root->umem;
	return 0;
}

/*
 * At dereg, once no one holds the MR: the children go (each waits for an
 * invalidation of it under way), then what the root needs; the caller
 * releases the root (mr->umem).
 */
void trdma_imr_free(struct trdma_mr *mr)
{
	struct trdma_imr *imr = mr->imr;
	struct ib_umem_odp *child;
	unsigned long idx;

	if (!imr)
		return;
	xa_for_each(&imr->children, idx, child)
		ib_umem_odp_release(child);
	xa_destroy(&imr->children);
	mmdrop(imr->mm);
	kfree(imr);
	mr->imr = NULL;
}

/* The child of mr's chunk holding user address uva, or NULL; any context. */
struct ib_umem_odp *trdma_imr_child(struct trdma_mr *mr, unsigned long uva)
{
	return xa_load(&mr->imr->children, uva >> TRDMA_IMR_CHILD_SHIFT);
}

/*
 * Whether the process has accessible memory at uva (a PROT_NONE
 * reservation does not count: a peer holding the rkey must not make the
 * kernel allocate for address space the process only reserved).  When
 * true, the caller holds a reference on the address space and gives it
 * back with mmput_async(): the child's interval notifier may be the mm's
 * first, and registering one needs a live mm.  The callers may hold a
 * QP's tx_mutex: where the process exited meanwhile and this is the last
 * user of its address space, mmput_async() tears it down elsewhere.
 */
static bool trdma_imr_mapped_get(struct trdma_imr *imr, unsigned long uva)
{
	struct vm_area_struct *vma;
	bool mapped;

	if (!mmget_not_zero(imr->mm))
		return false;
	mmap_read_lock(imr->mm);
	vma = vma_lookup(imr->mm, uva);
	mapped = vma && (vma->vm_flags & (VM_READ | VM_WRITE));
	mmap_read_unlock(imr->mm);
	if (!mapped)
		mmput_async(imr->mm);
	return mapped;
}

/*
 * Where a fault of the receive path from uva to end (pages ahead of the
 * one asked for) stops: at the end of the mapping holding uva, so that it
 * never populates some other mapping of the process.  Process context.
 */
unsigned long trdma_imr_fault_end(struct trdma_mr *mr, unsigned long uva,
				  unsigned long end)
{
	struct trdma_imr *imr = mr->imr;
	struct vm_area_struct *vma;

	if (!mmget_not_zero(imr->mm))
		return end;
	mmap_read_lock(imr->mm);
	vma = vma_lookup(imr->mm, uva);
	if (vma)
		end = min(end, vma->vm_end);
	mmap_read_unlock(imr->mm);
	mmput_async(imr->mm);
	return end;
}

/*
 * The child of mr's chunk holding uva (below the MR's end), made if it is
 * not there yet.  Process context.  ERR_PTR(-EFAULT) when the process has
 * no memory at uva (and there was no child).
 */
struct ib_umem_odp *trdma_imr_child_make(struct trdma_mr *mr,
					 unsigned long uva)
{
	unsigned long idx = uva >> TRDMA_IMR_CHILD_SHIFT;
	struct trdma_imr *imr = mr->imr;
	struct ib_umem_odp *child;
	int rv;

	might_sleep();
	child = xa_load(&imr->children, idx);
	if (child)
		return child;
	if (!trdma_imr_mapped_get(imr, uva))
		return ERR_PTR(-EFAULT);

	mutex_lock(&imr->make_mutex);
	child = xa_load(&imr->children, idx);
	if (child)
		goto out;
	child = ib_umem_odp_alloc_child(mr->odp, idx << TRDMA_IMR_CHILD_SHIFT,
					TRDMA_IMR_CHILD_SIZE, imr->ops);
	if (IS_ERR(child))
		goto out;
	/* Its invalidations (none has anything to unmap yet) find the MR. */
	mutex_lock(&child->umem_mutex);
	child->private = mr;
	mutex_unlock(&child->umem_mutex);
	rv = xa_err(xa_store(&imr->children, idx, child, GFP_KERNEL));
	if (rv) {
		ib_umem_odp_release(child);
		child = ERR_PTR(rv);
		goto out;
	}
	trdma_count(to_tdev(mr->ibmr.device), TRDMA_CNT_ODP_IMR_CHILDREN, 1);
out:
	mutex_unlock(&imr->make_mutex);
	mmput_async(imr->mm);
	return child;
}

/*
 * Around the invalidation of a child of mr (any MR: nothing for one that
 * is not implicit), inside the child's umem_mutex.
 */
void trdma_imr_inv_begin(struct trdma_mr *mr)
{
	if (mr->imr)
		mutex_lock(&mr->imr->inv_mutex);
}

void trdma_imr_inv_end(struct trdma_mr *mr)
{
	if (mr->imr)
		mutex_unlock(&mr->imr->inv_mutex);
}

#endif /* CONFIG_INFINIBAND_ON_DEMAND_PAGING */
