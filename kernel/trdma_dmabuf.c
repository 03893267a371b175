// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: memory regions of dma-bufs (ibv_reg_dmabuf_mr).
 *
 * trdma places bytes with the CPU, so it needs the pages of a buffer, not
 * its DMA addresses: it attaches to the dma-buf as a dynamic importer (with
 * move_notify), maps the attachment and takes the struct page of every
 * page of the MR's range from the sg_table.  A buffer whose entries have
 * no struct page (device memory, a debug kernel's mangled sg_page) or are
 * not whole pages is refused with -EOPNOTSUPP.  The attachment's device is
 * one of trdma's own, with a 64-bit DMA mask and no DMA ops, so that an
 * exporter's dma_map_sgtable() succeeds; the addresses are never used.
 *
 * The mapping (struct trdma_dmabuf) is valid from a map to the exporter's
 * move_notify, which runs under the dma-buf's reservation lock: it makes
 * the mapping invalid under db->lock, waits until no reader or writer that
 * took a page before holds one (db->users; they only copy, never sleep on
 * anything move_notify holds), and unmaps.  So no byte is read from or
 * written to a page after the exporter was told it may move it.  The next
 * access maps again (under the reservation lock, which is a ww_mutex): at
 * once where its caller says it may sleep (process context), mapping and
 * taking the page under one hold of the lock; otherwise (the receive path
 * in softirq, a transmitter holding the socket's spinlock) through
 * db->work, as an ODP MR's missing page is: a request is answered with an
 * RNR NAK meanwhile (the peer sends it again), a READ response or atomic
 * ACK stalls the receive path, whose own work maps (trdma_rx.c), and the
 * transmitter leaves the response to its worker, which maps.  When a map
 * fails, the next access fails (an access error) and the one after that
 * tries again.
 *
 * Locking: the dma-buf's reservation lock, then db->lock.  sgt and the
 * contents of pages change only under the reservation lock while valid is
 * false; valid, bad and users' increments are under db->lock.
 */
#include <linux/dma-buf.h>
#include <linux/dma-map-ops.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/swiotlb.h>

#include "trdma.h"
#include "trdma_verbs.h"

MODULE_IMPORT_NS(DMA_BUF);

struct trdma_dmabuf {
	struct trdma_dev *tdev;	/* the MR's ibmr.device is set after reg */
	struct trdma_mr *mr;
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;	/* the map in effect; under the resv lock */
	u64 first;		/* index in the dma-buf of the MR's first page */
	u32 npages;
	struct page **pages;	/* the MR's pages while valid */
	spinlock_t lock;	/* valid, bad, users' increments */
	bool valid;
	bool bad;		/* the last map failed */
	atomic_t users;		/* holders of a page (trdma_mr_page_get) */
	wait_queue_head_t wq;	/* move_notify waits for users == 0 */
	struct work_struct work;	/* maps for the receive path */
};

/* The device trdma's attachments are made for (see the top). */
static struct device *trdma_dmabuf_dev;

static void trdma_dmabuf_dev_release(struct device *dev)
{
	kfree(dev);
}

int trdma_dmabuf_init(void)
{
	struct device *dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	int rv;

	if (!dev)
		return -ENOMEM;
	device_initialize(dev);
	dev->release = trdma_dmabuf_dev_release;
	rv = dev_set_name(dev, "trdma-dmabuf");
	if (!rv)
		rv = dma_coerce_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (rv) {
		put_device(dev);
		return rv;
	}
	trdma_dmabuf_dev = dev;
	return 0;
}

void trdma_dmabuf_exit(void)
{
	put_device(trdma_dmabuf_dev);
	trdma_dmabuf_dev = NULL;
}

/*
 * Maps the attachment and collects the MR's pages; the mapping is then
 * valid.  Under the dma-buf's reservation lock.
 */
static int trdma_dmabuf_map_locked(struct trdma_dmabuf *db)
{
	struct dma_buf *dmabuf = db->attach->dmabuf;
	struct scatterlist *sg;
	struct sg_table *sgt;
	u64 idx = 0, found = 0;
	unsigned long flags;
	long wait;
	int rv = 0;
	u32 i, j;

	dma_resv_assert_held(dmabuf->resv);
	if (db->sgt)
		return 0;
	sgt = dma_buf_map_attachment(db->attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt))
		return PTR_ERR(sgt);
	/* The exporter's own work on the buffer (a move's copy) is done. */
	wait = dma_resv_wait_timeout(dmabuf->resv, DMA_RESV_USAGE_KERNEL,
				     false, MAX_SCHEDULE_TIMEOUT);
	if (wait <= 0) {
		rv = wait ? wait : -ETIMEDOUT;
		goto err_unmap;
	}
	for_each_sgtable_sg(sgt, sg, i) {
		struct page *page = sg_page(sg);
		u32 n = sg->length >> PAGE_SHIFT;

		if (!page || !PAGE_ALIGNED(sg->offset) ||
		    !PAGE_ALIGNED(sg->length) || is_zone_device_page(page)) {
			rv = -EOPNOTSUPP;
			goto err_unmap;
		}
		page = nth_page(page, sg->offset >> PAGE_SHIFT);
		for (j = 0; j < n; j++, idx++) {
			if (idx >= db->first && idx - db->first < db->npages) {
				db->pages[idx - db->first] = nth_page(page, j);
				found++;
			}
		}
	}
	if (found != db->npages) {
		/* The exporter's table is shorter than its buffer. */
		rv = -EINVAL;
		goto err_unmap;
	}
	db->sgt = sgt;
	spin_lock_irqsave(&db->lock, flags);
	db->valid = true;
	db->bad = false;
	spin_unlock_irqrestore(&db->lock, flags);
	return 0;

err_unmap:
	dma_buf_unmap_attachment(db->attach, sgt, DMA_BIDIRECTIONAL);
	return rv;
}

static int trdma_dmabuf_map(struct trdma_dmabuf *db)
{
	struct dma_resv *resv = db->attach->dmabuf->resv;
	unsigned long flags;
	int rv;

	dma_resv_lock(resv, NULL);
	rv = trdma_dmabuf_map_locked(db);
	dma_resv_unlock(resv);
	if (rv) {
		spin_lock_irqsave(&db->lock, flags);
		db->bad = true;
		spin_unlock_irqrestore(&db->lock, flags);
	} else {
		trdma_count(db->tdev, TRDMA_CNT_DMABUF_MAPS, 1);
	}
	return rv;
}

/*
 * Ends the mapping: no page is taken any more, the users of pages taken
 * before are done, and the attachment is unmapped.  Under the dma-buf's
 * reservation lock.
 */
static void trdma_dmabuf_unmap_locked(struct trdma_dmabuf *db)
{
	unsigned long flags;

	dma_resv_assert_held(db->attach->dmabuf->resv);
	spin_lock_irqsave(&db->lock, flags);
	db->valid = false;
	spin_unlock_irqrestore(&db->lock, flags);
	wait_event(db->wq, !atomic_read(&db->users));
	if (db->sgt) {
		dma_buf_unmap_attachment(db->attach, db->sgt,
					 DMA_BIDIRECTIONAL);
		db->sgt = NULL;
	}
}

/* The exporter moves the buffer: called under its reservation lock. */
static void trdma_dmabuf_move_notify(struct dma_buf_attachment *attach)
{
	struct trdma_dmabuf *db = attach->importer_priv;

	trdma_dmabuf_unmap_locked(db);
	trdma_count(db->tdev, TRDMA_CNT_DMABUF_MOVES, 1);
}

static const struct dma_buf_attach_ops trdma_dmabuf_ops = {
	.allow_peer2peer = false,
	.move_notify = trdma_dmabuf_move_notify,
};

/* Maps for the receive path; holds an MR reference. */
static void trdma_dmabuf_work(struct work_struct *work)
{
	struct trdma_dmabuf *db = container_of(work, struct trdma_dmabuf,
					       work);
	struct trdma_mr *mr = db->mr;

	if (!READ_ONCE(db->valid))
		trdma_dmabuf_map(db);
	trdma_mr_put(mr);
}

/* The page at MR offset pos, taken, while the mapping is valid; db->lock. */
static struct page *trdma_dmabuf_take(struct trdma_dmabuf *db, u64 pos)
{
	struct page *page;

	lockdep_assert_held(&db->lock);
	if (!db->valid)
		return NULL;
	page = db->pages[pos >> PAGE_SHIFT];
	atomic_inc(&db->users);
	return page;
}

/*
 * Maps the buffer (where move_notify unmapped it) and takes the page at
 * MR offset pos under one hold of the reservation lock, so that no move
 * comes in between.  Process context.  ERR_PTR(-EFAULT) when the map
 * fails.
 */
static struct page *trdma_dmabuf_map_take(struct trdma_dmabuf *db, u64 pos)
{
	struct dma_resv *resv = db->attach->dmabuf->resv;
	struct page *page = NULL;
	unsigned long flags;
	bool mapped = false;
	int rv;

	dma_resv_lock(resv, NULL);
	if (!READ_ONCE(db->valid)) {
		rv = trdma_dmabuf_map_locked(db);
		mapped = !rv;
	} else {
		rv = 0;
	}
	spin_lock_irqsave(&db->lock, flags);
	if (rv)
		db->bad = true;
	else
		page = trdma_dmabuf_take(db, pos);
	spin_unlock_irqrestore(&db->lock, flags);
	dma_resv_unlock(resv);
	if (mapped)
		trdma_count(db->tdev, TRDMA_CNT_DMABUF_MAPS, 1);
	return page ?: ERR_PTR(-EFAULT);
}

/*
 * The page of dma-buf MR mr holding va (checked to be inside the MR), and
 * va's offset in it; the caller ends its use with trdma_dmabuf_page_put().
 * With sleep (process context, the caller says so) a buffer that
 * move_notify unmapped is mapped here; without, ERR_PTR(-EAGAIN) says to
 * try again later (db->work maps meanwhile).  ERR_PTR(-EFAULT): the buffer
 * cannot be mapped (reported once to the receive path, which tries again
 * after that).
 */
struct page *trdma_dmabuf_page_get(struct trdma_mr *mr, u64 va, u32 *pg_off,
				   bool sleep)
{
	struct trdma_dmabuf *db = mr->dmabuf;
	u64 pos = (mr->iova & ~PAGE_MASK) + (va - mr->iova);
	struct page *page;
	unsigned long flags;
	bool bad;

	*pg_off = pos & ~PAGE_MASK;
	spin_lock_irqsave(&db->lock, flags);
	page = trdma_dmabuf_take(db, pos);
	bad = db->bad;
	if (!page && !sleep) {
		if (bad) {
			db->bad = false;	/* reported once; then again */
		} else {
			/* The caller's reference keeps it above zero. */
			refcount_inc(&mr->ref);
			if (!queue_work(trdma_wq, &db->work))
				refcount_dec(&mr->ref);
		}
	}
	spin_unlock_irqrestore(&db->lock, flags);
	if (page)
		return page;
	if (!sleep)
		return ERR_PTR(bad ? -EFAULT : -EAGAIN);
	return trdma_dmabuf_map_take(db, pos);
}

void trdma_dmabuf_page_put(struct trdma_mr *mr)
{
	struct trdma_dmabuf *db = mr->dmabuf;

	/* Full barrier: the access is done before move_notify sees 0. */
	if (atomic_dec_and_test(&db->users) && wq_has_sleeper(&db->wq))
		wake_up(&db->wq);
}

/*
 * Maps a dma-buf MR that move_notify unmapped, before a READ or atomic
 * response is placed into it (the receive path cannot map).  The QP's
 * transmitter, process context: it lets go of the socket before it maps.
 */
void trdma_dmabuf_prefetch(struct trdma_qp *qp, struct trdma_mr *mr)
{
	if (READ_ONCE(mr->dmabuf->valid))
		return;
	trdma_tx_sock_let_go(qp);
	trdma_dmabuf_map(mr->dmabuf);
}

#define TRDMA_DMABUF_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			     IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC | \
			     IB_ACCESS_RELAXED_ORDERING)

/*
 * ibv_reg_dmabuf_mr(): [offset, offset + length) of the dma-buf fd names,
 * at iova.  -EBADF or -EINVAL (dma_buf_get()) for an fd that is not a
 * dma-buf, -EINVAL for a range outside it, -EOPNOTSUPP for memory without
 * struct pages or rights trdma does not offer on a dma-buf.
 */
struct ib_mr *trdma_reg_user_mr_dmabuf_udata(struct ib_pd *ibpd, u64 offset,
					     u64 length, u64 iova, int fd,
					     int access, struct ib_udata *udata)
{
	struct trdma_dev *tdev = to_tdev(ibpd->device);
	struct trdma_dmabuf *db;
	struct dma_buf *dmabuf;
	struct trdma_mr *mr;
	u64 end;
	int rv;

	if (IS_ENABLED(CONFIG_DMABUF_DEBUG))
		return ERR_PTR(-EOPNOTSUPP);	/* sg_page() is mangled */
	/*
	 * Where the exporter's mapping for our device bounces or syncs caches
	 * (swiotlb forced, as in confidential guests; a non-coherent
	 * architecture), its unmap would overwrite or discard what the CPU
	 * wrote into the pages: no dma-buf MRs there.
	 */
	if (!dev_is_dma_coherent(trdma_dmabuf_dev) ||
	    is_swiotlb_force_bounce(trdma_dmabuf_dev))
		return ERR_PTR(-EOPNOTSUPP);
	if (access & ~(TRDMA_DMABUF_ACCESS | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || length > trdma_limits.max_mr_size ||
	    check_add_overflow(offset, length, &end) ||
	    iova + length < iova || (offset ^ iova) & ~PAGE_MASK)
		return ERR_PTR(-EINVAL);

	dmabuf = dma_buf_get(fd);
	if (IS_ERR(dmabuf))
		return ERR_CAST(dmabuf);
	if (end > dmabuf->size) {
		rv = -EINVAL;
		goto err_put;
	}
	db = kzalloc(sizeof(*db), GFP_KERNEL);
	if (!db) {
		rv = -ENOMEM;
		goto err_put;
	}
	db->tdev = tdev;
	db->first = offset >> PAGE_SHIFT;
	db->npages = ((end - 1) >> PAGE_SHIFT) - db->first + 1;
	db->pages = kvcalloc(db->npages, sizeof(*db->pages), GFP_KERNEL);
	if (!db->pages) {
		rv = -ENOMEM;
		goto err_free;
	}
	spin_lock_init(&db->lock);
	init_waitqueue_head(&db->wq);
	INIT_WORK(&db->work, trdma_dmabuf_work);

	mr = trdma_mr_alloc(ibpd, iova, length, access);
	if (IS_ERR(mr)) {
		rv = PTR_ERR(mr);
		goto err_free;
	}
	db->mr = mr;
	db->attach = dma_buf_dynamic_attach(dmabuf, trdma_dmabuf_dev,
					    &trdma_dmabuf_ops, db);
	if (IS_ERR(db->attach)) {
		rv = PTR_ERR(db->attach);
		goto err_mr;
	}
	/* From here trdma_mr_free() detaches and puts the dma-buf. */
	mr->dmabuf = db;
	rv = trdma_dmabuf_map(db);
	if (rv) {
		trdma_mr_free(tdev, mr);
		return ERR_PTR(rv);
	}
	trdma_mr_publish(tdev, mr);
	return &mr->ibmr;

err_mr:
	trdma_mr_free(tdev, mr);
err_free:
	kvfree(db->pages);
	kfree(db);
err_put:
	dma_buf_put(dmabuf);
	return ERR_PTR(rv);
}

/*
 * Detaches a dma-buf MR that no one holds any more (trdma_mr_free(), after
 * the last reference: db->work has run) and drops the fd's reference.
 */
void trdma_dmabuf_release(struct trdma_mr *mr)
{
	struct trdma_dmabuf *db = mr->dmabuf;
	struct dma_buf *dmabuf = db->attach->dmabuf;

	cancel_work_sync(&db->work);
	dma_resv_lock(dmabuf->resv, NULL);
	trdma_dmabuf_unmap_locked(db);
	dma_resv_unlock(dmabuf->resv);
	dma_buf_detach(dmabuf, db->attach);
	dma_buf_put(dmabuf);
	kvfree(db->pages);
	kfree(db);
	mr->dmabuf = NULL;
}
