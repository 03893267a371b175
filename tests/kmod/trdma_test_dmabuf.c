// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma_test_dmabuf: a test-only dma-buf exporter for the lab (Debian's 6.1
 * has no udmabuf).  /dev/trdma_test_dmabuf makes buffers of whole pages
 * and exports them as dynamic dma-bufs (pin/unpin, so each map asks the
 * exporter again), reads and writes their bytes, and moves them: under
 * the reservation lock it calls dma_buf_move_notify(), then copies the
 * bytes into new pages and frees the old ones, so an importer that kept
 * using the old mapping would lose data (or write freed memory, which
 * KASAN and the page poisoning of a debug kernel catch).
 *
 * Not installed by any package: tests/lab loads it with insmod from the
 * build tree.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/highmem.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "trdma_test_dmabuf.h"

MODULE_IMPORT_NS(DMA_BUF);

#define TTD_MAX_PAGES	(64u << (20 - PAGE_SHIFT))	/* 64 MiB */
#define TTD_MAX_RW	(16u << 20)

struct ttd_buf {
	struct page **pages;	/* under the dma-buf's reservation lock */
	u32 npages;
	u32 flags;
	u64 moves;
};

static const struct dma_buf_ops ttd_ops;

static void ttd_free_pages(struct page **pages, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		if (pages[i])
			__free_page(pages[i]);
	kvfree(pages);
}

static struct page **ttd_alloc_pages(u32 n)
{
	struct page **pages = kvcalloc(n, sizeof(*pages), GFP_KERNEL);
	u32 i;

	if (!pages)
		return NULL;
	for (i = 0; i < n; i++) {
		pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!pages[i]) {
			ttd_free_pages(pages, n);
			return NULL;
		}
	}
	return pages;
}

static int ttd_pin(struct dma_buf_attachment *attach)
{
	return 0;
}

static void ttd_unpin(struct dma_buf_attachment *attach)
{
}

static struct sg_table *ttd_map(struct dma_buf_attachment *attach,
				enum dma_data_direction dir)
{
	struct ttd_buf *b = attach->dmabuf->priv;
	struct scatterlist *sg;
	struct sg_table *sgt;
	u32 i;
	int rv;

	dma_resv_assert_held(attach->dmabuf->resv);
	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	if (b->flags & TTD_CREATE_NO_PAGES) {
		/* Device memory as such exporters give it: addresses only. */
		rv = sg_alloc_table(sgt, b->npages, GFP_KERNEL);
		if (rv)
			goto err_free;
		for_each_sgtable_sg(sgt, sg, i) {
			sg_dma_address(sg) = 0x100000000ULL + i * PAGE_SIZE;
			sg_dma_len(sg) = PAGE_SIZE;
		}
		sgt->nents = sgt->orig_nents;
		return sgt;
	}
	rv = sg_alloc_table_from_pages(sgt, b->pages, b->npages, 0,
				       (unsigned long)b->npages << PAGE_SHIFT,
				       GFP_KERNEL);
	if (rv)
		goto err_free;
	rv = dma_map_sgtable(attach->dev, sgt, dir, 0);
	if (rv)
		goto err_table;
	return sgt;

err_table:
	sg_free_table(sgt);
err_free:
	kfree(sgt);
	return ERR_PTR(rv);
}

static void ttd_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
		      enum dma_data_direction dir)
{
	struct ttd_buf *b = attach->dmabuf->priv;

	if (!(b->flags & TTD_CREATE_NO_PAGES))
		dma_unmap_sgtable(attach->dev, sgt, dir, 0);
	sg_free_table(sgt);
	kfree(sgt);
}

static void ttd_release(struct dma_buf *dmabuf)
{
	struct ttd_buf *b = dmabuf->priv;

	ttd_free_pages(b->pages, b->npages);
	kfree(b);
}

static const struct dma_buf_ops ttd_ops = {
	.pin = ttd_pin,
	.unpin = ttd_unpin,
	.map_dma_buf = ttd_map,
	.unmap_dma_buf = ttd_unmap,
	.release = ttd_release,
};

static int ttd_create(struct ttd_create __user *uarg)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct ttd_create c;
	struct dma_buf *dmabuf;
	struct ttd_buf *b;
	int fd;

	if (copy_from_user(&c, uarg, sizeof(c)))
		return -EFAULT;
	if (!c.npages || c.npages > TTD_MAX_PAGES ||
	    c.flags & ~TTD_CREATE_NO_PAGES)
		return -EINVAL;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;
	b->npages = c.npages;
	b->flags = c.flags;
	b->pages = ttd_alloc_pages(c.npages);
	if (!b->pages) {
		kfree(b);
		return -ENOMEM;
	}
	info.ops = &ttd_ops;
	info.size = (size_t)c.npages << PAGE_SHIFT;
	info.flags = O_RDWR;
	info.priv = b;
	dmabuf = dma_buf_export(&info);
	if (IS_ERR(dmabuf)) {
		ttd_free_pages(b->pages, b->npages);
		kfree(b);
		return PTR_ERR(dmabuf);
	}
	fd = dma_buf_fd(dmabuf, O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(dmabuf);	/* releases b */
		return fd;
	}
	c.fd = fd;
	if (copy_to_user(uarg, &c, sizeof(c)))
		return -EFAULT;		/* the fd stays: the caller's to close */
	return 0;
}

/* A dma-buf of ours, referenced, or an ERR_PTR. */
static struct dma_buf *ttd_get(int fd)
{
	struct dma_buf *dmabuf = dma_buf_get(fd);

	if (IS_ERR(dmabuf))
		return dmabuf;
	if (dmabuf->ops != &ttd_ops) {
		dma_buf_put(dmabuf);
		return ERR_PTR(-EINVAL);
	}
	return dmabuf;
}

static int ttd_rw(struct ttd_rw __user *uarg, bool write)
{
	struct dma_buf *dmabuf;
	struct ttd_buf *b;
	struct ttd_rw r;
	u64 pos, done;
	void *tmp;
	int rv = 0;

	if (copy_from_user(&r, uarg, sizeof(r)))
		return -EFAULT;
	if (!r.len || r.len > TTD_MAX_RW)
		return -EINVAL;
	dmabuf = ttd_get(r.fd);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	b = dmabuf->priv;
	if (r.offset > dmabuf->size || r.len > dmabuf->size - r.offset) {
		rv = -EINVAL;
		goto out_put;
	}
	tmp = kvmalloc(r.len, GFP_KERNEL);
	if (!tmp) {
		rv = -ENOMEM;
		goto out_put;
	}
	/* No user copy under the reservation lock (mmap_lock comes first). */
	if (write && copy_from_user(tmp, u64_to_user_ptr(r.uaddr), r.len)) {
		rv = -EFAULT;
		goto out_free;
	}
	dma_resv_lock(dmabuf->resv, NULL);
	for (done = 0; done < r.len; done += pos) {
		u64 at = r.offset + done;
		void *va = kmap_local_page(b->pages[at >> PAGE_SHIFT]);
		u32 off = offset_in_page(at);

		pos = min_t(u64, r.len - done, PAGE_SIZE - off);
		if (write)
			memcpy(va + off, tmp + done, pos);
		else
			memcpy(tmp + done, va + off, pos);
		kunmap_local(va);
	}
	dma_resv_unlock(dmabuf->resv);
	if (!write && copy_to_user(u64_to_user_ptr(r.uaddr), tmp, r.len))
		rv = -EFAULT;
out_free:
	kvfree(tmp);
out_put:
	dma_buf_put(dmabuf);
	return rv;
}

static int ttd_move(struct ttd_move __user *uarg)
{
	struct page **fresh, **old;
	struct dma_buf *dmabuf;
	struct ttd_buf *b;
	struct ttd_move m;
	int rv = 0;
	u32 i;

	if (copy_from_user(&m, uarg, sizeof(m)))
		return -EFAULT;
	dmabuf = ttd_get(m.fd);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	b = dmabuf->priv;
	fresh = ttd_alloc_pages(b->npages);
	if (!fresh) {
		rv = -ENOMEM;
		goto out_put;
	}
	dma_resv_lock(dmabuf->resv, NULL);
	/* Importers stop using the old pages before they change hands. */
	dma_buf_move_notify(dmabuf);
	for (i = 0; i < b->npages; i++)
		copy_highpage(fresh[i], b->pages[i]);
	old = b->pages;
	b->pages = fresh;
	m.moves = ++b->moves;
	dma_resv_unlock(dmabuf->resv);
	/* Poisoned: a write through a stale mapping would show. */
	for (i = 0; i < b->npages; i++) {
		void *va = kmap_local_page(old[i]);

		memset(va, 0x5a, PAGE_SIZE);
		kunmap_local(va);
	}
	ttd_free_pages(old, b->npages);
	if (copy_to_user(uarg, &m, sizeof(m)))
		rv = -EFAULT;
out_put:
	dma_buf_put(dmabuf);
	return rv;
}

static long ttd_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case TTD_CREATE:
		return ttd_create(uarg);
	case TTD_READ:
		return ttd_rw(uarg, false);
	case TTD_WRITE:
		return ttd_rw(uarg, true);
	case TTD_MOVE:
		return ttd_move(uarg);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations ttd_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = ttd_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice ttd_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "trdma_test_dmabuf",
	.fops = &ttd_fops,
	.mode = 0600,
};

module_misc_device(ttd_misc);
MODULE_DESCRIPTION("trdma lab: test-only dma-buf exporter");
MODULE_LICENSE("Dual BSD/GPL");
