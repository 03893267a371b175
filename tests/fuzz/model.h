/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A second, independent statement of the rules that kernel/trdma_wire.c and
 * kernel/trdma_slot.c implement, written from docs/wire.md and the ABI
 * header at the byte level, for the fuzz targets to compare the shared code
 * against (differential testing), and a header builder for round trips,
 * seeds and unit tests.  User space only.
 */
#ifndef TRDMA_FUZZ_MODEL_H
#define TRDMA_FUZZ_MODEL_H

#include <stddef.h>

#include "kcompat.h"
#include "trdma_slot.h"
#include "trdma_wire.h"

/*
 * Writes the wire form of h (the extension headers of h->opcode, in their
 * order, reserved fields zero; hdr_len and ext are not read) into buf, which
 * holds TRDMA_MAX_HDR bytes.  Returns its length, 0 for an unknown opcode.
 */
u32 trdma_model_build(const struct trdma_wire_hdr *h, u8 *buf);

/* The verdict trdma_wire_parse must reach on the len bytes at buf. */
enum trdma_wire_err trdma_model_hdr_verdict(const u8 *buf, size_t len);

/*
 * The verdict trdma_slot_sqe_check must reach on a slot of lim->slot_size
 * bytes, and on success the message length.
 */
enum ib_wc_status trdma_model_sqe_verdict(const u8 *slot,
					  const struct trdma_slot_limits *lim,
					  u32 *len);

/* What trdma_slot_rqe_num_sge must return. */
u32 trdma_model_rqe_num_sge(u8 num_sge, const struct trdma_slot_limits *lim);

/* Whether two decoded headers are the same, field by field. */
bool trdma_model_hdr_equal(const struct trdma_wire_hdr *a,
			   const struct trdma_wire_hdr *b);

/*
 * Fuzz input layout of the slot target: a 4-byte prefix that sets the
 * limits, then the slot's bytes (zero-padded to the slot size, the rest cut
 * off).  Byte 0: bit 7 clear: slot size 64 << (bits 0-2), as the module
 * sizes slots; bit 7 set: slot size bits 0-6 (0..127 bytes, to exercise the
 * checks of small slots).  Byte 1: max_sge.  Bytes 2-3: max_inline,
 * little-endian.
 */
#define TRDMA_MODEL_SLOT_PREFIX	4
void trdma_model_slot_limits(const u8 prefix[TRDMA_MODEL_SLOT_PREFIX],
			     struct trdma_slot_limits *lim);

#endif /* TRDMA_FUZZ_MODEL_H */
