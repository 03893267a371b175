// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: protection domains, memory regions, ring memory and its mmap.
 */
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_umem_odp.h>
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
	u32 key_now;

	/*
	 * A key that does not match takes no reference, not even for a
	 * moment: an invalid fast-reg MR (key 0) is never held by a lookup,
	 * whatever keys a peer tries, so its next REG_MR finds it free.
	 */
	rcu_read_lock();
	mr = xa_load(&tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (mr && (READ_ONCE(mr->key) != key ||
		   !refcount_inc_not_zero(&mr->ref)))
		mr = NULL;
	rcu_read_unlock();
	if (!mr)
		return NULL;
	/*
	 * The reference before the key: a REG_MR that does not see this
	 * reference (trdma_fr_reg) has this reader see the key it sets only
	 * after the registration, and the reader of an MR invalidated since
	 * is seen holding its reference.
	 */
	smp_mb__after_atomic();
	/* Pairs with the release of the key in trdma_fr_reg(). */
	key_now = smp_load_acquire(&mr->key);
	if (key_now != key) {
		trdma_mr_put(mr);
		return NULL;
	}
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

	/* Both may change under us: ibv_rereg_mr() in place. */
	if (READ_ONCE(mr->ibmr.pd) != &pd->ibpd ||
	    (READ_ONCE(mr->access) & access) != access)
		return -EACCES;
	if (check_add_overflow(va, len, &end) || va < mr->iova ||
	    end > mr->iova + mr->length)
		return -ERANGE;
	return 0;
}

struct trdma_mr *trdma_mr_alloc(struct ib_pd *ibpd, u64 iova, u64 length,
				int access)
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
	mr->index = index;
	mr->ibmr.lkey = (index << TRDMA_KEY_BITS) | key;
	mr->ibmr.rkey = mr->ibmr.lkey;
	mr->key = mr->ibmr.lkey;
	spin_lock_init(&mr->fr_lock);
	spin_lock_init(&mr->odp_lock);
	init_waitqueue_head(&mr->odp_wq);
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
void trdma_mr_publish(struct trdma_dev *tdev, struct trdma_mr *mr)
{
	xa_store(&tdev->mr_xa, mr->index, mr, GFP_KERNEL);
}

void trdma_mr_free(struct trdma_dev *tdev, struct trdma_mr *mr)
{
	xa_erase(&tdev->mr_xa, mr->index);
	trdma_mr_put(mr);
	wait_for_completion(&mr->released);
	kvfree(mr->pages);
	kfree(mr->fr_map);
	kfree(mr->fr_live);
	trdma_imr_free(mr);
	if (mr->umem)
		ib_umem_release(mr->umem);
	if (mr->dmabuf)
		trdma_dmabuf_release(mr);
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
	u64 pos, addr;

	if (mr->fast) {
		/* trdma_fr_reg checked that fr_live covers [iova, iova + length). */
		pos = (mr->iova & ((1ULL << mr->fr_shift) - 1)) + (va - mr->iova);
		addr = mr->fr_live[pos >> mr->fr_shift] +
		       (pos & ((1ULL << mr->fr_shift) - 1));
		*pg_off = offset_in_page(addr);
		return virt_to_page((void *)(uintptr_t)addr);
	}
	if (!mr->umem) {
		*pg_off = offset_in_page(va);
		return virt_to_page((void *)(uintptr_t)va);
	}
	pos = ib_umem_offset(mr->umem) + (va - mr->iova);
	*pg_off = pos & ~PAGE_MASK;
	return mr->pages[pos >> PAGE_SHIFT];
}

/*
 * On-demand paging (struct trdma_mr says what is under which lock).  There
 * is no DMA device: ib_umem_odp's dma_list entries are kernel addresses of
 * the pages with the ODP_*_ALLOWED_BIT access bits.
 */
#ifdef CONFIG_INFINIBAND_ON_DEMAND_PAGING

/* Largest range one fault of the receive path asks for. */
#define TRDMA_ODP_FAULT_AHEAD	(2UL << 20)
/* Tries of a process-context fault whose page an invalidation took again. */
#define TRDMA_ODP_FAULT_TRIES	64

static u64 trdma_odp_access(struct trdma_mr *mr, bool write)
{
	return ODP_READ_ALLOWED_BIT |
	       (write || mr->odp->umem.writable ? ODP_WRITE_ALLOWED_BIT : 0);
}

/* The user address of MR address va (checked to be inside the MR). */
static unsigned long trdma_odp_uva(struct trdma_mr *mr, u64 va)
{
	return mr->odp->umem.address + (va - mr->iova);
}

/*
 * The umem holding user address uva of mr: the MR's own, or an implicit
 * MR's child, made (process context) with make or looked up (NULL when
 * there is none yet).
 */
static struct ib_umem_odp *trdma_odp_umem(struct trdma_mr *mr,
					  unsigned long uva, bool make)
{
	if (!mr->imr)
		return mr->odp;
	return make ? trdma_imr_child_make(mr, uva) : trdma_imr_child(mr, uva);
}

/*
 * Faults [va, va + len) of mr in (process context): hmm_range_fault()
 * through ib_umem_odp.  0 or -errno (-EFAULT where the process has no
 * memory there).
 */
static int trdma_odp_fault(struct trdma_mr *mr, u64 va, u64 len, bool write)
{
	struct ib_umem_odp *odp = mr->odp;
	unsigned long uva, end;
	int rv;

	if (write && !odp->umem.writable)
		return -EACCES;
	if (va < mr->iova || va - mr->iova >= mr->length)
		return -EFAULT;
	len = min(len, mr->length - (va - mr->iova));
	uva = trdma_odp_uva(mr, va);
	end = uva + len;
	while (uva < end) {
		/* Some pages at a time: umem_mutex is held while they map. */
		unsigned long n = min(end - uva, TRDMA_ODP_FAULT_AHEAD -
				      (uva & (TRDMA_ODP_FAULT_AHEAD - 1)));

		int tries = 3;

		/* Implicit: the piece is inside one child (trdma_odp.c). */
		odp = trdma_odp_umem(mr, uva, true);
		if (IS_ERR(odp))
			return PTR_ERR(odp);
		/* -EBUSY: invalidations kept coming for hmm's timeout. */
		do {
			rv = ib_umem_odp_map_dma_and_lock(odp, uva, n,
							  trdma_odp_access(mr, write),
							  true);
		} while (rv == -EBUSY && --tries);
		if (rv < 0)
			return rv;
		mutex_unlock(&odp->umem_mutex);
		uva += n;
	}
	return 0;
}

/* The receive path's faults, from the workqueue; holds an MR reference. */
static void trdma_odp_work(struct work_struct *work)
{
	struct trdma_mr *mr = container_of(work, struct trdma_mr, odp_work);
	unsigned long lo, hi, flags;
	int rv;

	spin_lock_irqsave(&mr->odp_lock, flags);
	lo = mr->want_lo;
	hi = mr->want_hi;
	mr->want_lo = 0;
	mr->want_hi = 0;
	spin_unlock_irqrestore(&mr->odp_lock, flags);
	/* Implicit: the pages ahead only in the same mapping. */
	if (hi > lo && mr->imr)
		hi = trdma_imr_fault_end(mr, lo, hi);
	if (hi > lo) {
		rv = trdma_odp_fault(mr, lo, hi - lo, true);
		if (rv && rv != -EBUSY) {
			/*
			 * The pages ahead may hold a hole the request never
			 * touches: only the first page, asked for, decides.
			 */
			hi = min_t(unsigned long, hi, lo + PAGE_SIZE -
				   offset_in_page(trdma_odp_uva(mr, lo)));
			rv = trdma_odp_fault(mr, lo, hi - lo, true);
		}
		trdma_count(to_tdev(mr->ibmr.device), TRDMA_CNT_ODP_RX_FAULTS, 1);
		spin_lock_irqsave(&mr->odp_lock, flags);
		/*
		 * Memory that is not there, or not writable (-EACCES,
		 * -EPERM), or an address space that is gone fails the next
		 * try (an access error, not RNR NAKs for ever); only hmm
		 * giving up on a busy range (-EBUSY) is tried again.
		 */
		if (rv && rv != -EBUSY) {
			mr->bad_lo = lo;
			mr->bad_hi = hi;
		} else if (!rv && mr->bad_hi > lo && mr->bad_lo < hi) {
			mr->bad_lo = 0;
			mr->bad_hi = 0;
		}
		spin_unlock_irqrestore(&mr->odp_lock, flags);
	}
	trdma_mr_put(mr);
}

/*
 * The receive path found the page at va missing: asks the work for it and
 * some pages ahead.  -EAGAIN: try again later (RNR); -EFAULT when the last
 * fault of that range failed (the memory is gone: an access error, once).
 * Under odp_lock.
 */
static int trdma_odp_want(struct trdma_mr *mr, u64 va)
{
	u64 end = mr->iova + mr->length;
	u64 hi = va + min_t(u64, end - va, TRDMA_ODP_FAULT_AHEAD);

	lockdep_assert_held(&mr->odp_lock);
	if (va >= mr->bad_lo && va < mr->bad_hi) {
		mr->bad_lo = 0;
		mr->bad_hi = 0;
		return -EFAULT;
	}
	if (mr->want_hi > mr->want_lo) {
		mr->want_lo = min_t(u64, mr->want_lo, va);
		mr->want_hi = max_t(u64, mr->want_hi, hi);
	} else {
		mr->want_lo = va;
		mr->want_hi = hi;
	}
	/* The caller's reference keeps it above zero. */
	refcount_inc(&mr->ref);
	if (!queue_work(trdma_wq, &mr->odp_work))
		refcount_dec(&mr->ref);
	return -EAGAIN;
}

/* The present page holding va, referenced, or NULL. */
static struct page *trdma_odp_page(struct trdma_mr *mr, u64 va, bool write,
				   u32 *pg_off, int *why)
{
	unsigned long uva = trdma_odp_uva(mr, va), flags;
	struct ib_umem_odp *odp = trdma_odp_umem(mr, uva, false);
	struct page *page = NULL;
	dma_addr_t dma = 0;

	*pg_off = offset_in_page(uva);
	spin_lock_irqsave(&mr->odp_lock, flags);
	/* An implicit MR's chunk without a child yet: not present. */
	if (odp)
		dma = READ_ONCE(odp->dma_list[(uva - ib_umem_start(odp)) >>
					      odp->page_shift]);
	if ((dma & (write ? ODP_WRITE_ALLOWED_BIT : ODP_READ_ALLOWED_BIT)) &&
	    !(uva >= mr->inv_lo && uva < mr->inv_hi) &&
	    !(write && mr->inv_hi > mr->inv_lo)) {
		page = virt_to_page((void *)(uintptr_t)(dma & ODP_DMA_ADDR_MASK));
		get_page(page);
		if (write)
			atomic_inc(&mr->odp_writers);
	} else if (why) {
		*why = trdma_odp_want(mr, va);
	}
	spin_unlock_irqrestore(&mr->odp_lock, flags);
	return page;
}

/*
 * Process context: faults the page holding va in and takes it (as
 * trdma_odp_page()) while umem_mutex still keeps invalidations out, so
 * that an invalidation racing the fault (MADV_DONTNEED in a loop) cannot
 * make a page that is mapped look gone.  ERR_PTR(-EFAULT) when the process
 * has no such memory; ERR_PTR(-EAGAIN) only after invalidations of other
 * chunks of an implicit MR kept coming for every try.
 */
static struct page *trdma_odp_fault_get(struct trdma_mr *mr, u64 va,
					bool write, u32 *pg_off)
{
	unsigned long uva = trdma_odp_uva(mr, va);
	struct ib_umem_odp *odp;
	struct page *page;
	int rv, i;

	if (write && !mr->odp->umem.writable)
		return ERR_PTR(-EFAULT);
	for (i = 0; i < TRDMA_ODP_FAULT_TRIES; i++) {
		odp = trdma_odp_umem(mr, uva, true);
		if (IS_ERR(odp))
			return ERR_PTR(-EFAULT);
		rv = ib_umem_odp_map_dma_and_lock(odp, uva, PAGE_SIZE -
						  offset_in_page(uva),
						  trdma_odp_access(mr, write),
						  true);
		if (rv == -EBUSY) {
			cond_resched();
			continue;
		}
		if (rv < 0)
			return ERR_PTR(-EFAULT);
		page = trdma_odp_page(mr, va, write, pg_off, NULL);
		mutex_unlock(&odp->umem_mutex);
		if (page)
			return page;
		/* Another chunk's invalidation holds writers off: again. */
		cond_resched();
	}
	return ERR_PTR(-EAGAIN);
}

static bool trdma_odp_invalidate(struct mmu_interval_notifier *mni,
				 const struct mmu_notifier_range *range,
				 unsigned long cur_seq)
{
	struct ib_umem_odp *odp = container_of(mni, struct ib_umem_odp,
					       notifier);
	struct trdma_mr *mr = odp->private;
	unsigned long lo, hi, flags;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	lo = max(range->start, ib_umem_start(odp));
	hi = min(range->end, ib_umem_end(odp));
	if (mr) {
		/* Children of an implicit MR take turns (trdma_odp.c). */
		trdma_imr_inv_begin(mr);
		spin_lock_irqsave(&mr->odp_lock, flags);
		mr->inv_lo = lo;
		mr->inv_hi = hi;
		spin_unlock_irqrestore(&mr->odp_lock, flags);
		/* Writes into pages taken before are done (see trdma.h). */
		wait_event(mr->odp_wq, !atomic_read(&mr->odp_writers));
	}
	ib_umem_odp_unmap_dma_pages(odp, lo, hi);
	if (mr) {
		spin_lock_irqsave(&mr->odp_lock, flags);
		mr->inv_lo = 0;
		mr->inv_hi = 0;
		spin_unlock_irqrestore(&mr->odp_lock, flags);
		trdma_imr_inv_end(mr);
		trdma_count(to_tdev(mr->ibmr.device), TRDMA_CNT_ODP_INVAL, 1);
	}
	mutex_unlock(&odp->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops trdma_odp_ops = {
	.invalidate = trdma_odp_invalidate,
};

static int trdma_odp_init(struct trdma_mr *mr, struct ib_device *ibdev,
			  u64 start, u64 length, int access)
{
	struct ib_umem_odp *odp;

	if (access & IB_ACCESS_HUGETLB)
		return -EOPNOTSUPP;
	odp = ib_umem_odp_get(ibdev, start, length, access, &trdma_odp_ops);
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	INIT_WORK(&mr->odp_work, trdma_odp_work);
	mutex_lock(&odp->umem_mutex);
	odp->private = mr;
	mutex_unlock(&odp->umem_mutex);
	mr->odp = odp;
	mr->umem = &odp->umem;
	return 0;
}

/*
 * Implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)
 * registers the whole user address space of the process, [0, TASK_SIZE),
 * at iova 0 (trdma_odp.c).
 */
static struct ib_mr *trdma_reg_implicit_mr(struct ib_pd *ibpd, u64 iova,
					   int access)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct trdma_mr *mr;
	int rv;

	/* A fault of the receive path stays inside one child. */
	BUILD_BUG_ON(TRDMA_IMR_CHILD_SIZE % TRDMA_ODP_FAULT_AHEAD);
	if (iova)
		return ERR_PTR(-EINVAL);
	if (access & IB_ACCESS_HUGETLB)
		return ERR_PTR(-EOPNOTSUPP);
	mr = trdma_mr_alloc(ibpd, 0, TASK_SIZE, access);
	if (IS_ERR(mr))
		return ERR_CAST(mr);
	rv = trdma_imr_init(mr, ibpd->device, access, &trdma_odp_ops);
	if (rv) {
		trdma_mr_free(tdev, mr);
		return ERR_PTR(rv);
	}
	INIT_WORK(&mr->odp_work, trdma_odp_work);
	trdma_mr_publish(tdev, mr);
	return &mr->ibmr;
}

#else

static struct page *trdma_odp_page(struct trdma_mr *mr, u64 va, bool write,
				   u32 *pg_off, int *why)
{
	return NULL;
}

static struct page *trdma_odp_fault_get(struct trdma_mr *mr, u64 va,
					bool write, u32 *pg_off)
{
	return ERR_PTR(-EFAULT);
}

static int trdma_odp_fault(struct trdma_mr *mr, u64 va, u64 len, bool write)
{
	return -EOPNOTSUPP;
}

static int trdma_odp_init(struct trdma_mr *mr, struct ib_device *ibdev,
			  u64 start, u64 length, int access)
{
	return -EOPNOTSUPP;
}

static struct ib_mr *trdma_reg_implicit_mr(struct ib_pd *ibpd, u64 iova,
					   int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}

#endif /* CONFIG_INFINIBAND_ON_DEMAND_PAGING */

/*
 * The page of mr holding va (checked to be inside it) for an access that
 * writes it or not, and va's offset in it.  For an ODP or dma-buf MR the
 * page is referenced (drop it with trdma_mr_page_put()) and may have to be
 * faulted in (or the buffer mapped again): with sleep (process context,
 * no spinlock held: the caller says so) here, else (the receive path in
 * softirq, a transmitter holding the socket's spinlock) by odp_work or
 * the dma-buf's work, and then ERR_PTR(-EAGAIN) says to try again later.
 * ERR_PTR(-EFAULT): the memory is not there.
 */
struct page *trdma_mr_page_get(struct trdma_mr *mr, u64 va, bool write,
			       u32 *pg_off, bool sleep)
{
	struct page *page;
	int why = -EAGAIN;

	if (mr->dmabuf)
		return trdma_dmabuf_page_get(mr, va, pg_off, sleep);
	if (!mr->odp)
		return trdma_mr_page(mr, va, pg_off);
	page = trdma_odp_page(mr, va, write, pg_off, sleep ? NULL : &why);
	if (page)
		return page;
	if (!sleep)
		return ERR_PTR(why);
	return trdma_odp_fault_get(mr, va, write, pg_off);
}

/* Ends trdma_mr_page_get() of an access that wrote the page or not. */
void trdma_mr_page_put(struct trdma_mr *mr, struct page *page, bool write)
{
	if (mr->dmabuf)
		trdma_dmabuf_page_put(mr);
	if (!mr->odp)
		return;
	put_page(page);
	/* Full barrier: the write is done before an invalidation sees 0. */
	if (write && atomic_dec_and_test(&mr->odp_writers) &&
	    wq_has_sleeper(&mr->odp_wq))
		wake_up(&mr->odp_wq);
}

/*
 * Faults in the local buffers a READ or atomic response will be placed
 * into, where they are in ODP MRs (maps a dma-buf MR a move unmapped):
 * the receive path in softirq cannot, and would stall until its work has
 * (trdma_rx.c).  The transmitter, when the request goes: it lets go of
 * the socket first where it will fault or map, which may sleep.
 */
void trdma_sqe_prefetch(struct trdma_qp *qp, const struct trdma_sqe *sqe)
{
	u32 i;

	if (sqe->opcode != IB_UVERBS_WR_RDMA_READ &&
	    sqe->opcode != IB_UVERBS_WR_ATOMIC_CMP_AND_SWP &&
	    sqe->opcode != IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD)
		return;
	for (i = 0; i < sqe->num_sge && i < TRDMA_MAX_SGE; i++) {
		const struct trdma_sge *sge = &sqe->sge[i];
		struct trdma_mr *mr;

		if (!sge->length)
			continue;
		mr = trdma_mr_get(qp->tdev, sge->lkey);
		if (!mr)
			continue;
		if (mr->dmabuf)
			trdma_dmabuf_prefetch(qp, mr);
		if (mr->odp && !trdma_mr_check(mr, to_tpd(qp->ibqp.pd),
					       sge->addr, sge->length,
					       IB_ACCESS_LOCAL_WRITE)) {
			trdma_tx_sock_let_go(qp);
			trdma_odp_fault(mr, sge->addr, sge->length, true);
		}
		trdma_mr_put(mr);
	}
}

/*
 * ibv_advise_mr(): PREFETCH and PREFETCH_WRITE fault the ranges of ODP
 * MRs in now (with or without IB_UVERBS_ADVISE_MR_FLAG_FLUSH); for pinned
 * MRs there is nothing to do.  PREFETCH_NO_FAULT is not offered.
 */
int trdma_advise_mr(struct ib_pd *ibpd, enum ib_uverbs_advise_mr_advice advice,
		    u32 flags, struct ib_sge *sg_list, u32 num_sge,
		    struct uverbs_attr_bundle *attrs)
{
	bool write = advice == IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	u32 i;
	int rv = 0;

	if (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE)
		return -EOPNOTSUPP;
	if (flags & ~IB_UVERBS_ADVISE_MR_FLAG_FLUSH)
		return -EOPNOTSUPP;
	for (i = 0; i < num_sge && !rv; i++) {
		struct trdma_mr *mr = trdma_mr_get(tdev, sg_list[i].lkey);

		if (!mr)
			return -EINVAL;
		rv = trdma_mr_check(mr, to_tpd(ibpd), sg_list[i].addr,
				    sg_list[i].length,
				    write ? IB_ACCESS_LOCAL_WRITE : 0);
		if (rv)
			rv = -EINVAL;
		else if (mr->odp && sg_list[i].length)
			rv = trdma_odp_fault(mr, sg_list[i].addr,
					     sg_list[i].length, write);
		trdma_mr_put(mr);
	}
	return rv;
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
			 IB_ACCESS_MW_BIND | IB_ACCESS_RELAXED_ORDERING | \
			 IB_ACCESS_ON_DEMAND)

/* Unknown optional access bits are hints that may be ignored. */
static bool trdma_mr_access_known(int access)
{
	return !(access & ~(TRDMA_MR_ACCESS | IB_ACCESS_OPTIONAL));
}

struct ib_mr *trdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 iova, int access, struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct ib_umem *umem;
	struct trdma_mr *mr;
	int rv;

	if (!trdma_mr_access_known(access))
		return ERR_PTR(-EOPNOTSUPP);
	if ((access & IB_ACCESS_ON_DEMAND) && !start && length == U64_MAX)
		return trdma_reg_implicit_mr(ibpd, iova, access);
	if (!length || length > trdma_limits.max_mr_size)
		return ERR_PTR(-EINVAL);
	if (iova + length < iova)
		return ERR_PTR(-EINVAL);

	mr = trdma_mr_alloc(ibpd, iova, length, access);
	if (IS_ERR(mr))
		return ERR_CAST(mr);

	if (access & IB_ACCESS_ON_DEMAND) {
		rv = trdma_odp_init(mr, ibpd->device, start, length, access);
		if (rv) {
			trdma_mr_free(tdev, mr);
			return ERR_PTR(rv);
		}
		trdma_mr_publish(tdev, mr);
		return &mr->ibmr;
	}
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

/*
 * Marks mr dying, so no window binds to it any more; -EBUSY while a window
 * is bound to it.
 */
static int trdma_mr_kill(struct trdma_mr *mr)
{
	unsigned long flags;
	bool busy;

	spin_lock_irqsave(&mr->fr_lock, flags);
	busy = mr->num_mw;
	if (!busy)
		mr->dying = true;
	spin_unlock_irqrestore(&mr->fr_lock, flags);
	return busy ? -EBUSY : 0;
}

/*
 * ibv_rereg_mr().  A change of PD or of access alone is made in place,
 * under the MR's fr_lock, and the keys stay: lookups read the PD and the
 * rights once (trdma_mr_check(), trdma_mw_reserve()), so a request sees
 * the old registration or the new one.  A new translation, both changes
 * at once (a reader could see the new PD with the old rights), or rights
 * to write memory pinned read-only make a new MR under new keys: ib_core
 * puts it in the old one's place and deregisters the old one as
 * ibv_dereg_mr() would (its keys fail from then on, a READ response read
 * from it segment by segment is cut off).  The caller (ib_core) holds the
 * MR's uobject for write: no dereg or other rereg of it runs meanwhile.  A
 * bound window refuses a rereg with -EBUSY, as it refuses ibv_dereg_mr();
 * for a new MR the old one is marked dying first so that no window binds
 * in between, and revived when the new registration fails.
 */
struct ib_mr *trdma_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				  u64 length, u64 iova, int access,
				  struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct trdma_mr *old = to_tmr(ibmr);
	unsigned long irqflags;
	struct ib_mr *new;
	int rv;

	if (old->dmabuf)
		return ERR_PTR(-EOPNOTSUPP);
	/* Only user MRs come through uverbs; be sure of it anyway. */
	if (!old->umem || old->fast || old->mw_type)
		return ERR_PTR(-EINVAL);
	if ((flags & IB_MR_REREG_ACCESS) && !trdma_mr_access_known(access))
		return ERR_PTR(-EOPNOTSUPP);
	if (!(flags & IB_MR_REREG_ACCESS))
		access = old->access;
	if (!(flags & IB_MR_REREG_PD))
		ibpd = ibmr->pd;

	if (!(flags & IB_MR_REREG_TRANS) &&
	    (flags & (IB_MR_REREG_PD | IB_MR_REREG_ACCESS)) !=
	    (IB_MR_REREG_PD | IB_MR_REREG_ACCESS) &&
	    !((access ^ old->access) & IB_ACCESS_ON_DEMAND) &&
	    (old->umem->writable || !ib_access_writable(access))) {
		rv = 0;
		spin_lock_irqsave(&old->fr_lock, irqflags);
		if (old->num_mw) {
			rv = -EBUSY;
		} else {
			WRITE_ONCE(old->access, access);
			WRITE_ONCE(ibmr->pd, ibpd);
		}
		spin_unlock_irqrestore(&old->fr_lock, irqflags);
		return rv ? ERR_PTR(rv) : NULL;
	}

	if (!(flags & IB_MR_REREG_TRANS)) {
		start = old->umem->address;
		length = old->length;
		iova = old->iova;
		/* An implicit MR stays implicit. */
		if (old->imr)
			length = U64_MAX;
	}
	rv = trdma_mr_kill(old);
	if (rv)
		return ERR_PTR(rv);
	new = trdma_reg_user_mr(ibpd, start, length, iova, access, udata);
	if (IS_ERR(new)) {
		spin_lock_irqsave(&old->fr_lock, irqflags);
		old->dying = false;
		spin_unlock_irqrestore(&old->fr_lock, irqflags);
	}
	return new;
}

/* Refused with -EBUSY while a memory window is bound to the MR. */
int trdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct trdma_mr *mr = to_tmr(ibmr);
	int rv;

	rv = trdma_mr_kill(mr);
	if (rv)
		return rv;
	trdma_mr_free(to_tdev(ibmr->device), mr);
	return 0;
}

#define TRDMA_REMOTE_ACCESS (IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE | \
			     IB_ACCESS_REMOTE_ATOMIC)

/*
 * Memory windows (type 1 and type 2B).  A window is a trdma_mr in mr_xa
 * that trdma_mr_get() never returns (struct trdma_mr says how); its rkey
 * is resolved by trdma_rkey_get() only.  Windows count against max_mr.
 *
 * Locking: a window's state is under its fr_lock, an MR's num_mw and
 * dying under the MR's fr_lock; no path holds both.  A bind reserves its
 * MR (num_mw, a reference) before it takes the window's lock, and the MR
 * a window leaves is released after the window's lock is dropped.
 */
int trdma_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct trdma_mw *mw = to_tmw(ibmw);
	struct trdma_mr *w;

	if (ibmw->type != IB_MW_TYPE_1 && ibmw->type != IB_MW_TYPE_2)
		return -EINVAL;
	w = trdma_mr_alloc(ibmw->pd, 0, 0, 0);
	if (IS_ERR(w))
		return PTR_ERR(w);
	/* No key finds it as an MR; mw_key 0: unbound (type 2: free). */
	w->key = 0;
	w->mw_type = ibmw->type;
	w->ibmr.pd = ibmw->pd;
	ibmw->rkey = w->ibmr.rkey;
	mw->m = w;
	trdma_mr_publish(to_tdev(ibmw->device), w);
	return 0;
}

/*
 * Takes mr for a window of pd with remote rights access: one more bound
 * window.  The MR's PD and rights are checked here, under its fr_lock,
 * because ibv_rereg_mr() changes them in place under that lock.
 */
static bool trdma_mw_reserve(struct trdma_mr *mr, struct trdma_pd *pd,
			     int access)
{
	unsigned long flags;
	bool ok;

	spin_lock_irqsave(&mr->fr_lock, flags);
	ok = !mr->dying && mr->ibmr.pd == &pd->ibpd &&
	     (mr->access & IB_ACCESS_MW_BIND) &&
	     (!(access & (IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC)) ||
	      (mr->access & IB_ACCESS_LOCAL_WRITE));
	if (ok)
		mr->num_mw++;
	spin_unlock_irqrestore(&mr->fr_lock, flags);
	return ok;
}

/* Gives back what trdma_mw_reserve() took, and the lookup's reference. */
static void trdma_mw_release(struct trdma_mr *mr)
{
	unsigned long flags;

	spin_lock_irqsave(&mr->fr_lock, flags);
	mr->num_mw--;
	spin_unlock_irqrestore(&mr->fr_lock, flags);
	trdma_mr_put(mr);
}

/* Unbinds window w for good; its MR is then free to go. */
int trdma_dealloc_mw(struct ib_mw *ibmw)
{
	struct trdma_mr *w = to_tmw(ibmw)->m;
	struct trdma_mr *old;
	unsigned long flags;

	spin_lock_irqsave(&w->fr_lock, flags);
	old = w->mw_mr;
	w->mw_mr = NULL;
	w->mw_key = 0;
	/* No bind after this one. */
	w->dying = true;
	spin_unlock_irqrestore(&w->fr_lock, flags);
	if (old)
		trdma_mw_release(old);
	/* Lookups under RCU may still lock w: it is freed after a grace. */
	trdma_mr_free(to_tdev(ibmw->device), w);
	return 0;
}

/*
 * The MR an rkey names, referenced, if key lets qp access [va, va + len)
 * with access; NULL otherwise.  key may be an MR's key or, for remote
 * access, a bound window's rkey: then the window's PD, QP (type 2), rights
 * and range are checked, and the MR the window is bound to is returned.
 */
struct trdma_mr *trdma_rkey_get(struct trdma_qp *qp, u32 key, u64 va,
				u64 len, int access)
{
	struct trdma_pd *pd = to_tpd(qp->ibqp.pd);
	struct trdma_mr *mr, *w;
	unsigned long flags;
	u64 end;

	mr = trdma_mr_get(qp->tdev, key);
	if (mr) {
		if (!trdma_mr_check(mr, pd, va, len, access))
			return mr;
		trdma_mr_put(mr);
		return NULL;
	}
	if (!(access & TRDMA_REMOTE_ACCESS) || !key)
		return NULL;

	rcu_read_lock();
	w = xa_load(&qp->tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (w && w->mw_type) {
		spin_lock_irqsave(&w->fr_lock, flags);
		if (w->mw_key == key && w->mw_mr &&
		    (w->mw_type == IB_MW_TYPE_1 ||
		     w->mw_qp_uid == qp->uid) &&
		    w->ibmr.pd == &pd->ibpd &&
		    (w->access & access) == access &&
		    !check_add_overflow(va, len, &end) &&
		    va >= w->iova && end <= w->iova + w->length) {
			/* Held by the window: alive. */
			mr = w->mw_mr;
			refcount_inc(&mr->ref);
		}
		spin_unlock_irqrestore(&w->fr_lock, flags);
	}
	rcu_read_unlock();
	return mr;
}

/*
 * A BIND_MW send WQE (the kernel's copy, see struct trdma_sqe_bind) of a
 * user QP, at the send queue's intake, under qp->lock.  The rules of the
 * IB spec: the window, the MR and the QP share one PD (C10-72); the MR
 * allows binding (C10-73) and local write if the window allows remote
 * write or atomics (C10-74); the window lies inside the MR (C10-75); a
 * type-2 window is bound only when free (o10-37.2.30) and to a non-empty
 * range (o10-37.2.40), and only its QP reaches it.  Zero-based windows
 * are not offered.  Returns the completion status.
 */
enum ib_wc_status trdma_mw_bind(struct trdma_qp *qp,
				const struct trdma_sqe *sqe)
{
	struct trdma_pd *pd = to_tpd(qp->ibqp.pd);
	u32 key = sqe->rkey, new_key = sqe->imm_data;
	u64 va = sqe->remote_addr, len = sqe->compare_add, end;
	int access = sqe->bind.mw_access;
	struct trdma_mr *w, *mr = NULL, *old = NULL;
	enum ib_wc_status st = IB_WC_MW_BIND_ERR;
	unsigned long flags;

	/* The same window under a new key byte; no zero-based window. */
	if ((new_key >> TRDMA_KEY_BITS) != (key >> TRDMA_KEY_BITS) ||
	    !(key >> TRDMA_KEY_BITS) ||
	    (u32)access & ~(u32)(TRDMA_REMOTE_ACCESS | IB_ACCESS_LOCAL_WRITE))
		return IB_WC_MW_BIND_ERR;
	access &= TRDMA_REMOTE_ACCESS;

	if (len) {
		mr = trdma_mr_get(qp->tdev, sqe->bind.mr_lkey);
		if (!mr)
			return IB_WC_MW_BIND_ERR;
		if (mr->fast || !mr->umem ||
		    check_add_overflow(va, len, &end) || va < mr->iova ||
		    end > mr->iova + mr->length) {
			trdma_mr_put(mr);
			return IB_WC_MW_BIND_ERR;
		}
		if (!trdma_mw_reserve(mr, pd, access)) {
			trdma_mr_put(mr);
			return IB_WC_MW_BIND_ERR;
		}
	}

	rcu_read_lock();
	w = xa_load(&qp->tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (!w || !w->mw_type || w->ibmr.pd != &pd->ibpd)
		goto out_rcu;
	spin_lock_irqsave(&w->fr_lock, flags);
	if (w->dying || w->ibmr.rkey != key)
		goto out_unlock;
	if (w->mw_type == IB_MW_TYPE_2 && (!mr || w->mw_mr))
		goto out_unlock;
	old = w->mw_mr;
	w->mw_mr = mr;
	mr = NULL;
	w->iova = va;
	w->length = len;
	w->access = access;
	w->mw_qp_uid = qp->uid;
	w->ibmr.rkey = new_key;
	w->mw_key = w->mw_mr ? new_key : 0;
	st = IB_WC_SUCCESS;
out_unlock:
	spin_unlock_irqrestore(&w->fr_lock, flags);
out_rcu:
	rcu_read_unlock();
	if (mr)
		trdma_mw_release(mr);
	if (old)
		trdma_mw_release(old);
	if (st == IB_WC_SUCCESS)
		trdma_count(qp->tdev, TRDMA_CNT_MW_BIND, 1);
	return st;
}

/*
 * Invalidates the type-2 window key names (of the QP's PD; for a remote
 * invalidation, bound to this QP): LOCAL_INV or a peer's SEND_WITH_INV.
 * Returns 0, -EACCES, or -ENOENT when key names no window.
 */
static int trdma_mw_inv(struct trdma_qp *qp, u32 key, bool remote)
{
	struct trdma_mr *w, *old = NULL;
	unsigned long flags;
	int rv = -ENOENT;

	rcu_read_lock();
	w = xa_load(&qp->tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (w && w->mw_type) {
		rv = -EACCES;
		spin_lock_irqsave(&w->fr_lock, flags);
		/* A type-1 window is invalidated by a bind only. */
		if (w->mw_type == IB_MW_TYPE_2 && key && w->mw_key == key &&
		    w->ibmr.pd == qp->ibqp.pd &&
		    (!remote || w->mw_qp_uid == qp->uid)) {
			old = w->mw_mr;
			w->mw_mr = NULL;
			w->mw_key = 0;
			rv = 0;
		}
		spin_unlock_irqrestore(&w->fr_lock, flags);
	}
	rcu_read_unlock();
	if (old) {
		trdma_mw_release(old);
		trdma_count(qp->tdev, TRDMA_CNT_MW_INV, 1);
	}
	return rv;
}

/*
 * Memory management extensions: fast-registration MRs for kernel
 * consumers.  alloc_mr makes an invalid MR with room for max_num_sg pages,
 * map_mr_sg lists the pages of a scatterlist in it, IB_WR_REG_MR (in SQ
 * order, at the send queue's intake) makes it valid with a key and rights,
 * and IB_WR_LOCAL_INV or a peer's SEND_WITH_INV makes it invalid again.
 */
struct ib_mr *trdma_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type,
			     u32 max_num_sg)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct trdma_mr *mr;

	/* No integrity (signature) or SG_GAPS MRs. */
	if (type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > TRDMA_MAX_FR_PAGES)
		return ERR_PTR(-EINVAL);

	mr = trdma_mr_alloc(ibpd, 0, 0, 0);
	if (IS_ERR(mr))
		return ERR_CAST(mr);
	mr->fast = true;
	mr->max_pages = max_num_sg;
	mr->fr_shift = PAGE_SHIFT;
	/* Invalid until a REG_MR: no key finds it. */
	mr->key = 0;
	mr->ibmr.iova = 0;
	mr->ibmr.length = 0;
	mr->fr_map = kcalloc(max_num_sg, sizeof(u64), GFP_KERNEL);
	mr->fr_live = kcalloc(max_num_sg, sizeof(u64), GFP_KERNEL);
	if (!mr->fr_map || !mr->fr_live) {
		trdma_mr_free(tdev, mr);
		return ERR_PTR(-ENOMEM);
	}
	trdma_mr_publish(tdev, mr);
	return &mr->ibmr;
}

static int trdma_fr_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct trdma_mr *mr = to_tmr(ibmr);

	if (mr->fr_nmap >= mr->max_pages)
		return -ENOMEM;
	mr->fr_map[mr->fr_nmap++] = addr;
	return 0;
}

/*
 * Lists the blocks of sg in the MR's page list (fr_map) and sets ibmr's
 * iova and length; the registration in effect (fr_live) is untouched until
 * the next REG_MR.  Returns how many sg entries were mapped.
 */
int trdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset)
{
	struct trdma_mr *mr = to_tmr(ibmr);

	if (!mr->fast)
		return -EINVAL;
	mr->fr_nmap = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, trdma_fr_set_page);
}

/*
 * The fast-reg MR key's index names, referenced, whatever its state; with
 * valid, only while key is its current key (a peer's SEND_WITH_INV, which
 * may not take a reference to an MR it cannot name).
 */
static struct trdma_mr *trdma_fr_get(struct trdma_qp *qp, u32 key, bool valid)
{
	struct trdma_mr *mr;

	rcu_read_lock();
	mr = xa_load(&qp->tdev->mr_xa, key >> TRDMA_KEY_BITS);
	if (mr && ((valid && READ_ONCE(mr->key) != key) ||
		   !refcount_inc_not_zero(&mr->ref)))
		mr = NULL;
	rcu_read_unlock();
	if (mr && (!mr->fast || mr->ibmr.pd != qp->ibqp.pd)) {
		trdma_mr_put(mr);
		mr = NULL;
	}
	return mr;
}

#define TRDMA_FR_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			 IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

/*
 * IB_WR_REG_MR of a kernel QP: makes the fast-reg MR key's index names
 * (of the QP's PD) valid under key, with access, for the pages map_mr_sg
 * listed.  The MR must be invalid and held by no one but us: then no
 * reader sees the registration change (trdma_mr_get).  Under qp->lock.
 * Returns the completion status.
 */
enum ib_wc_status trdma_fr_reg(struct trdma_qp *qp, u32 key, int access)
{
	enum ib_wc_status st = IB_WC_LOC_PROT_ERR;
	struct trdma_mr *mr = trdma_fr_get(qp, key, false);
	u32 shift, nmap;
	u64 iova, len;

	if (!mr)
		return IB_WC_LOC_PROT_ERR;
	iova = mr->ibmr.iova;
	len = mr->ibmr.length;
	nmap = mr->fr_nmap;
	if (access & ~(TRDMA_FR_ACCESS | IB_ACCESS_OPTIONAL) ||
	    !is_power_of_2(mr->ibmr.page_size) ||
	    mr->ibmr.page_size < PAGE_SIZE || nmap > mr->max_pages) {
		st = IB_WC_LOC_QP_OP_ERR;
		goto out;
	}
	shift = ilog2(mr->ibmr.page_size);
	/* The listed blocks must cover the region, wherever it starts. */
	if (!len || len > trdma_limits.max_mr_size || iova + len < iova ||
	    (iova & (mr->ibmr.page_size - 1)) + len > (u64)nmap << shift)
		goto out;

	spin_lock(&mr->fr_lock);
	if (READ_ONCE(mr->key)) {
		/* Still valid: REG_MR needs an invalidated MR. */
		spin_unlock(&mr->fr_lock);
		goto out;
	}
	/* Pairs with trdma_mr_get(): the key's clearing, then references. */
	smp_mb();
	/* Ours and the MR's own: no reader holds it. */
	if (refcount_read(&mr->ref) != 2) {
		spin_unlock(&mr->fr_lock);
		goto out;
	}
	memcpy(mr->fr_live, mr->fr_map, nmap * sizeof(u64));
	mr->fr_shift = shift;
	mr->iova = iova;
	mr->length = len;
	mr->access = access & TRDMA_FR_ACCESS;
	mr->reg_key = key;
	/* The registration before the key that makes it visible. */
	smp_store_release(&mr->key, key);
	spin_unlock(&mr->fr_lock);
	trdma_count(qp->tdev, TRDMA_CNT_FAST_REG, 1);
	st = IB_WC_SUCCESS;
out:
	trdma_mr_put(mr);
	return st;
}

/*
 * Invalidates the fast-reg MR key names (of the QP's PD): IB_WR_LOCAL_INV,
 * or, remote, the IETH of a SEND_WITH_INV, which may only name an MR that
 * allows remote access.  Invalidating an invalid MR under the key of its
 * last registration is no error.  Returns 0 or -EACCES.
 */
int trdma_fr_inv(struct trdma_qp *qp, u32 key, bool remote)
{
	struct trdma_mr *mr;
	unsigned long flags;
	int rv;

	/* A window's rkey: the window's rules. */
	rv = trdma_mw_inv(qp, key, remote);
	if (rv != -ENOENT)
		return rv;
	/*
	 * A user's LOCAL_INV names windows only: its lookup below would take
	 * a reference to whatever MR the index names, which could make a
	 * kernel consumer's REG_MR fail.
	 */
	if (qp->is_user && !remote)
		return -EACCES;
	rv = -EACCES;
	mr = trdma_fr_get(qp, key, remote);
	if (!mr)
		return -EACCES;
	spin_lock_irqsave(&mr->fr_lock, flags);
	if (mr->reg_key == key && READ_ONCE(mr->key) != key && !remote) {
		rv = 0;
	} else if (READ_ONCE(mr->key) == key &&
		   (!remote || mr->access & (IB_ACCESS_REMOTE_READ |
					     IB_ACCESS_REMOTE_WRITE |
					     IB_ACCESS_REMOTE_ATOMIC))) {
		WRITE_ONCE(mr->key, 0);
		rv = 0;
	}
	spin_unlock_irqrestore(&mr->fr_lock, flags);
	trdma_mr_put(mr);
	if (!rv)
		trdma_count(qp->tdev, remote ? TRDMA_CNT_REMOTE_INV :
					       TRDMA_CNT_LOCAL_INV, 1);
	return rv;
}
