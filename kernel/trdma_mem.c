// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: protection domains, memory regions, ring memory and its mmap.
 */
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <rdma/ib_umem.h>
#include <rdma/uverbs_ioctl.h>

#include "trdma.h"
#include "trdma_verbs.h"

/* Takes one of max slots of a per-device object count. */
bool trdma_count_get(atomic_t *count, unsigned int max)
{
	return atomic_add_unless(count, 1, max);
}

/*
 * Ring memory.  num_slots is a power of two; the control block is followed
 * by the slots.  With a user context the memory is offered for mmap through
 * an rdma_user_mmap_entry whose key is returned in *mmap_key.
 */
int trdma_ring_alloc(struct trdma_ring *r, struct ib_ucontext *uctx,
		     u32 num_slots, u32 slot_shift, u64 *mmap_key)
{
	size_t size = TRDMA_RING_SLOTS_OFFSET +
		      ((size_t)num_slots << slot_shift);
	struct trdma_mmap_entry *entry;
	void *vaddr;
	int rv;

	BUILD_BUG_ON(sizeof(struct trdma_ring_ctrl) != TRDMA_RING_SLOTS_OFFSET);

	size = PAGE_ALIGN(size);
	vaddr = uctx ? vmalloc_user(size) : vzalloc(size);
	if (!vaddr)
		return -ENOMEM;

	r->ctrl = vaddr;
	r->slots = vaddr + TRDMA_RING_SLOTS_OFFSET;
	r->num_slots = num_slots;
	r->slot_shift = slot_shift;
	r->mmap = NULL;
	if (!uctx)
		return 0;

	entry = kzalloc(sizeof(*entry), GFP_KERNEL);
	if (!entry) {
		rv = -ENOMEM;
		goto err_free;
	}
	entry->vaddr = vaddr;
	entry->size = size;
	rv = rdma_user_mmap_entry_insert(uctx, &entry->rdma, size);
	if (rv) {
		kfree(entry);
		goto err_free;
	}
	r->mmap = &entry->rdma;
	*mmap_key = rdma_user_mmap_get_offset(r->mmap);
	return 0;

err_free:
	vfree(vaddr);
	r->ctrl = NULL;
	return rv;
}

/*
 * Called when the ring's object goes away.  A mapped user ring stays valid
 * until its last mapping is gone (trdma_mmap_free); the kernel no longer
 * touches it.
 */
void trdma_ring_free(struct trdma_ring *r)
{
	if (!r->ctrl)
		return;
	if (r->mmap)
		rdma_user_mmap_entry_remove(r->mmap);
	else
		vfree(r->ctrl);
	r->ctrl = NULL;
	r->mmap = NULL;
}

int trdma_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rdma;
	struct trdma_mmap_entry *entry;
	int rv;

	rdma = rdma_user_mmap_entry_get(uctx, vma);
	if (!rdma)
		return -EINVAL;
	entry = to_tmmap(rdma);

	if (vma->vm_end - vma->vm_start > entry->size) {
		rv = -EINVAL;
		goto out;
	}
	rv = remap_vmalloc_range(vma, entry->vaddr, 0);
out:
	rdma_user_mmap_entry_put(rdma);
	return rv;
}

void trdma_mmap_free(struct rdma_user_mmap_entry *rdma)
{
	struct trdma_mmap_entry *entry = to_tmmap(rdma);

	vfree(entry->vaddr);
	kfree(entry);
}

int trdma_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);

	if (!trdma_count_get(&tdev->counts.pd, trdma_limits.max_pd))
		return -ENOMEM;
	return 0;
}

int trdma_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	atomic_dec(&to_tdev(ibpd->device)->counts.pd);
	return 0;
}

/*
 * Takes a reference on the MR a key names, or returns NULL when no MR has
 * that key (never registered, deregistered, or a stale key byte).
 */
struct trdma_mr *trdma_mr_get(struct trdma_dev *tdev, u32 key)
{
	struct trdma_mr *mr;

	rcu_read_lock();
	mr = xa_load(&tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (mr && (mr->ibmr.lkey != key || !refcount_inc_not_zero(&mr->ref)))
		mr = NULL;
	rcu_read_unlock();
	return mr;
}

void trdma_mr_put(struct trdma_mr *mr)
{
	if (refcount_dec_and_test(&mr->ref))
		complete(&mr->released);
}

/*
 * Checks an access to [va, va + len) through mr on behalf of pd.  Returns 0,
 * -EACCES for a PD or rights mismatch, or -ERANGE when the range is not
 * inside the region.
 */
int trdma_mr_check(struct trdma_mr *mr, struct trdma_pd *pd, u64 va,
		   u64 len, int access)
{
	u64 end;

	if (mr->ibmr.pd != &pd->ibpd || (mr->access & access) != access)
		return -EACCES;
	if (check_add_overflow(va, len, &end) || va < mr->iova ||
	    end > mr->iova + mr->length)
		return -ERANGE;
	return 0;
}

static struct trdma_mr *trdma_mr_alloc(struct ib_pd *ibpd, u64 iova,
				       u64 length, int access)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct trdma_mr *mr;
	u32 index, key;
	int rv;

	if (!trdma_count_get(&tdev->counts.mr, trdma_limits.max_mr))
		return ERR_PTR(-ENOMEM);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr) {
		rv = -ENOMEM;
		goto err_count;
	}
	mr->iova = iova;
	mr->length = length;
	mr->access = access;
	refcount_set(&mr->ref, 1);
	init_completion(&mr->released);

	rv = xa_alloc_cyclic(&tdev->mr_xa, &index, NULL,
			     XA_LIMIT(1, TRDMA_MAX_MR_INDEX), &tdev->mr_next,
			     GFP_KERNEL);
	if (rv < 0)
		goto err_free;

	/* A new key byte on every registration, so stale keys fail. */
	key = (u32)atomic_inc_return(&tdev->mr_key) & TRDMA_KEY_MASK;
	mr->ibmr.lkey = (index << TRDMA_KEY_BITS) | key;
	mr->ibmr.rkey = mr->ibmr.lkey;
	mr->ibmr.iova = iova;
	mr->ibmr.length = length;
	return mr;

err_free:
	kfree(mr);
err_count:
	atomic_dec(&tdev->counts.mr);
	return ERR_PTR(rv);
}

/* Makes the MR's key valid; after this, lookups can find it. */
static void trdma_mr_publish(struct trdma_dev *tdev, struct trdma_mr *mr)
{
	xa_store(&tdev->mr_xa, mr->ibmr.lkey >> TRDMA_KEY_BITS, mr, GFP_KERNEL);
}

static void trdma_mr_free(struct trdma_dev *tdev, struct trdma_mr *mr)
{
	xa_erase(&tdev->mr_xa, mr->ibmr.lkey >> TRDMA_KEY_BITS);
	trdma_mr_put(mr);
	wait_for_completion(&mr->released);
	kvfree(mr->pages);
	if (mr->umem)
		ib_umem_release(mr->umem);
	atomic_dec(&tdev->counts.mr);
	kfree_rcu(mr, rcu);
}

/* Collects the pinned pages of a user MR, so placement finds them in O(1). */
static int trdma_mr_map_pages(struct trdma_mr *mr)
{
	struct sg_page_iter it;
	u32 i = 0;

	mr->npages = ib_umem_num_pages(mr->umem);
	mr->pages = kvmalloc_array(mr->npages, sizeof(*mr->pages), GFP_KERNEL);
	if (!mr->pages)
		return -ENOMEM;
	for_each_sgtable_page(&mr->umem->sgt_append.sgt, &it, 0) {
		if (i == mr->npages)
			break;
		mr->pages[i++] = sg_page_iter_page(&it);
	}
	return i == mr->npages ? 0 : -EFAULT;
}

/*
 * The page holding address va of the MR and va's offset in it.  The caller
 * has checked that va is inside the MR.  For the DMA MR, va is a kernel
 * address in the linear map.
 */
struct page *trdma_mr_page(struct trdma_mr *mr, u64 va, u32 *pg_off)
{
	u64 pos;

	if (!mr->umem) {
		*pg_off = offset_in_page(va);
		return virt_to_page((void *)(uintptr_t)va);
	}
	pos = ib_umem_offset(mr->umem) + (va - mr->iova);
	*pg_off = pos & ~PAGE_MASK;
	return mr->pages[pos >> PAGE_SHIFT];
}

struct ib_mr *trdma_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct trdma_mr *mr;

	mr = trdma_mr_alloc(ibpd, 0, U64_MAX, access);
	if (IS_ERR(mr))
		return ERR_CAST(mr);
	trdma_mr_publish(to_tdev(ibpd->device), mr);
	return &mr->ibmr;
}

#define TRDMA_MR_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			 IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC | \
			 IB_ACCESS_RELAXED_ORDERING)

struct ib_mr *trdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 iova, int access, struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct ib_umem *umem;
	struct trdma_mr *mr;
	int rv;

	/* Unknown optional access bits are hints that may be ignored. */
	if (access & ~(TRDMA_MR_ACCESS | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || length > trdma_limits.max_mr_size)
		return ERR_PTR(-EINVAL);
	if (iova + length < iova)
		return ERR_PTR(-EINVAL);

	mr = trdma_mr_alloc(ibpd, iova, length, access);
	if (IS_ERR(mr))
		return ERR_CAST(mr);

	umem = ib_umem_get(ibpd->device, start, length, access);
	if (IS_ERR(umem)) {
		trdma_mr_free(tdev, mr);
		return ERR_CAST(umem);
	}
	mr->umem = umem;
	rv = trdma_mr_map_pages(mr);
	if (rv) {
		trdma_mr_free(tdev, mr);
		return ERR_PTR(rv);
	}
	trdma_mr_publish(tdev, mr);
	return &mr->ibmr;
}

int trdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	trdma_mr_free(to_tdev(ibmr->device), to_tmr(ibmr));
	return 0;
}
