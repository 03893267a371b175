// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * trdma: transmit path.
 *
 * One work item per QP puts segments on the QP's TCP connection: the
 * responder's ACKs first, then its READ responses, then the requester's
 * send WQEs in order.  A segment, once started, is finished before the next
 * one begins; payload pages of registered memory are handed to TCP without
 * copying (trdma_sendpage(): kernel_sendpage where the kernel has it, as
 * Debian's 6.1 does, whose MSG_SPLICE_PAGES its TCP ignores; sendmsg with
 * MSG_SPLICE_PAGES from 6.5 on), headers and inline data
 * are copied.  A SEND or WRITE completes when the responder acknowledges
 * it, so no page is reused while TCP may still retransmit it.  A UC QP's
 * SEND or WRITE completes once TCP has all of it, as nothing answers it:
 * its payload is always copied into TCP, never handed over by the page.
 */
#include <linux/highmem.h>
#include <linux/kthread.h>
#include <linux/net.h>
#include <linux/sched/clock.h>
#include <linux/sched/isolation.h>
#include <uapi/linux/sched/types.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "trdma.h"
#include "trdma_verbs.h"

static bool trdma_tx_spread_on = true;
module_param_named(tx_spread, trdma_tx_spread_on, bool, 0444);
MODULE_PARM_DESC(tx_spread,
		 "the worker transmits on another CPU than the one that kicks it (1; off where one CPU is online), or where the scheduler puts it (0); read at load");

static bool trdma_tx_batch_on = true;
module_param_named(tx_batch, trdma_tx_batch_on, bool, 0444);
MODULE_PARM_DESC(tx_batch,
		 "where one CPU is online, the worker is a SCHED_BATCH thread that waits for the CPU instead of preempting the poster that kicked it (1); read at load");

/*
 * The workers' thread where one CPU is online and tx_batch is on
 * (trdma_tx_spread_init()); NULL otherwise.  Set at module init, before
 * any QP, and gone at exit, after the last.
 */
static struct kthread_worker *trdma_tx_kworker;

static void trdma_tx_try(struct trdma_qp *qp);

/* QPs kicked from one CPU spread over at most this many after it. */
#define TRDMA_TX_SPREAD		8U

/*
 * A CPU for the QP's worker other than avoid: the next online one that is
 * not isolated (isolcpus, nohz_full, on 6.12 an isolated cpuset
 * partition), or one of the next few such by QPN; avoid itself where
 * there is no other.
 */
static int trdma_tx_pick_cpu(struct trdma_qp *qp, int avoid)
{
	unsigned int n = num_online_cpus(), i, k;
	int cpu = avoid, last = avoid;

	k = 1 + qp->ibqp.qp_num % min(max(n, 2U) - 1, TRDMA_TX_SPREAD);
	for (i = 0; i < n; i++) {
		cpu = cpumask_next(cpu, cpu_online_mask);
		if (cpu >= nr_cpu_ids)
			cpu = cpumask_first(cpu_online_mask);
		if (cpu == avoid || cpu_is_isolated(cpu))
			continue;
		last = cpu;
		if (!--k)
			break;
	}
	return last;
}

/*
 * tx_spread needs a CPU besides the kicker's.  Where only one CPU is online
 * at load, it is off (and reads N), and the worker waits its turn behind a
 * poster on that CPU, which meanwhile posts more for it to send at once.
 * On the high-priority trdma_tx it preempted the poster at every kick (two
 * lab guests of one vCPU each: the 64 B message rate a quarter to two
 * fifths lower, with twice the context switches; docs/performance.md).
 * On the unbound trdma_wq (tx_batch=0) its wake-up still took the CPU
 * from the poster at many kicks, a batch holding what was posted before.
 * So with tx_batch it runs on a thread of its own, trdma_tx_batch, as
 * SCHED_BATCH: a batch task's wake-up never preempts, so the worker runs
 * when the poster gives the CPU up (an empty poll's yield, a sleep) or
 * the tick takes it, with the CPU's fair share as any task.  What the
 * receive path kicks (a READ's response, a socket with room again) waits
 * the same way.  Isolated CPUs count: where the others are isolated,
 * posters pinned to those still get the worker on the one that is not,
 * beside them.  Read once, as tx_spread and tx_batch are: a CPU brought
 * up later changes nothing, so that the work item stays where it was
 * made (trdma_tx_kick()).  Module init, before any QP.
 */
void trdma_tx_spread_init(void)
{
	struct sched_attr attr = { .sched_policy = SCHED_BATCH };
	struct kthread_worker *w;

	if (num_online_cpus() >= 2)
		return;
	if (trdma_tx_spread_on) {
		trdma_tx_spread_on = false;
		pr_info("trdma: one CPU online: tx_spread off\n");
	}
	if (!trdma_tx_batch_on)
		return;
	w = kthread_create_worker(0, "trdma_tx_batch");
	if (IS_ERR(w)) {
		pr_warn("trdma: no transmit thread (%ld): tx_batch off\n",
			PTR_ERR(w));
		trdma_tx_batch_on = false;
		return;
	}
	if (sched_setattr_nocheck(w->task, &attr))
		pr_warn("trdma: transmit thread not SCHED_BATCH\n");
	else
		pr_info("trdma: one CPU online: transmit thread trdma_tx_batch, SCHED_BATCH\n");
	trdma_tx_kworker = w;
}

/* Module exit, after the last QP. */
void trdma_tx_spread_exit(void)
{
	if (trdma_tx_kworker)
		kthread_destroy_worker(trdma_tx_kworker);
	trdma_tx_kworker = NULL;
}

static void trdma_tx_kwork(struct kthread_work *work)
{
	struct trdma_qp *qp = container_of(work, struct trdma_qp, tx_kwork);

	if (trdma_qp_is_ud(qp))
		trdma_ud_tx(qp);
	else
		trdma_tx_try(qp);
}

/* The QP's work item, on the workqueue or trdma_tx_kworker.  At create. */
void trdma_tx_work_init(struct trdma_qp *qp)
{
	if (trdma_tx_kworker)
		kthread_init_work(&qp->tx_kwork, trdma_tx_kwork);
	else
		INIT_WORK(&qp->tx_work, trdma_qp_is_ud(qp) ? trdma_ud_tx_work :
			  trdma_tx_work);
}

/* Cancels the QP's work item and waits for it to end.  Process context. */
void trdma_tx_work_cancel(struct trdma_qp *qp)
{
	if (trdma_tx_kworker)
		kthread_cancel_work_sync(&qp->tx_kwork);
	else
		cancel_work_sync(&qp->tx_work);
}

/*
 * The CPU the worker transmits on: not the kicker's, so that the kicker
 * (a poster that goes on posting without doorbells, tx_active; the receive
 * path; the ACK hold's tasklet) and the transmitter work side by side, as
 * a poster and a NIC's send engine do, rather than taking turns on one
 * CPU while another stands by; QPs kicked from one CPU spread over the
 * next few (trdma_tx_pick_cpu()).  siw (a transmit thread per CPU) and
 * NVMe/TCP (a CPU per queue) steer their transmit work too; a CPU kept
 * per QP, as NVMe/TCP keeps one per queue, was slower here at 64 KiB
 * (docs/performance.md).  The worker kicking itself again stays where it
 * runs (as the workqueue would have it anyway).  The kicker's CPU is a
 * hint (a preemptible caller may move), and so is the choice: where the
 * CPU goes offline before the work runs, its pool's workers run it
 * unbound.  Any context.
 */
static int trdma_tx_cpu(struct trdma_qp *qp)
{
	int cpu = raw_smp_processor_id();

	if (current_work() == &qp->tx_work)
		return cpu;
	return trdma_tx_pick_cpu(qp, cpu);
}

/*
 * Queues the QP's worker: on trdma_tx_wq on the CPU trdma_tx_cpu() picks,
 * with tx_spread=0 on the unbound trdma_wq, and where one CPU is online on
 * trdma_tx_batch (tx_batch) or else trdma_wq.  One work item, always on
 * one of them (both parameters are read at load), so it never runs twice
 * at once.  Any context.
 */
void trdma_tx_kick(struct trdma_qp *qp)
{
	if (trdma_tx_kworker)
		kthread_queue_work(trdma_tx_kworker, &qp->tx_kwork);
	else if (trdma_tx_spread_on)
		queue_work_on(trdma_tx_cpu(qp), trdma_tx_wq, &qp->tx_work);
	else
		queue_work(trdma_wq, &qp->tx_work);
}

/*
 * Like trdma_tx_kick(), but where a transmitter holds tx_mutex the work
 * is left to it: it transmits again before it lets go (trdma_tx_try()
 * and trdma_tx_unlock() look at tx_again after unlocking).  For an ACK
 * owed while the QP's process transmits (the answer read from its
 * socket's backlog at release_sock, or on another CPU while it finishes
 * its segment): the transmitter sends it anyway, and waking the worker
 * from softirq there would cost a wake-up for nothing (with tx_spread=0
 * also need_resched on a CPU where a process polls for that answer, whose
 * pending softirqs then go to ksoftirqd).  Any context.
 */
static void trdma_tx_kick_lazy(struct trdma_qp *qp)
{
	atomic_set(&qp->tx_again, 1);
	/* Set before the mutex is looked at; pairs with trdma_tx_try()'s. */
	smp_mb();
	if (!mutex_is_locked(&qp->tx_mutex))
		trdma_tx_kick(qp);
}

static bool trdma_tx_ack_from_rx(struct trdma_qp *qp, struct sock *sk);
static bool trdma_tx_ack_from_timer(struct trdma_qp *qp);

static uint trdma_ack_delay_us = 500;
module_param_named(ack_delay_us, trdma_ack_delay_us, uint, 0644);
MODULE_PARM_DESC(ack_delay_us,
		 "most us an ACK may wait for a request to carry it, on QPs that send requests too (500; 0: never; at most 1000000)");

/*
 * The hold's timer may run this much after it is due, so that on a busy
 * CPU it runs at a clock event that comes by then anyway (the tick,
 * another timer) instead of programming the CPU's clock event device for
 * itself, once when it is armed and again when it is cancelled: each a
 * trap to the hypervisor in a virtual machine, where a ping-pong on one
 * CPU arms and cancels it for every message.  A slack as TCP gives its
 * timer for compressed SACKs (tcp_comp_sack_slack_ns), here one tick long
 * so that it reaches the next tick.  Not where the timer is armed from
 * the idle loop: see trdma_tx_ack_arm().
 */
static uint trdma_ack_slack_us = USEC_PER_SEC / HZ;
module_param_named(ack_slack_us, trdma_ack_slack_us, uint, 0644);
MODULE_PARM_DESC(ack_slack_us,
		 "most us the ACK hold's timer may run late on a busy CPU, to share a clock event (one tick; 0: none; at most 1000000)");

static uint trdma_ack_coalesce_us = 4000;
module_param_named(ack_coalesce_us, trdma_ack_coalesce_us, uint, 0644);
MODULE_PARM_DESC(ack_coalesce_us,
		 "most us an ACK the requester did not ask for may wait to go with a later one (4000; 0: never; at most 1000000)");

static bool trdma_tx_cork_on = true;
module_param_named(tx_cork, trdma_tx_cork_on, bool, 0644);
MODULE_PARM_DESC(tx_cork,
		 "pack small segments with more behind them into one TCP segment (1)");

static bool trdma_tx_hold_sock_on = true;
module_param_named(tx_hold_sock, trdma_tx_hold_sock_on, bool, 0644);
MODULE_PARM_DESC(tx_hold_sock,
		 "the transmitter owns the socket for a whole run, not per send (1)");

static bool trdma_tx_defer_on = true;
module_param_named(tx_defer, trdma_tx_defer_on, bool, 0644);
MODULE_PARM_DESC(tx_defer,
		 "a user's send doorbell with sends outstanding leaves them to the worker (1)");

/* A sample of the turnaround is cut to this: long ones all mean "slow". */
#define TRDMA_ACK_TURN_MAX_NS	(4 * NSEC_PER_MSEC)

/*
 * The clock of the ACK hold, read under qp->lock: local_clock(), the
 * scheduler's (the TSC where there is one), not ktime_get_ns(), which
 * reads the clocksource: where that is the HPET (a guest whose TSC the
 * kernel marked unstable, the lab's among them) each read is a trap to
 * the hypervisor of microseconds, spent with interrupts off and the QP's
 * lock held.  In units of 1,024 ns (TRDMA_ACK_CLOCK_SHIFT), wrapping at
 * 32 bits (about 73 minutes): times are compared as differences
 * (trdma_tx_clock_before()).  Its readings on two CPUs may differ a
 * little; what it measures is a heuristic's input and is cut to
 * TRDMA_ACK_TURN_MAX_NS.  Never 0, which the QP's ACK times use for
 * "none".
 */
#define TRDMA_ACK_CLOCK_SHIFT	10

static u32 trdma_tx_clock(void)
{
	return (u32)(local_clock() >> TRDMA_ACK_CLOCK_SHIFT) ?: 1;
}

static u32 trdma_tx_clock_units(u64 ns)
{
	return max_t(u64, ns >> TRDMA_ACK_CLOCK_SHIFT, 1);
}

/* a is before b. */
static bool trdma_tx_clock_before(u32 a, u32 b)
{
	return (s32)(a - b) < 0;
}

/*
 * The most each of ack_delay_us, ack_coalesce_us and ack_slack_us may be:
 * a second, so that an ACK waits at most two, far inside the clock's wrap.
 */
#define TRDMA_ACK_WAIT_MAX_US	USEC_PER_SEC

/* ack_delay_us, ack_coalesce_us or ack_slack_us, in ns. */
static u64 trdma_tx_ack_param_ns(const uint *us)
{
	return min_t(u64, READ_ONCE(*us), TRDMA_ACK_WAIT_MAX_US) *
	       NSEC_PER_USEC;
}

/*
 * The hold's timer is due within ns from now (local_clock() units),
 * unless it is queued to be due sooner already.  On a busy CPU it may run
 * up to ack_slack_us after that, at a clock event due by then anyway, so
 * that arming and cancelling it seldom program the clock event device
 * (ack_timer_at is when it is due, not that latest).  Armed from the idle
 * loop (the receive softirq of an interrupt that woke an idle CPU, the
 * tasklet after the timer's own), it has no slack: with the tick stopped
 * an idle CPU wakes for the timer's latest time, so the slack would save
 * nothing and only make the ACK late.  A busy CPU that goes idle before
 * the timer runs still wakes at the end of its slack.  Pinned: queued on
 * this CPU, unless its callback runs on another just now (it stays there)
 * or CPU hotplug moves it.  Under qp->lock, as every arm, so that
 * ack_timer_at is the queued timer's and no arm moves it while
 * trdma_tx_ack_went() looks where it is queued.
 */
static void trdma_tx_ack_arm(struct trdma_qp *qp, u32 now, u64 ns)
{
	struct hrtimer *t = &qp->ack_timer;
	u32 at = now + trdma_tx_clock_units(ns);
	u64 slack = 0;

	lockdep_assert_held(&qp->lock);
	if (hrtimer_is_queued(t) && !trdma_tx_clock_before(at, qp->ack_timer_at))
		return;
	qp->ack_timer_at = at;
	if (!is_idle_task(current))
		slack = trdma_tx_ack_param_ns(&trdma_ack_slack_us);
	hrtimer_start_range_ns(t, ns_to_ktime(ns), slack,
			       HRTIMER_MODE_REL_PINNED_HARD);
	trdma_count(qp->tdev, TRDMA_CNT_ACK_TIMER_ARMED, 1);
}

/*
 * The owed ACK went, alone or carried: nothing is owed now, and the hold's
 * timer, queued on this CPU, is cancelled, which costs no interrupt here
 * (at most reprogramming this CPU's clock event, where it was the next to
 * expire).  Queued on another, it runs on and finds nothing owed (or the
 * next ACK's hold): a cancel from here would still leave its interrupt
 * there.  Where it is queued is only a guess that decides whether to
 * cancel; the cancel itself is safe from any CPU.  Under qp->lock.
 */
static void trdma_tx_ack_went(struct trdma_qp *qp)
{
	struct hrtimer *t = &qp->ack_timer;

	lockdep_assert_held(&qp->lock);
	qp->ack_pending = false;
	qp->ack_req = false;
	if (hrtimer_is_queued(t) &&
	    READ_ONCE(t->base)->cpu_base->cpu == raw_smp_processor_id() &&
	    hrtimer_try_to_cancel(t) == 1)
		trdma_count(qp->tdev, TRDMA_CNT_ACK_TIMER_CANCELLED, 1);
}

/*
 * The receive path owes the peer an ACK.  One the requester did not ask
 * for (no TRDMA_BTH_ACKREQ: nobody waits for that completion, and the
 * requester's SQ has room, see trdma_tx_wants_ack()) waits up to
 * ack_coalesce_us for one it asks for, which acknowledges both: a one-way
 * stream of unsignaled messages costs an ACK per signaled one, not one per
 * message.  A QP that sent a request of its
 * own lately (both sides talk: a ping-pong, a bidirectional stream) holds
 * a plain ACK for a while: the next request carries it in its header
 * (TRDMA_BTH_AETH), which saves a TCP segment each way and waking the
 * worker.  How long depends on how soon this QP's requests have followed
 * the ACKs it owed (ack_turn_ns, from trdma_tx_ack_sample()): twice that,
 * at most ack_delay_us; not at all when requests come later than that
 * anyway.  So a fast machine holds microseconds, a slow one (the lab's
 * emulated hosts) a few hundred.  Otherwise, or for a NAK, it goes now:
 * from here where sk is given and no process owns it (the receive path in
 * softirq, holding that socket's spinlock, trdma_tx_ack_from_rx()), else
 * by the worker.  Any context.
 *
 * The hold's timer is pinned to the CPU that armed it (usually; see
 * trdma_tx_ack_arm()).  A transmitter
 * that carries or sends the ACK on that CPU cancels it, which costs no
 * interrupt (trdma_tx_ack_went()).  Elsewhere it is lazy: a request
 * that carries the ACK leaves it running (a cancel from another CPU than
 * the arming one still takes its interrupt there), and an ACK that
 * becomes owed while it is queued arms nothing when it expires soon
 * enough (within ack_delay_us, or ack_coalesce_us for an ACK nobody asked
 * for).  It looks when it expires (trdma_tx_ack_tasklet()): an ACK whose
 * hold (ack_due_at) is over goes, one still held waits the rest.  So a
 * held ACK that no request carries goes at most ack_delay_us late (plus
 * the timer's slack, ack_slack_us), not at the end of its own hold, and a
 * ping-pong whose ACKs go out on another CPU pays a timer event per
 * ack_delay_us instead of an interrupt per message; one whose ACKs go out
 * on the arming CPU (a host with one CPU) pays an arm and a local cancel
 * per message, without an interrupt, and with the slack without
 * programming the clock event device either (docs/performance.md, "The
 * ACK hold's timer", "The hold's timer with slack").
 */
void trdma_tx_ack_soon(struct trdma_qp *qp, struct sock *sk)
{
	u64 max = trdma_tx_ack_param_ns(&trdma_ack_delay_us), hold = 0;
	u64 coalesce = trdma_tx_ack_param_ns(&trdma_ack_coalesce_us);
	u64 within = 0;
	unsigned long flags;
	u32 now, due;

	spin_lock_irqsave(&qp->lock, flags);
	/*
	 * ack_pending, set by the receive path, before the timer's state
	 * read below; pairs with the barrier in trdma_tx_ack_timer(), so
	 * that either it sees this ACK owed or this sees it not queued.
	 */
	smp_mb__after_spinlock();
	/*
	 * Sent meanwhile (the transmitter takes an owed ACK whenever it
	 * runs): nothing to do.  Kicking the worker here would have it send
	 * the next message's ACK at once, and that one's receive path kick
	 * it again: a one-way stream then costs an ACK per message.
	 */
	if (!qp->ack_pending) {
		spin_unlock_irqrestore(&qp->lock, flags);
		return;
	}
	now = trdma_tx_clock();
	if (!trdma_state_connected(qp->state)) {
		/* Not held, nor the timer armed again (destroy: RESET or ERR). */
	} else if (coalesce && !qp->ack_req) {
		hold = coalesce;
		within = coalesce;
	} else if (max && qp->ack_syndrome == TRDMA_AETH_ACK &&
	    !qp->close_after_nak &&
	    !time_after(jiffies, READ_ONCE(qp->last_req_tx) + 1)) {
		if (!qp->ack_owed_at)
			qp->ack_owed_at = now;
		if (qp->ack_turn_ns <= max)
			hold = min_t(u64, 2 * (u64)qp->ack_turn_ns, max);
		within = max;
	}
	if (!hold) {
		/* Goes now: the timer, should it look, sends it. */
		qp->ack_due_at = 0;
		spin_unlock_irqrestore(&qp->lock, flags);
		if (!sk || !trdma_tx_ack_from_rx(qp, sk))
			trdma_tx_kick_lazy(qp);
		return;
	}
	due = (now + trdma_tx_clock_units(hold)) ?: 1;
	if (!qp->ack_due_at || trdma_tx_clock_before(due, qp->ack_due_at))
		qp->ack_due_at = due;
	/*
	 * Armed unless the queued timer looks soon enough (a coalesced
	 * ACK's may not).  Not hrtimer_active(): that is true too while the
	 * callback runs, which may have found no ACK owed just before this
	 * one became owed.  Under qp->lock, as every arm, so that
	 * ack_timer_at is the queued timer's.
	 */
	trdma_tx_ack_arm(qp, now, within);
	spin_unlock_irqrestore(&qp->lock, flags);
}

/*
 * A request goes out: how long after the owed ACK (whether it carries
 * that ACK or the timer sent it already) goes into the running average,
 * weight 1/4.  Under qp->lock.
 */
static void trdma_tx_ack_sample(struct trdma_qp *qp)
{
	u64 t;
	s32 d;

	if (!qp->ack_owed_at)
		return;
	/*
	 * local_clock() may run a little behind on another CPU; far behind,
	 * the clock wrapped since (an ACK owed over half an hour ago).
	 */
	d = (s32)(trdma_tx_clock() - qp->ack_owed_at);
	if (d < -(s32)trdma_tx_clock_units(TRDMA_ACK_TURN_MAX_NS))
		t = TRDMA_ACK_TURN_MAX_NS;
	else
		t = min_t(u64, (u64)max_t(s32, d, 0) << TRDMA_ACK_CLOCK_SHIFT,
			  TRDMA_ACK_TURN_MAX_NS);
	qp->ack_owed_at = 0;
	qp->ack_turn_ns = (3 * (u64)qp->ack_turn_ns + t) / 4;
}

/*
 * The hold's timer expired (hard interrupt): if an ACK is owed, its
 * tasklet looks whether its hold is over.  A hard timer: it only peeks
 * and schedules, and where an interrupt finds nothing owed it ends there,
 * without a timer softirq.
 */
enum hrtimer_restart trdma_tx_ack_timer(struct hrtimer *t)
{
	struct trdma_qp *qp = container_of(t, struct trdma_qp, ack_timer);

	/*
	 * The timer's state (not queued) before the peek: pairs with
	 * trdma_tx_ack_soon()'s barrier.  A peek: the tasklet looks again
	 * under qp->lock.
	 */
	smp_mb();
	if (READ_ONCE(qp->ack_pending))
		tasklet_schedule(&qp->ack_tasklet);
	return HRTIMER_NORESTART;
}

/*
 * The held ACK that no request carried: still held (the timer looked
 * before its hold ended), the timer waits the rest (ack_due_at may be
 * another CPU's local_clock(): at most TRDMA_ACK_TURN_MAX_NS); over, it
 * goes, from here (softirq) where the socket is free, else by the
 * transmitter at work or the worker.
 */
void trdma_tx_ack_tasklet(struct tasklet_struct *tl)
{
	struct trdma_qp *qp = from_tasklet(qp, tl, ack_tasklet);
	u32 now = trdma_tx_clock();
	unsigned long flags;
	u64 wait = 0;

	spin_lock_irqsave(&qp->lock, flags);
	if (!qp->ack_pending) {
		spin_unlock_irqrestore(&qp->lock, flags);
		return;
	}
	/* Not armed again but in RTR/RTS (destroy leaves RESET or ERR). */
	if (qp->ack_due_at && trdma_tx_clock_before(now, qp->ack_due_at) &&
	    trdma_state_connected(qp->state)) {
		wait = min_t(u64, (u64)(u32)(qp->ack_due_at - now) <<
				  TRDMA_ACK_CLOCK_SHIFT, TRDMA_ACK_TURN_MAX_NS);
		trdma_tx_ack_arm(qp, now, wait);
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	if (!wait && !trdma_tx_ack_from_timer(qp))
		trdma_tx_kick_lazy(qp);
}

static bool trdma_is_atomic(u8 opcode)
{
	return opcode == IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ||
	       opcode == IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD;
}

/* READs and atomics: answered by a response, bounded by max_rd_atomic. */
static bool trdma_is_read(u8 opcode)
{
	return opcode == IB_UVERBS_WR_RDMA_READ || trdma_is_atomic(opcode);
}

static bool trdma_is_write(u8 opcode)
{
	return opcode == IB_UVERBS_WR_RDMA_WRITE ||
	       opcode == IB_UVERBS_WR_RDMA_WRITE_WITH_IMM;
}

/* WRITEs and ATOMIC_WRITE: a RETH on the first segment. */
static bool trdma_has_reth(u8 opcode)
{
	return trdma_is_write(opcode) || opcode == TRDMA_WR_ATOMIC_WRITE;
}

static bool trdma_has_imm(u8 opcode)
{
	return opcode == IB_UVERBS_WR_SEND_WITH_IMM ||
	       opcode == IB_UVERBS_WR_RDMA_WRITE_WITH_IMM;
}

/* SEND_WITH_INV: its last segment carries the rkey to invalidate (IETH). */
static bool trdma_has_ieth(u8 opcode)
{
	return opcode == IB_UVERBS_WR_SEND_WITH_INV;
}

/* The READ response being sent. */
static struct trdma_rd_resp *trdma_tx_rd_head(struct trdma_qp *qp)
{
	return &qp->rd_resp[qp->rd_head % ARRAY_SIZE(qp->rd_resp)];
}

/* The RNR timer expired: send again. */
void trdma_tx_rnr_work(struct work_struct *work)
{
	struct trdma_qp *qp = container_of(to_delayed_work(work),
					   struct trdma_qp, rnr_work);

	trdma_tx_kick(qp);
}

/*
 * After an RNR NAK for rnr_msn, the responder dropped that request and all
 * later ones: go back to it.  Under qp->lock, between segments.
 */
static void trdma_tx_rewind(struct trdma_qp *qp)
{
	u32 i, from = qp->sq_intake;

	qp->rnr_rewind = false;
	trdma_count(qp->tdev, TRDMA_CNT_RNR_RETRIES, 1);
	for (i = qp->sq_retire; i != qp->sq_intake; i++) {
		struct trdma_swqe_info *swi =
			&qp->swi[i & (qp->sq.num_slots - 1)];

		/* Passed local WQEs stay done: they are not sent again. */
		if (trdma_sqe_is_local(trdma_swq_slot(qp, i))) {
			if (!swi->done)
				break;
			continue;
		}
		if (!swi->msn_set)
			break;
		if (swi->msn == qp->rnr_msn)
			from = i;
		if (from == qp->sq_intake)
			continue;
		if (trdma_is_read(((struct trdma_sqe *)
				   trdma_swq_slot(qp, i))->opcode) &&
		    !swi->done)
			qp->rd_outstanding--;
		swi->msn_set = false;
		swi->done = false;
		swi->rcvd = 0;
	}
	if (from == qp->sq_intake)
		return;
	qp->sq_tx = from;
	qp->tx_msn = qp->rnr_msn;
	qp->tx_wqe_off = 0;
}

/* First/middle/last/only opcode of a request segment. */
static u8 trdma_req_opcode(u8 wr_op, bool first, bool last)
{
	bool imm = trdma_has_imm(wr_op);

	if (trdma_has_ieth(wr_op) && last)
		return first ? TRDMA_OP_SEND_ONLY_INV : TRDMA_OP_SEND_LAST_INV;

	if (trdma_is_read(wr_op))
		return TRDMA_OP_READ_REQUEST;
	/* 8 bytes: always one segment. */
	if (wr_op == TRDMA_WR_ATOMIC_WRITE)
		return TRDMA_OP_ATOMIC_WRITE;
	if (trdma_is_write(wr_op)) {
		if (first && last)
			return imm ? TRDMA_OP_WRITE_ONLY_IMM : TRDMA_OP_WRITE_ONLY;
		if (first)
			return TRDMA_OP_WRITE_FIRST;
		if (last)
			return imm ? TRDMA_OP_WRITE_LAST_IMM : TRDMA_OP_WRITE_LAST;
		return TRDMA_OP_WRITE_MIDDLE;
	}
	if (first && last)
		return imm ? TRDMA_OP_SEND_ONLY_IMM : TRDMA_OP_SEND_ONLY;
	if (first)
		return TRDMA_OP_SEND_FIRST;
	if (last)
		return imm ? TRDMA_OP_SEND_LAST_IMM : TRDMA_OP_SEND_LAST;
	return TRDMA_OP_SEND_MIDDLE;
}

/* Writes the headers of the segment into seg->hdr. */
static void trdma_seg_hdr(struct trdma_tx_seg *seg, u8 op, u8 flags, u32 qpn,
			  u32 msn, const struct trdma_reth *reth,
			  const struct trdma_aeth *aeth, const __be32 *imm)
{
	struct trdma_bth *bth = (struct trdma_bth *)seg->hdr;
	u8 *p = seg->hdr + sizeof(*bth);

	memset(bth, 0, sizeof(*bth));
	bth->opcode = op;
	bth->flags = flags;
	bth->dest_qpn = cpu_to_be32(qpn);
	bth->msn = cpu_to_be32(msn);
	bth->offset = cpu_to_be32(seg->msg_off);
	bth->length = cpu_to_be32(seg->len);
	if (reth) {
		memcpy(p, reth, sizeof(*reth));
		p += sizeof(*reth);
	}
	if (aeth) {
		memcpy(p, aeth, sizeof(*aeth));
		p += sizeof(*aeth);
	}
	if (imm) {
		memcpy(p, imm, sizeof(*imm));
		p += sizeof(*imm);
	}
	seg->hdr_len = p - seg->hdr;
	seg->hdr_sent = 0;
	seg->sent = 0;
	seg->copied = false;
	seg->opt_noted = false;
}

/*
 * Whether the requester asks for a prompt ACK of a SEND or WRITE
 * (TRDMA_BTH_ACKREQ): when the application waits for its completion
 * (signaled), and on every message whose MSN is a multiple of a quarter of
 * the SQ, so that unsignaled WQEs free their slots well before the SQ
 * fills.  The responder may hold the ACK of the others a while to
 * acknowledge them with a later one (ack_coalesce_us).
 */
static bool trdma_tx_wants_ack(const struct trdma_qp *qp,
			       const struct trdma_sqe *sqe,
			       const struct trdma_swqe_info *swi)
{
	u32 every = max(1U, qp->sq.num_slots / 4);

	return sqe->flags & TRDMA_WQE_SIGNALED || qp->sq_sig_all ||
	       !(swi->msn & (every - 1));
}

/*
 * REG_MR and LOCAL_INV took effect at the intake and send nothing: the
 * transmitter passes them and they retire in SQ order, after the requests
 * before them are acknowledged.  Under qp->lock.
 */
static void trdma_tx_pass_local(struct trdma_qp *qp)
{
	bool passed = false;

	while (qp->sq_tx != qp->sq_intake &&
	       trdma_sqe_is_local(trdma_swq_slot(qp, qp->sq_tx))) {
		qp->swi[qp->sq_tx & (qp->sq.num_slots - 1)].done = true;
		qp->sq_tx++;
		passed = true;
	}
	if (passed)
		trdma_sq_retire(qp);
}

/*
 * Puts the next segment of the send queue into qp->seg, with the AETH
 * aeth carried along when not NULL.  Returns false when no request may go
 * now.  Under qp->lock, by the transmitter.
 */
static bool trdma_tx_req_seg(struct trdma_qp *qp,
			     const struct trdma_aeth *aeth)
{
	struct trdma_tx_seg *seg = &qp->seg;
	u32 dqpn = qp->attr.dest_qp_num;
	u8 carry = aeth ? TRDMA_BTH_AETH : 0;
	struct trdma_swqe_info *swi;
	struct trdma_sqe *sqe;
	bool first;
	u32 idx;

	if (qp->rnr_rewind && qp->state == IB_QPS_RTS)
		trdma_tx_rewind(qp);
	if (qp->state == IB_QPS_RTS)
		trdma_tx_pass_local(qp);
	if (qp->state != IB_QPS_RTS || qp->sq_tx == qp->sq_intake ||
	    time_before(jiffies, qp->rnr_until))
		return false;
	idx = qp->sq_tx;
	sqe = trdma_swq_slot(qp, idx);
	swi = &qp->swi[idx & (qp->sq.num_slots - 1)];
	first = !swi->msn_set;
	if (first) {
		u32 max_rd = min_t(u32, qp->attr.max_rd_atomic,
				   qp->peer_rd_atomic);

		if (trdma_is_read(sqe->opcode) && qp->rd_outstanding >= max_rd)
			return false;
		if (sqe->flags & TRDMA_WQE_FENCE && qp->rd_outstanding)
			return false;
		swi->msn = qp->tx_msn++;
		swi->msn_set = true;
		qp->tx_wqe_off = 0;
		if (trdma_is_read(sqe->opcode))
			qp->rd_outstanding++;
	}

	seg->kind = TRDMA_SEG_WQE;
	seg->wqe = idx;
	seg->msg_off = qp->tx_wqe_off;
	if (trdma_is_atomic(sqe->opcode)) {
		struct trdma_atomic_eth ateth = {
			.va = cpu_to_be64(sqe->remote_addr),
			.rkey = cpu_to_be32(sqe->rkey),
			.swap_add = cpu_to_be64(sqe->opcode ==
						IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ?
						sqe->swap : sqe->compare_add),
			.compare = cpu_to_be64(sqe->compare_add),
		};

		seg->len = 0;
		seg->last = true;
		trdma_seg_hdr(seg, sqe->opcode == IB_UVERBS_WR_ATOMIC_CMP_AND_SWP ?
			      TRDMA_OP_COMPARE_SWAP : TRDMA_OP_FETCH_ADD,
			      TRDMA_BTH_ACKREQ | carry, dqpn, swi->msn, NULL, NULL,
			      NULL);
		/* AtomicETH, then the AETH carried along. */
		memcpy(seg->hdr + seg->hdr_len, &ateth, sizeof(ateth));
		seg->hdr_len += sizeof(ateth);
		if (aeth) {
			memcpy(seg->hdr + seg->hdr_len, aeth, sizeof(*aeth));
			seg->hdr_len += sizeof(*aeth);
		}
	} else if (trdma_is_read(sqe->opcode)) {
		struct trdma_reth reth = {
			.va = cpu_to_be64(sqe->remote_addr),
			.rkey = cpu_to_be32(sqe->rkey),
			.dma_len = cpu_to_be32(swi->len),
		};

		seg->len = 0;
		seg->last = true;
		trdma_seg_hdr(seg, TRDMA_OP_READ_REQUEST,
			      TRDMA_BTH_ACKREQ | carry, dqpn, swi->msn, &reth, aeth,
			      NULL);
	} else {
		struct trdma_reth reth = {
			.va = cpu_to_be64(sqe->remote_addr),
			.rkey = cpu_to_be32(sqe->rkey),
			.dma_len = cpu_to_be32(swi->len),
		};
		/* ImmDt is kept in network order; the IETH's rkey is not. */
		__be32 imm = trdma_has_ieth(sqe->opcode) ?
			     cpu_to_be32(sqe->imm_data) :
			     (__force __be32)sqe->imm_data;
		u8 bflags = carry, op;

		seg->len = min_t(u32, swi->len - seg->msg_off, TRDMA_MAX_SEG);
		seg->last = seg->msg_off + seg->len == swi->len;
		first = seg->msg_off == 0;
		op = trdma_req_opcode(sqe->opcode, first, seg->last);
		/* UC: the RoCE UC opcode; nothing acknowledges it. */
		if (trdma_qp_is_uc(qp))
			op |= TRDMA_OP_UC;
		if (seg->last) {
			if (sqe->flags & TRDMA_WQE_SOLICITED)
				bflags |= TRDMA_BTH_SE;
			if (!trdma_qp_is_uc(qp) &&
			    trdma_tx_wants_ack(qp, sqe, swi))
				bflags |= TRDMA_BTH_ACKREQ;
		}
		trdma_seg_hdr(seg, op, bflags, dqpn, swi->msn,
			      trdma_has_reth(sqe->opcode) && first ? &reth :
								     NULL,
			      aeth,
			      (trdma_has_imm(sqe->opcode) ||
			       trdma_has_ieth(sqe->opcode)) && seg->last ? &imm :
									   NULL);
	}
	trdma_tx_ack_sample(qp);
	return true;
}

/* The AETH of the ACK (or NAK) owed.  Under qp->lock. */
static struct trdma_aeth trdma_tx_owed_aeth(const struct trdma_qp *qp)
{
	return (struct trdma_aeth){
		.syndrome = qp->ack_syndrome,
		.msn = cpu_to_be32(qp->ack_msn),
	};
}

/* The owed ACK (or NAK) goes alone: into qp->seg.  Under qp->lock. */
static void trdma_tx_ack_seg(struct trdma_qp *qp)
{
	struct trdma_tx_seg *seg = &qp->seg;
	struct trdma_aeth aeth = trdma_tx_owed_aeth(qp);

	trdma_tx_ack_went(qp);
	seg->kind = TRDMA_SEG_CTRL;
	seg->len = 0;
	seg->msg_off = 0;
	seg->last = true;
	trdma_seg_hdr(seg, TRDMA_OP_ACK, 0, qp->attr.dest_qp_num, qp->ack_msn,
		      NULL, &aeth, NULL);
}

/*
 * Picks the next segment to put on the wire into qp->seg.  Returns false
 * when there is nothing to send now.  By the transmitter, under qp->lock.
 */
static bool trdma_tx_next_seg_locked(struct trdma_qp *qp)
{
	struct trdma_tx_seg *seg = &qp->seg;
	u32 dqpn = qp->attr.dest_qp_num;
	bool first, ok = true;

	lockdep_assert_held(&qp->lock);
	/*
	 * In ERR only what a refusal still owes goes out: the answers to the
	 * READs and atomics accepted before the refused request (requests
	 * are answered in order), then its NAK.
	 */
	if (!trdma_state_connected(qp->state) &&
	    !(qp->ack_pending && qp->close_after_nak)) {
		ok = false;
		goto out;
	}

	if (qp->ack_pending &&
	    !(qp->close_after_nak && qp->rd_head != qp->rd_tail)) {
		struct trdma_aeth aeth = trdma_tx_owed_aeth(qp);

		/*
		 * A plain ACK rides along with a request that goes out now
		 * (READ responses first, as they would go before it).
		 */
		if (qp->ack_syndrome == TRDMA_AETH_ACK &&
		    !qp->close_after_nak && qp->rd_head == qp->rd_tail &&
		    trdma_tx_req_seg(qp, &aeth)) {
			/* Held for this. */
			trdma_tx_ack_went(qp);
			goto out;
		}
		trdma_tx_ack_seg(qp);
		goto out;
	}

	if (qp->rd_head != qp->rd_tail) {
		struct trdma_rd_resp *r = trdma_tx_rd_head(qp);
		struct trdma_aeth aeth = {
			.syndrome = TRDMA_AETH_ACK,
			.msn = cpu_to_be32(r->msn),
		};
		bool last;
		u8 op;

		if (r->atomic) {
			struct trdma_atomic_ack_eth ack = {
				.orig = cpu_to_be64(r->orig),
			};

			seg->kind = TRDMA_SEG_RDRESP;
			seg->msg_off = 0;
			seg->len = 0;
			seg->last = true;
			trdma_seg_hdr(seg, TRDMA_OP_ATOMIC_ACK, 0, dqpn, r->msn,
				      NULL, &aeth, NULL);
			memcpy(seg->hdr + seg->hdr_len, &ack, sizeof(ack));
			seg->hdr_len += sizeof(ack);
			goto out;
		}

		first = r->sent == 0;
		seg->kind = TRDMA_SEG_RDRESP;
		seg->msg_off = r->sent;
		seg->len = min_t(u32, r->len - r->sent, TRDMA_MAX_SEG);
		last = r->sent + seg->len == r->len;
		seg->last = last;
		op = first && last ? TRDMA_OP_READ_RESPONSE_ONLY :
		     first ? TRDMA_OP_READ_RESPONSE_FIRST :
		     last ? TRDMA_OP_READ_RESPONSE_LAST :
			    TRDMA_OP_READ_RESPONSE_MIDDLE;
		trdma_seg_hdr(seg, op, 0, dqpn, r->msn, NULL,
			      op == TRDMA_OP_READ_RESPONSE_MIDDLE ? NULL : &aeth,
			      NULL);
		goto out;
	}

	ok = trdma_tx_req_seg(qp, NULL);
out:
	if (!ok)
		seg->kind = TRDMA_SEG_NONE;
	return ok;
}

/* trdma_tx_next_seg_locked(), taking qp->lock.  By the transmitter. */
static bool trdma_tx_next_seg(struct trdma_qp *qp)
{
	unsigned long flags;
	bool ok;

	spin_lock_irqsave(&qp->lock, flags);
	ok = trdma_tx_next_seg_locked(qp);
	spin_unlock_irqrestore(&qp->lock, flags);
	return ok;
}

/*
 * Hands len bytes at buf to TCP, never waiting; locked: the caller holds
 * the socket (its spinlock, in softirq, or owns it, trdma_tx_sock_hold()).
 * Bytes taken, or -errno.
 */
static int trdma_tx_copy(struct sock *sk, bool locked, const void *buf,
			 u32 len, int flags)
{
	struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = {
		.msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL | flags,
	};

	if (locked)
		return kernel_sendmsg_locked(sk, &msg, &iov, 1, len);
	return kernel_sendmsg(sk->sk_socket, &msg, &iov, 1, len);
}

/*
 * The MR key names, referenced, if it lets this QP's PD access [va, va +
 * len) with access; NULL otherwise.
 */
static struct trdma_mr *trdma_tx_mr_get(struct trdma_qp *qp, u32 key, u64 va,
					u32 len, int access)
{
	return trdma_rkey_get(qp, key, va, len, access);
}

/*
 * The SGE of sqe holding byte *off of its payload, *off then the offset in
 * it; NULL past the end.
 */
static const struct trdma_sge *trdma_sge_at(const struct trdma_sqe *sqe,
					    u32 *off)
{
	int i;

	for (i = 0; i < sqe->num_sge; i++) {
		if (*off < sqe->sge[i].length)
			return &sqe->sge[i];
		*off -= sqe->sge[i].length;
	}
	return NULL;
}

/*
 * Copies len bytes from [va, va + len) of the MR key names to dst; sleep:
 * process context, where ODP pages are faulted in.  Returns 0, -EFAULT
 * when the key or its memory does not allow it (an error TCP's sends of
 * kernel memory never return), or -EAGAIN: try again (the worker).
 */
static int trdma_tx_mr_copy(struct trdma_qp *qp, u32 key, u64 va, u32 len,
			    int access, u8 *dst, bool sleep)
{
	struct trdma_mr *mr = trdma_tx_mr_get(qp, key, va, len, access);

	if (!mr)
		return -EFAULT;
	/* Its pages may be faulted in or mapped, sleeping: the socket free. */
	if (sleep && (mr->odp || mr->dmabuf))
		trdma_tx_sock_let_go(qp);
	while (len) {
		u32 pg_off, n;
		struct page *page = trdma_mr_page_get(mr, va, false, &pg_off,
						      sleep);
		void *src;

		if (IS_ERR(page)) {
			trdma_mr_put(mr);
			if (PTR_ERR(page) != -EAGAIN)
				return -EFAULT;
			/* From the receive path, or raced: the worker again. */
			trdma_tx_kick(qp);
			return -EAGAIN;
		}
		n = min_t(u32, len, PAGE_SIZE - pg_off);
		src = kmap_local_page(page);
		memcpy(dst, src + pg_off, n);
		kunmap_local(src);
		trdma_mr_page_put(mr, page, false);
		dst += n;
		va += n;
		len -= n;
	}
	trdma_mr_put(mr);
	return 0;
}

/*
 * Copies len bytes at offset off of a checked send WQE's payload, from its
 * inline data (or an atomic write's 8 bytes) or its SGEs, to dst.  Returns
 * 0, -EFAULT or -EINVAL.
 */
int trdma_sqe_gather(struct trdma_qp *qp, const struct trdma_sqe *sqe,
		     u32 off, u32 len, u8 *dst)
{
	const u8 *data = trdma_sqe_data(sqe);
	int rv;

	if (data) {
		memcpy(dst, data + off, len);
		return 0;
	}
	while (len) {
		u32 at = off, n;
		const struct trdma_sge *sge = trdma_sge_at(sqe, &at);

		if (!sge)
			return -EINVAL;
		n = min(len, sge->length - at);
		rv = trdma_tx_mr_copy(qp, sge->lkey, sge->addr + at, n, 0, dst,
				      true);
		if (rv)
			return rv;
		dst += n;
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * Copies the payload of the current segment (at most TRDMA_TX_COPY_MAX
 * bytes) behind its headers; locked: from the receive path (no faults).
 * Returns 0, -EFAULT, -EINVAL or -EAGAIN.
 */
static int trdma_tx_gather(struct trdma_qp *qp, bool locked)
{
	struct trdma_tx_seg *seg = &qp->seg;
	u8 *dst = seg->hdr + seg->hdr_len;
	u32 off = seg->msg_off, left = seg->len;
	struct trdma_rd_resp *r;
	struct trdma_sqe *sqe;

	if (seg->kind == TRDMA_SEG_RDRESP) {
		r = trdma_tx_rd_head(qp);
		return trdma_tx_mr_copy(qp, r->rkey, r->va + off, left,
					IB_ACCESS_REMOTE_READ, dst, !locked);
	}
	if (locked)
		return -EAGAIN;		/* requests go from process context */
	sqe = trdma_swq_slot(qp, seg->wqe);
	return trdma_sqe_gather(qp, sqe, off, left, dst);
}

/*
 * Sends up to len payload bytes from [va, va + len) of the MR key names:
 * the page itself, or with copy a copy of its bytes (TCP then holds no
 * reference to memory the application may reuse).  Returns bytes sent,
 * -EAGAIN, or -EFAULT when the key or its memory no longer allows it.
 */
static int trdma_tx_mr(struct trdma_qp *qp, struct socket *sock, u32 key,
		       u64 va, u32 len, int access, bool more, bool copy)
{
	struct trdma_mr *mr = trdma_tx_mr_get(qp, key, va, len, access);
	void *bounce = NULL;
	int flags, rv;
	u32 pg_off, n;
	struct page *page;

	if (!mr)
		return -EFAULT;
	/*
	 * Its pages may be faulted in or mapped, sleeping: not while the run
	 * owns the socket, whose receive path and TCP timers would wait.
	 */
	if (mr->odp || mr->dmabuf)
		trdma_tx_sock_let_go(qp);
	/*
	 * A dma-buf MR's bytes go through a bounce page: TCP keeps no
	 * reference to a page the exporter may move, and the page is given
	 * back before the send, so none is held across the socket lock's
	 * sleep or an allocation's reclaim, where the exporter's move_notify
	 * (under the buffer's reservation lock) would wait for it.
	 */
	if (mr->dmabuf) {
		bounce = kmalloc(PAGE_SIZE, GFP_KERNEL);
		if (!bounce) {
			trdma_mr_put(mr);
			return -ENOMEM;
		}
	}
	page = trdma_mr_page_get(mr, va, false, &pg_off, true);
	if (IS_ERR(page)) {
		trdma_mr_put(mr);
		kfree(bounce);
		if (PTR_ERR(page) != -EAGAIN)
			return -EFAULT;
		trdma_tx_kick(qp);	/* raced invalidations: again */
		return -EAGAIN;
	}
	n = min_t(u32, len, PAGE_SIZE - pg_off);
	flags = more || n < len ? MSG_MORE : 0;
	if (bounce) {
		void *src = kmap_local_page(page);

		memcpy(bounce, src + pg_off, n);
		kunmap_local(src);
		trdma_mr_page_put(mr, page, false);
		trdma_mr_put(mr);
		rv = trdma_tx_copy(sock->sk, qp->tx_sk_held, bounce, n, flags);
		kfree(bounce);
		return rv;
	}
	if (copy) {
		/* A local mapping may be held across the socket lock's sleep. */
		void *src = kmap_local_page(page);

		rv = trdma_tx_copy(sock->sk, qp->tx_sk_held, src + pg_off, n,
				   flags);
		kunmap_local(src);
	} else {
		rv = trdma_sendpage(sock->sk, qp->tx_sk_held, page, pg_off, n,
				    MSG_DONTWAIT | MSG_NOSIGNAL | flags);
	}
	trdma_mr_page_put(mr, page, false);
	trdma_mr_put(mr);
	return rv;
}

/* Sends payload of the current WQE segment from its SGEs or inline data. */
static int trdma_tx_wqe_payload(struct trdma_qp *qp, struct socket *sock)
{
	struct trdma_tx_seg *seg = &qp->seg;
	struct trdma_sqe *sqe = trdma_swq_slot(qp, seg->wqe);
	u32 off = seg->msg_off + seg->sent, left = seg->len - seg->sent;
	const u8 *data = trdma_sqe_data(sqe);
	const struct trdma_sge *sge;

	if (data)
		return trdma_tx_copy(sock->sk, qp->tx_sk_held, data + off, left,
				     0);

	sge = trdma_sge_at(sqe, &off);
	if (!sge)
		return -EINVAL;
	return trdma_tx_mr(qp, sock, sge->lkey, sge->addr + off,
			   min(left, sge->length - off), 0,
			   left > sge->length - off, trdma_qp_is_uc(qp));
}

static int trdma_tx_rdresp_payload(struct trdma_qp *qp, struct socket *sock)
{
	struct trdma_tx_seg *seg = &qp->seg;
	struct trdma_rd_resp *r = trdma_tx_rd_head(qp);

	return trdma_tx_mr(qp, sock, r->rkey, r->va + seg->msg_off + seg->sent,
			   seg->len - seg->sent, IB_ACCESS_REMOTE_READ, false,
			   false);
}

/*
 * Whether all of the segment is in seg->hdr: a header-only segment, or one
 * whose payload was copied there.  Such a segment goes to TCP in one call
 * that ends it (trdma_txopt_eor()).
 */
static bool trdma_seg_flat(const struct trdma_tx_seg *seg)
{
	return seg->copied || !seg->len;
}

/*
 * Corking (tx_cork).  A small segment (one that goes in one call,
 * trdma_seg_flat()) with more ready behind it goes to TCP with MSG_MORE
 * and without the EOR mark, so that TCP puts it and the ones after it
 * into one skb, one TCP segment and one receive upcall, not one each.
 * The corked run is bounded by the MSS, less the room TCP's own options
 * may take from it (tcp_current_mss()): a segment that would take it
 * past that starts a new skb (trdma_txopt_boundary()), so GSO never
 * splits an skb holding bytes of two trdma segments and the TCP option
 * of each packet names the segment of its first byte.  The last segment
 * of a batch goes without MSG_MORE and with the EOR mark, which pushes
 * the run; where the transmitter stops with a corked run (what it
 * guessed would follow could not go, the socket is full) it pushes it
 * before it lets go (trdma_tx_uncork()), so nothing stays corked while
 * it is idle and the receive path's ACKs (trdma_tx_ack_from_rx()), which
 * never cork, never queue behind held bytes.  Not over kTLS, whose
 * MSG_MORE holds its record open.
 */

/*
 * Whether a segment is ready behind the current one: a guess, without
 * qp->lock.  Wrong, it costs a push or a missed packing, never bytes.
 */
static bool trdma_tx_more_ready(struct trdma_qp *qp)
{
	const struct trdma_tx_seg *seg = &qp->seg;
	u32 rd_head = READ_ONCE(qp->rd_head);

	if (READ_ONCE(qp->ack_pending))
		return true;	/* goes next, carried or alone */
	if (seg->kind == TRDMA_SEG_RDRESP && seg->last)
		rd_head++;
	if (rd_head != READ_ONCE(qp->rd_tail))
		return true;
	if (seg->kind == TRDMA_SEG_WQE)
		return !seg->last || seg->wqe + 1 != READ_ONCE(qp->sq_intake);
	return READ_ONCE(qp->sq_tx) != READ_ONCE(qp->sq_intake);
}

/* The most bytes a corked run may hold. */
static u32 trdma_tx_cork_room(struct sock *sk)
{
	u32 mss = READ_ONCE(tcp_sk(sk)->mss_cache);

	return mss > MAX_TCP_OPTION_SPACE ? mss - MAX_TCP_OPTION_SPACE : 0;
}

/*
 * A segment's first bytes are about to go (process context): decide
 * whether it is corked, ending the corked run before it where it would
 * not fit.
 */
static void trdma_tx_cork_decide(struct trdma_qp *qp, struct socket *sock)
{
	struct trdma_tx_seg *seg = &qp->seg;
	u32 len = seg->hdr_len + seg->len, room;

	seg->corked = false;
	if (!READ_ONCE(trdma_tx_cork_on) && !qp->tx_cork_len)
		return;
	room = trdma_tx_cork_room(sock->sk);
	if (qp->tx_cork_len && qp->tx_cork_len + len > room) {
		trdma_txopt_boundary(qp, sock);
		qp->tx_cork_len = 0;
	}
	if (READ_ONCE(trdma_tx_cork_on) && !qp->tls && trdma_seg_flat(seg) &&
	    len <= room && trdma_tx_more_ready(qp)) {
		seg->corked = true;
		qp->tx_cork_len += len;
	}
}

/*
 * The transmitter stops: push a corked run, ending its skb.  Process
 * context, owning.
 */
static void trdma_tx_uncork(struct trdma_qp *qp)
{
	if (!qp->tx_cork_len || !qp->sock)
		return;
	trdma_txopt_boundary(qp, qp->sock);
	tcp_sock_set_cork(qp->sock->sk, false);
	qp->tx_cork_len = 0;
}

/*
 * The transmitter's run owns its socket (tx_hold_sock): lock_sock() before
 * its first send, release_sock() when it stops, the *_locked sends between,
 * as tcp_sendmsg() owns it for one write(); not a lock and a release per
 * call, one per page of a message and one per small segment.  What arrives
 * meanwhile (TCP's ACKs, the peer's requests and answers) waits in the
 * socket's backlog, and what TCP's timers and TSQ find while the socket is
 * owned waits for its release (tcp_release_cb()).  After each send where
 * either waits, the run lets go of the socket and takes it again, which
 * does both, as each send's own release did before; where nothing waits
 * it goes on owning it.  (Reading only the backlog, sk_flush_backlog(),
 * which in 6.1 leaves TCP's deferred work for later, and reading it only
 * every 16 sends, as tcp_sendmsg() does every 16 skbs, measured no better:
 * docs/performance.md.)  The data segments of a run leave from its CPU: an
 * ACK processed in a softirq elsewhere while the run owns the socket does
 * not send the bytes it lets out from there.  Nothing that may sleep on
 * MR memory (an ODP MR's faults, a dma-buf's mapping, a READ's prefetch)
 * runs while it owns the socket: it lets go first, and takes the socket
 * again at the next segment.  Allocations may sleep while it owns it (the
 * option's records growing), as tcp_sendmsg()'s own do.  Not over kTLS or
 * another upper layer protocol, whose sendmsg takes the lock itself.
 * Process context, owning the transmitter (so never waiting for the
 * TRDMA_TX_OWNED bit while owning the socket).
 */
static void trdma_tx_sock_hold(struct trdma_qp *qp)
{
	struct sock *sk = qp->sock->sk;

	if (qp->tx_sk_held || qp->tls || inet_csk(sk)->icsk_ulp_ops ||
	    !READ_ONCE(trdma_tx_hold_sock_on))
		return;
	lock_sock(sk);
	qp->tx_sk_held = true;
}

/*
 * Ends the run's ownership: when the run stops, and before what may sleep
 * on MR memory (trdma_tx_mr(), trdma_tx_mr_copy(), trdma_sqe_prefetch()).
 * The transmitter only.
 */
void trdma_tx_sock_let_go(struct trdma_qp *qp)
{
	if (!qp->tx_sk_held)
		return;
	lockdep_assert_held(&qp->tx_mutex);
	qp->tx_sk_held = false;
	release_sock(qp->sock->sk);
}

/* TCP's work that waits for the socket's owner (tcp_release_cb()). */
#define TRDMA_TCP_DEFERRED	(TCPF_TSQ_DEFERRED | TCPF_WRITE_TIMER_DEFERRED | \
				 TCPF_DELACK_TIMER_DEFERRED | \
				 TCPF_MTU_REDUCED_DEFERRED)

/* A send or segment went: what waits for the socket, done now. */
static void trdma_tx_sock_sent(struct trdma_qp *qp)
{
	struct sock *sk = qp->sock->sk;

	if (!qp->tx_sk_held)
		return;
	if (!READ_ONCE(sk->sk_backlog.tail) &&
	    !(READ_ONCE(sk->sk_tsq_flags) & TRDMA_TCP_DEFERRED))
		return;
	release_sock(sk);
	lock_sock(sk);
	trdma_count(qp->tdev, TRDMA_CNT_TX_BACKLOG_FLUSHES, 1);
}

/*
 * Pushes the current segment.  0 when all of it is out.  A small payload
 * is copied behind the headers and goes with them in one call; the last
 * bytes of a segment sent that way carry MSG_EOR (TCP starts the next
 * segment in a new skb, for the TCP option), saving trdma_txopt_end() the
 * socket lock.  locked: from the receive path (see trdma_tx_own_from_rx()),
 * which sends only what is copied and gives up (-EAGAIN) where it would
 * have to wait or grow the option records.
 */
static int trdma_tx_push(struct trdma_qp *qp, struct socket *sock,
			 bool locked)
{
	struct trdma_tx_seg *seg = &qp->seg;
	u32 flat;
	int rv;

	if (!seg->opt_noted) {
		if (!locked && seg->kind == TRDMA_SEG_WQE)
			trdma_sqe_prefetch(qp, trdma_swq_slot(qp, seg->wqe));
		if (seg->len && seg->len <= TRDMA_TX_COPY_MAX) {
			rv = trdma_tx_gather(qp, locked);
			if (rv)
				return rv;
			seg->copied = true;
		}
		if (!locked)
			trdma_tx_cork_decide(qp, sock);
		else
			seg->corked = false;
		if (!trdma_txopt_begin(qp, sock->sk, seg->hdr_len + seg->len,
				       (const struct trdma_bth *)seg->hdr,
				       !locked) && locked)
			return -EAGAIN;
		seg->opt_noted = true;
	}
	if (!locked)
		trdma_tx_sock_hold(qp);
	flat = seg->hdr_len + (seg->copied ? seg->len : 0);
	while (seg->hdr_sent < flat) {
		rv = trdma_tx_copy(sock->sk, locked || qp->tx_sk_held,
				   seg->hdr + seg->hdr_sent,
				   flat - seg->hdr_sent,
				   !trdma_seg_flat(seg) || seg->corked ?
				   MSG_MORE : trdma_txopt_eor(qp));
		if (rv < 0)
			return rv;
		seg->hdr_sent += rv;
	}
	if (seg->copied)
		seg->sent = seg->len;
	if (locked && seg->sent < seg->len)
		return -EAGAIN;		/* pages go from process context */
	while (seg->sent < seg->len) {
		rv = seg->kind == TRDMA_SEG_WQE ?
			trdma_tx_wqe_payload(qp, sock) :
			trdma_tx_rdresp_payload(qp, sock);
		if (rv < 0)
			return rv;
		if (rv == 0)
			return -EAGAIN;
		seg->sent += rv;
		trdma_tx_sock_sent(qp);
	}
	return 0;
}

static void trdma_tx_count(struct trdma_qp *qp)
{
	const struct trdma_bth *bth = (void *)qp->seg.hdr;
	struct trdma_dev *tdev = qp->tdev;

	trdma_count(tdev, TRDMA_CNT_TX_SEGMENTS, 1);
	trdma_count(tdev, TRDMA_CNT_TX_BYTES, qp->seg.hdr_len + qp->seg.len);
	if (bth->flags & TRDMA_BTH_AETH)
		trdma_count(tdev, TRDMA_CNT_ACKS_CARRIED, 1);
	if (bth->opcode == TRDMA_OP_ACK) {
		const struct trdma_aeth *aeth = (void *)(bth + 1);

		trdma_count(tdev, aeth->syndrome == TRDMA_AETH_ACK ?
			    TRDMA_CNT_ACKS_SENT :
			    (aeth->syndrome & 0xe0) == TRDMA_AETH_RNR_NAK ?
			    TRDMA_CNT_RNR_NAKS_SENT : TRDMA_CNT_NAKS_SENT, 1);
	}
}

/*
 * The answer to the WQE whose last segment is being pushed arrived before
 * the transmitter did its bookkeeping (the peer on another CPU, or over
 * loopback): the peer has every byte of it, so the transmitter reads that
 * WQE no more.  Move sq_tx past it so it retires now, in order with what
 * the peer sent after the answer: a send completion that showed after the
 * receive completion of the reply it caused confuses applications that
 * wait for one event per completion (perftest -e) and, with a CQ of one
 * slot, overflows it.  Under qp->lock.
 */
void trdma_tx_answered(struct trdma_qp *qp)
{
	const struct trdma_tx_seg *seg = &qp->seg;

	lockdep_assert_held(&qp->lock);
	if (qp->sq_tx != qp->sq_intake && seg->kind == TRDMA_SEG_WQE &&
	    seg->wqe == qp->sq_tx && seg->last &&
	    qp->swi[qp->sq_tx & (qp->sq.num_slots - 1)].done) {
		/* trdma_tx_seg_done() finds sq_tx moved and leaves it. */
		qp->sq_tx++;
		qp->tx_wqe_off = 0;
	}
}

/*
 * Bookkeeping once the current segment is entirely on the wire; with next,
 * then picks the one after it under the same hold of qp->lock (one lock
 * round trip per segment, not two), unless a NAK that closes the
 * connection is owed or went.  True when next picked a segment.
 */
static bool trdma_tx_seg_done(struct trdma_qp *qp, bool next)
{
	struct trdma_tx_seg *seg = &qp->seg;
	unsigned long flags;
	bool picked = false;

	spin_lock_irqsave(&qp->lock, flags);
	if (seg->kind == TRDMA_SEG_WQE)
		WRITE_ONCE(qp->last_req_tx, jiffies);
	if (seg->kind == TRDMA_SEG_WQE && qp->sq_tx == seg->wqe) {
		qp->tx_wqe_off += seg->len;
		if (seg->last) {
			/* UC: TCP has all of it (copied); nothing answers. */
			if (trdma_qp_is_uc(qp))
				trdma_swi(qp, seg->wqe)->done = true;
			qp->sq_tx++;
			qp->tx_wqe_off = 0;
			/* It may have been answered already. */
			trdma_sq_retire(qp);
		}
	} else if (seg->kind == TRDMA_SEG_RDRESP &&
		   qp->rd_head != qp->rd_tail) {
		struct trdma_rd_resp *r = trdma_tx_rd_head(qp);

		r->sent += seg->len;
		if (seg->last)
			qp->rd_head++;
	}
	seg->kind = TRDMA_SEG_NONE;
	if (next && !qp->close_after_nak)
		picked = trdma_tx_next_seg_locked(qp);
	spin_unlock_irqrestore(&qp->lock, flags);
	return picked;
}

/*
 * The current segment is all queued in TCP: close its record, count it;
 * with next, pick the next one (trdma_tx_seg_done()).  From the receive
 * path the segment is flat (trdma_tx_push() in locked mode sends nothing
 * else), so no socket lock is taken there.
 */
static bool trdma_tx_seg_sent(struct trdma_qp *qp, bool next)
{
	trdma_txopt_end(qp, qp->sock, qp->seg.hdr_len + qp->seg.len,
			trdma_seg_flat(&qp->seg));
	/* Not corked: its last bytes pushed the run before it. */
	if (qp->seg.corked)
		trdma_count(qp->tdev, TRDMA_CNT_TX_CORKED, 1);
	else
		qp->tx_cork_len = 0;
	trdma_tx_count(qp);
	return trdma_tx_seg_done(qp, next);
}

/*
 * The current WQE's local memory could not be read (its MR gone or
 * changed since the intake checked it, an ODP page that cannot be
 * faulted in): the WQE completes with a local protection error, the rest
 * are flushed, as on IB.  Part of its segment may be in TCP already, so
 * nothing more goes on this connection: the segment is dropped, the QP
 * errs before the transmitter lets go (no other can send meanwhile), and
 * the connection is closed.  Returns TRDMA_TX_WQE_FAILED, which
 * trdma_tx_run() passes on.  Owning, under tx_mutex.
 */
#define TRDMA_TX_WQE_FAILED	1

static int trdma_tx_wqe_failed(struct trdma_qp *qp)
{
	u32 idx = qp->seg.wqe;
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->state == IB_QPS_RTS &&
	    idx - qp->sq_retire < qp->sq_intake - qp->sq_retire) {
		struct trdma_swqe_info *swi = trdma_swi(qp, idx);

		if (swi->status == IB_WC_SUCCESS)
			swi->status = IB_WC_LOC_PROT_ERR;
	}
	qp->seg.kind = TRDMA_SEG_NONE;
	spin_unlock_irqrestore(&qp->lock, flags);
	/* Its completion tells the application: no async event. */
	trdma_qp_wr_error(qp);
	return TRDMA_TX_WQE_FAILED;
}

/* Puts what there is to send on the wire.  Under tx_mutex, owning. */
static int trdma_tx_run(struct trdma_qp *qp)
{
	int rv = 0;

	lockdep_assert_held(&qp->tx_mutex);
	while (qp->sock) {
		if (qp->seg.kind == TRDMA_SEG_NONE && !trdma_tx_next_seg(qp)) {
			trdma_frag_note(qp, qp->sock->sk);
			break;
		}
		rv = trdma_tx_push(qp, qp->sock, false);
		if (rv == -EAGAIN)
			break;	/* write_space kicks us again */
		if (rv == -EFAULT && qp->seg.kind == TRDMA_SEG_WQE)
			rv = trdma_tx_wqe_failed(qp);
		if (rv)
			break;
		/* Picks the next segment too, or finds there is none. */
		if (!trdma_tx_seg_sent(qp, true) && !qp->close_after_nak) {
			trdma_frag_note(qp, qp->sock->sk);
			break;
		}
		trdma_tx_sock_sent(qp);
		if (qp->close_after_nak && !qp->ack_pending) {
			/* The NAK is out: now the connection goes. */
			qp->close_after_nak = false;
			refcount_inc(&qp->ref);
			if (!queue_work(trdma_wq, &qp->fatal_work))
				trdma_qp_put(qp);
			break;
		}
	}
	trdma_tx_sock_let_go(qp);
	trdma_tx_uncork(qp);
	return rv;
}

static void trdma_tx_failed(struct trdma_qp *qp, int rv)
{
	/* A WQE's own error: trdma_tx_wqe_failed() dealt with it. */
	if (rv && rv != -EAGAIN && rv != TRDMA_TX_WQE_FAILED) {
		ibdev_dbg(qp->ibqp.device, "QP %u: transmit failed: %d\n",
			  qp->ibqp.qp_num, rv);
		trdma_qp_fatal(qp, IB_EVENT_QP_FATAL);
	}
}

/*
 * Becomes the QP's transmitter (trdma_qp.tx_flags): process context with
 * tx_mutex held, so the only other owner there can be is softirq sending
 * one ACK (the receive path, the ACK hold's tasklet).
 */
static void trdma_tx_own(struct trdma_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	while (test_and_set_bit_lock(TRDMA_TX_OWNED, &qp->tx_flags))
		cpu_relax();
}

static void trdma_tx_disown(struct trdma_qp *qp)
{
	clear_bit_unlock(TRDMA_TX_OWNED, &qp->tx_flags);
}

/*
 * Becomes the QP's transmitter in softirq, for one ACK or small response:
 * only when no one else transmits, a connection is attached (owning keeps
 * it so: attach and detach own too) and no segment is half out.  Returns
 * that connection's socket, NULL when not owning.
 */
static struct sock *trdma_tx_own_softirq(struct trdma_qp *qp)
{
	/* kTLS sends under the socket lock only: never from softirq. */
	if (qp->tls || test_and_set_bit_lock(TRDMA_TX_OWNED, &qp->tx_flags))
		return NULL;
	if (qp->sock && qp->seg.kind == TRDMA_SEG_NONE)
		return qp->sock->sk;
	trdma_tx_disown(qp);
	return NULL;
}

/*
 * Becomes the QP's transmitter from the receive path: softirq, in the
 * socket sk's sk_data_ready or sk_state_change with its spinlock held and
 * no process owning it, where TCP sends its own ACKs from.
 */
static bool trdma_tx_own_from_rx(struct trdma_qp *qp, struct sock *sk)
{
	struct sock *owned;

	if (sock_owned_by_user(sk))
		return false;
	owned = trdma_tx_own_softirq(qp);
	if (owned == sk)
		return true;
	if (owned)
		trdma_tx_disown(qp);
	return false;
}

/*
 * Pushes qp->seg from softirq (the receive path, the ACK hold's tasklet),
 * owning, with the socket's spinlock; cnt counts it.  True when all of it
 * went (else the worker sends the rest).
 */
static bool trdma_tx_push_from_rx(struct trdma_qp *qp, struct sock *sk,
				  enum trdma_counter cnt)
{
	gfp_t gfp = sk->sk_allocation;
	int rv;

	/*
	 * No sleeping allocation; and not current's page_frag, which
	 * trdma_cm_tune() turned off where the kernel has sk_use_task_frag
	 * and GFP_ATOMIC keeps off where it has not.
	 */
	sk->sk_allocation = GFP_ATOMIC;
	rv = trdma_tx_push(qp, qp->sock, true);
	sk->sk_allocation = gfp;
	if (rv)
		return false;
	trdma_tx_seg_sent(qp, false);
	trdma_count(qp->tdev, cnt, 1);
	trdma_frag_note(qp, sk);
	return true;
}

/*
 * Sends the owed ACK in softirq, owning the transmitter and holding the
 * socket's spinlock (no process owning the socket); cnt counts it.  A NAK
 * that closes the connection is left to the worker.  False when the ACK
 * is not all out: then the worker sends what is left.
 */
static bool trdma_tx_ack_owned(struct trdma_qp *qp, struct sock *sk,
			       enum trdma_counter cnt)
{
	unsigned long flags;
	bool owed, built = false, done = false;

	spin_lock_irqsave(&qp->lock, flags);
	owed = qp->ack_pending;
	if (owed && !qp->close_after_nak && trdma_state_connected(qp->state)) {
		trdma_tx_ack_seg(qp);
		built = true;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	if (built)
		done = trdma_tx_push_from_rx(qp, sk, cnt);
	return done || !owed;
}

/*
 * Sends the owed ACK from the receive path (trdma_tx_own_from_rx()).
 * Saves waking the worker (two context switches, and on an idle CPU a
 * wake-up) per ACK of a one-way stream.
 */
static bool trdma_tx_ack_from_rx(struct trdma_qp *qp, struct sock *sk)
{
	bool done;

	if (!trdma_tx_own_from_rx(qp, sk))
		return false;
	done = trdma_tx_ack_owned(qp, sk, TRDMA_CNT_TX_FROM_RX);
	trdma_tx_disown(qp);
	return done;
}

/* The socket's spinlock, tried (softirq, BHs off): then the ACK. */
static bool trdma_tx_ack_try_sock(struct trdma_qp *qp, struct sock *sk)
{
	bool done = false;

	if (!spin_trylock(&sk->sk_lock.slock))
		return false;
	if (!sock_owned_by_user(sk))
		done = trdma_tx_ack_owned(qp, sk, TRDMA_CNT_TX_FROM_TIMER);
	bh_unlock_sock(sk);
	return done;
}

/*
 * Sends the held ACK from its timer's tasklet (softirq), as the receive
 * path does: owning the transmitter, which keeps qp->sock attached (attach
 * and detach own it too), then trying the socket's spinlock (softirq only
 * tries: a process may spin for the transmitter bit meanwhile,
 * trdma_tx_own()), where no process owns the socket, as TCP's own timers
 * do.  Saves the worker's wake-up, which in a ping-pong preempts the
 * process polling for the answer on this CPU (the timer runs where the
 * request was received, over loopback the requester's CPU).  False when
 * the worker must.
 */
static bool trdma_tx_ack_from_timer(struct trdma_qp *qp)
{
	struct sock *sk = trdma_tx_own_softirq(qp);
	bool done;

	if (!sk)
		return false;
	done = trdma_tx_ack_try_sock(qp, sk);
	trdma_tx_disown(qp);
	return done;
}

/*
 * Sends READ and atomic responses from the receive path, as
 * trdma_tx_ack_from_rx() sends an ACK: those whose payload is copied (at
 * most TRDMA_TX_COPY_MAX bytes left), and only while no ACK is owed (that
 * goes first, by the worker).  Saves a READ of a few bytes the worker's
 * wake-up.  False when responses are left for the worker.
 */
static bool trdma_tx_resp_from_rx(struct trdma_qp *qp, struct sock *sk)
{
	unsigned long flags;
	bool left = true;

	if (!trdma_tx_own_from_rx(qp, sk))
		return false;
	for (;;) {
		const struct trdma_rd_resp *r;
		bool small;

		spin_lock_irqsave(&qp->lock, flags);
		left = qp->rd_head != qp->rd_tail;
		r = trdma_tx_rd_head(qp);
		small = left && !qp->ack_pending &&
			trdma_state_connected(qp->state) &&
			r->len - r->sent <= TRDMA_TX_COPY_MAX;
		spin_unlock_irqrestore(&qp->lock, flags);
		/* Only the receive path, which is us, adds responses. */
		if (!small || !trdma_tx_next_seg(qp) ||
		    !trdma_tx_push_from_rx(qp, sk, TRDMA_CNT_TX_FROM_RX))
			break;
	}
	trdma_tx_disown(qp);
	return !left;
}

/*
 * The receive path queued READ or atomic responses.  sk as for
 * trdma_tx_ack_soon(): they go from here where they can, else the worker
 * sends them.  Any context.
 */
void trdma_tx_resp_soon(struct trdma_qp *qp, struct sock *sk)
{
	if (!sk || !trdma_tx_resp_from_rx(qp, sk))
		trdma_tx_kick(qp);
}

/*
 * The peer closed its connection, and reads nothing more (a trdma peer
 * closes both ways): an ACK it did not ask for, held to go with a later
 * one, is dropped, so the QP owes it nothing (trdma_qp_peer_closed()).
 * Sent, it would only draw a reset.  Any context.
 */
void trdma_tx_ack_forget_unasked(struct trdma_qp *qp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (qp->ack_pending && !qp->ack_req)
		qp->ack_pending = false;
	spin_unlock_irqrestore(&qp->lock, flags);
}

/*
 * The SQ ring's tx_active (trdma-abi.h) of a user RC or UC QP: set before
 * a transmitter runs (trdma_tx_try() owning) or is queued to
 * (trdma_tx_kick_user()), so that the provider posts without a doorbell
 * meanwhile; cleared by the transmitter that stops last, which then looks
 * at the ring once more (trdma_tx_idle()).  Only ever a hint to user
 * space: the kernel never reads it.
 */
static void trdma_tx_set_active(struct trdma_qp *qp)
{
	/* Not UD's: trdma_ud_tx() takes every WQE in at its doorbell. */
	if (qp->is_user && !trdma_qp_is_ud(qp))
		WRITE_ONCE(qp->sq.ctrl->tx_active, 1);
}

/* Queues the worker for a user QP's SQ, which needs no doorbell meanwhile. */
void trdma_tx_kick_user(struct trdma_qp *qp)
{
	trdma_tx_set_active(qp);
	trdma_tx_kick(qp);
}

/*
 * Whether a user's send doorbell leaves the sending to the worker (and
 * the provider its next doorbells, trdma_tx_set_active()) rather than
 * transmitting in the poster's own system call: when sends were already
 * outstanding before this doorbell's, so that the poster has completions
 * to wait for anyway.  Then the WQEs of several posts go out together,
 * corked, and the poster posts on while they do.  A ping-pong finds
 * nothing outstanding and transmits at once.
 */
bool trdma_tx_defer(struct trdma_qp *qp, bool outstanding)
{
	return outstanding && READ_ONCE(trdma_tx_defer_on);
}

/*
 * The last transmitter stops: clear tx_active, then read prod again, and
 * take in what was posted without a doorbell meanwhile.  Process context,
 * no locks held.
 */
static void trdma_tx_idle(struct trdma_qp *qp)
{
	if (!qp->is_user)
		return;
	WRITE_ONCE(qp->sq.ctrl->tx_active, 0);
	/*
	 * Cleared before prod is read; pairs with the provider's fence
	 * between publishing prod and reading tx_active.
	 */
	smp_mb();
	if (READ_ONCE(qp->sq.ctrl->prod) != READ_ONCE(qp->sq_intake))
		trdma_sq_doorbell(qp);
}

/*
 * Transmits unless another transmitter holds tx_mutex; that one then
 * transmits again for us (tx_again), so nobody sleeps or spins on the
 * mutex to send.  Process context, no locks held.
 */
static void trdma_tx_try(struct trdma_qp *qp)
{
	int rv;

	atomic_set(&qp->tx_again, 1);
	/* tx_again is set before trylock looks; pairs with the one below. */
	smp_mb();
	do {
		if (!mutex_trylock(&qp->tx_mutex))
			return;
		trdma_tx_own(qp);
		trdma_tx_set_active(qp);
		atomic_set(&qp->tx_again, 0);
		rv = trdma_tx_run(qp);
		trdma_tx_disown(qp);
		mutex_unlock(&qp->tx_mutex);
		trdma_tx_failed(qp, rv);
		/* Unlocked before tx_again is read; pairs with the one above. */
		smp_mb();
		/* Set since we cleared it: someone left its turn to us. */
	} while (atomic_read(&qp->tx_again));
	trdma_tx_idle(qp);
}

/*
 * Becomes the transmitter for something other than transmitting (attach,
 * detach, a timeout change), waiting for tx_mutex.  Process context.
 */
void trdma_tx_lock(struct trdma_qp *qp)
{
	mutex_lock(&qp->tx_mutex);
	trdma_tx_own(qp);
}

/*
 * Ends trdma_tx_lock(): a transmitter that found the mutex taken meanwhile
 * left its turn to us, and the worker takes it.
 */
void trdma_tx_unlock(struct trdma_qp *qp)
{
	trdma_tx_disown(qp);
	mutex_unlock(&qp->tx_mutex);
	/* Unlocked before tx_again is read; pairs with trdma_tx_try(). */
	smp_mb();
	if (atomic_read(&qp->tx_again))
		trdma_tx_kick(qp);
}

/*
 * Transmits what there is now, waiting for another transmitter if need
 * be (destroy_qp: the ACKs owed go out before the QP errs).  Process
 * context.
 */
void trdma_tx_sync(struct trdma_qp *qp)
{
	int rv;

	trdma_tx_lock(qp);
	rv = trdma_tx_run(qp);
	trdma_tx_unlock(qp);
	trdma_tx_failed(qp, rv);
}

void trdma_tx_work(struct work_struct *work)
{
	trdma_tx_try(container_of(work, struct trdma_qp, tx_work));
}

/*
 * The send doorbell of a user QP: transmit now, in the poster's own
 * context, which saves waking a worker per message (most of a small
 * message's latency on a busy or small machine).  A transmitter already
 * at work (the worker, or another poster) takes the new WQEs instead.  The
 * sends never block (MSG_DONTWAIT): what does not fit in the socket now is
 * left to the worker, kicked by write_space.  Process context, no locks.
 */
void trdma_tx_now(struct trdma_qp *qp)
{
	trdma_tx_try(qp);
}
