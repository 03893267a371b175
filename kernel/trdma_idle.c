// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: what a connected QP gives back when it idles.
 *
 * TCP copies what a socket sends (trdma's headers and small payloads, the
 * hellos) into a page fragment.  trdma's sockets keep their own
 * (sk->sk_frag: trdma_cm_tune() turns current's task_frag off, since the
 * receive path sends ACKs in softirq), and TCP lets go of it only when the
 * socket goes: a 32 KiB compound page per connected QP that has sent
 * anything, idle or not.  Here a QP whose transmitter went idle holding
 * one is noted on its device's list; one work item per device, queued
 * while that list is not empty, returns the page of every QP that has not
 * transmitted for frag_idle_ms.  An active QP costs a timestamp and a bit
 * test per idle moment of its transmitter; an idle one is looked at once
 * after it went idle, and no timer or work runs for QPs that stay idle.
 * The next copy allocates a page again.
 *
 * Locking: trdma_dev.frag_lock (a BH lock: the receive path notes QPs in
 * softirq) protects the frag_qps list, every QP's frag_node and the
 * TRDMA_TX_FRAG bit of its tx_flags, set exactly while the QP is on the
 * list.  A QP on the list is alive (destroy takes it off, under the lock,
 * before it drops its last reference), so the work may take a reference
 * there.  The page itself is the transmitter's: it goes under
 * trdma_tx_lock() and the socket lock, as TCP's sendmsg uses it.
 */
#include <linux/module.h>
#include <net/sock.h>

#include "trdma.h"

static uint trdma_frag_idle_ms = 1000;
module_param_named(frag_idle_ms, trdma_frag_idle_ms, uint, 0644);
MODULE_PARM_DESC(frag_idle_ms,
		 "ms without transmitting after which a QP's socket returns its page fragment (1000; 0: never)");

static unsigned long trdma_frag_idle(void)
{
	return msecs_to_jiffies(READ_ONCE(trdma_frag_idle_ms));
}

/* Puts qp on its device's list if sk holds a page fragment. */
static void trdma_frag_list(struct trdma_qp *qp, struct sock *sk)
{
	struct trdma_dev *tdev = qp->tdev;
	bool queue = false;

	if (!READ_ONCE(sk->sk_frag.page) ||
	    test_bit(TRDMA_TX_FRAG, &qp->tx_flags) ||
	    !READ_ONCE(trdma_frag_idle_ms))
		return;
	spin_lock_bh(&tdev->frag_lock);
	if (!test_and_set_bit(TRDMA_TX_FRAG, &qp->tx_flags)) {
		list_add_tail(&qp->frag_node, &tdev->frag_qps);
		queue = true;
	}
	spin_unlock_bh(&tdev->frag_lock);
	if (queue)
		queue_delayed_work(trdma_wq, &tdev->frag_work,
				   trdma_frag_idle());
}

/*
 * qp's transmitter goes idle on sk (owning; any context): notes the time,
 * and lists the QP if the socket holds a page fragment.
 */
void trdma_frag_note(struct trdma_qp *qp, struct sock *sk)
{
	WRITE_ONCE(qp->tx_idle_at, jiffies);
	trdma_frag_list(qp, sk);
}

/* Takes qp off its device's list (destroy, before the last reference). */
void trdma_frag_forget(struct trdma_qp *qp)
{
	struct trdma_dev *tdev = qp->tdev;

	spin_lock_bh(&tdev->frag_lock);
	if (test_and_clear_bit(TRDMA_TX_FRAG, &qp->tx_flags))
		list_del_init(&qp->frag_node);
	spin_unlock_bh(&tdev->frag_lock);
}

/* Returns the page fragment of qp's socket if qp is still idle. */
static void trdma_frag_release(struct trdma_qp *qp, unsigned long idle)
{
	struct sock *sk;
	bool released = false;

	trdma_tx_lock(qp);
	if (qp->sock &&
	    time_after_eq(jiffies, READ_ONCE(qp->tx_idle_at) + idle)) {
		sk = qp->sock->sk;
		lock_sock(sk);
		if (sk->sk_frag.page) {
			put_page(sk->sk_frag.page);
			sk->sk_frag.page = NULL;
			sk->sk_frag.offset = 0;
			released = true;
		}
		release_sock(sk);
	} else if (qp->sock) {
		/* It transmitted meanwhile: listed again till it idles. */
		trdma_frag_list(qp, qp->sock->sk);
	}
	trdma_tx_unlock(qp);
	if (released)
		trdma_count(qp->tdev, TRDMA_CNT_FRAGS_RELEASED, 1);
}

void trdma_frag_work(struct work_struct *work)
{
	struct trdma_dev *tdev = container_of(to_delayed_work(work),
					      struct trdma_dev, frag_work);
	unsigned long idle = trdma_frag_idle(), now = jiffies;
	struct trdma_qp *qp, *next;
	LIST_HEAD(due);
	bool more;

	/*
	 * The QPs idle long enough move to due; each is taken off it, with
	 * a reference, under the lock (destroy may take it off first).
	 */
	spin_lock_bh(&tdev->frag_lock);
	list_for_each_entry_safe(qp, next, &tdev->frag_qps, frag_node)
		if (!idle ||
		    time_after_eq(now, READ_ONCE(qp->tx_idle_at) + idle))
			list_move_tail(&qp->frag_node, &due);
	spin_unlock_bh(&tdev->frag_lock);

	for (;;) {
		spin_lock_bh(&tdev->frag_lock);
		qp = list_first_entry_or_null(&due, struct trdma_qp,
					      frag_node);
		if (qp) {
			list_del_init(&qp->frag_node);
			clear_bit(TRDMA_TX_FRAG, &qp->tx_flags);
			refcount_inc(&qp->ref);
		}
		spin_unlock_bh(&tdev->frag_lock);
		if (!qp)
			break;
		if (idle)
			trdma_frag_release(qp, idle);
		trdma_qp_put(qp);
		cond_resched();
	}

	spin_lock_bh(&tdev->frag_lock);
	more = !list_empty(&tdev->frag_qps);
	spin_unlock_bh(&tdev->frag_lock);
	if (more)
		queue_delayed_work(trdma_wq, &tdev->frag_work,
				   idle ? idle : HZ);
}
