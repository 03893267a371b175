-- SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
--
-- trdma.lua: Wireshark/tshark dissector for trdma, RDMA verbs carried over
-- TCP, and UD/QP1 datagrams over UDP (see docs/wire.md; the authoritative
-- layout is include/uapi/rdma/trdma-wire.h, all fields big-endian).
--
--   tshark -X lua_script:tools/wireshark/trdma.lua -r capture.pcap
--
-- Two protocols:
--
--  trdma      the byte stream of a trdma connection (TCP port 4791, the
--             preference trdma.tcp_port): one 64-byte hello per direction,
--             then segments, each a BTH, the extension headers its opcode
--             calls for (RETH/AtomicETH, AETH, AtomicAckETH, ImmDt, in that
--             order) and bth.length payload bytes.  TCP reassembly
--             (dissect_tcp_pdus) makes every hello and every segment one
--             PDU, however the TCP segments cut the stream.
--             Also UD and QP1 (GSI) datagrams (UDP port 4792, the
--             preference trdma.udp_port): one UDP datagram per send, a BTH
--             (opcode UD_SEND_ONLY or UD_SEND_ONLY_IMM), a DETH, the ImmDt
--             for _IMM, then the payload; QP1's, MADs, go to Wireshark's
--             MAD dissector where it has one.
--
--  trdma.opt  the trdma TCP option, an RFC 6994 experimental option (kind
--             254, ExID 0x7464) on every data segment after the hellos,
--             naming the trdma segment the packet's first payload byte
--             belongs to.  Wireshark 4.0's TCP dissector shows kind 254 as
--             "Experimental" with its ExID (tcp.options.experimental.exid)
--             and no more.  A postdissector finds those ExIDs, reads the
--             option's bytes from the packet and decodes it, on any port.
--             (Replacing TCP's handle for kind 254 in the "tcp.option"
--             dissector table is not an option from Lua: other ExIDs would
--             have to go back to TCP's handle, and Lua cannot pass on the
--             TCP header that handle needs for Fast Open cookies.)

local WIRE_VERSION = 4
local DEFAULT_PORT = 4791
local DEFAULT_UD_PORT = 4792
local DETH_LEN = 8
local HELLO_MAGIC = 0x5452444d          -- "TRDM"
local HELLO_LEN = 64
local HELLO_TLS = 0x0004                 -- a nonce follows; then TLS records
local NONCE_LEN = 32
local TLS_HDR_LEN = 5                   -- a TLS record's header
local BTH_LEN = 20
local MAX_SEG = 64 * 1024               -- longest payload of one segment
local TCPOPT_KIND = 254
local TCPOPT_EXID = 0x7464
local TCPOPT_LEN = 16
local UD_HDR_LEN = BTH_LEN + DETH_LEN    -- BTH and DETH of a UD datagram
local OP_UD_SEND_ONLY = 0x64
local OP_UD_SEND_ONLY_IMM = 0x65
local GSI_QPN = 1                       -- QP1: MADs
local GSI_QKEY = 0x80010000

-------------------------------------------------------------------------------
-- Value strings
-------------------------------------------------------------------------------

local hello_types = { [1] = "REQ", [2] = "ACCEPT", [3] = "REJECT" }

-- enum ib_mtu
local path_mtus = { [1] = "256", [2] = "512", [3] = "1024", [4] = "2048",
                    [5] = "4096" }

-- enum trdma_opcode: the RoCE RC and UC opcodes, and the UD ones of
-- datagrams.
local opcodes = {
    [0x00] = "SEND_FIRST",
    [0x01] = "SEND_MIDDLE",
    [0x02] = "SEND_LAST",
    [0x03] = "SEND_LAST_IMM",
    [0x04] = "SEND_ONLY",
    [0x05] = "SEND_ONLY_IMM",
    [0x06] = "WRITE_FIRST",
    [0x07] = "WRITE_MIDDLE",
    [0x08] = "WRITE_LAST",
    [0x09] = "WRITE_LAST_IMM",
    [0x0a] = "WRITE_ONLY",
    [0x0b] = "WRITE_ONLY_IMM",
    [0x0c] = "READ_REQUEST",
    [0x0d] = "READ_RESPONSE_FIRST",
    [0x0e] = "READ_RESPONSE_MIDDLE",
    [0x0f] = "READ_RESPONSE_LAST",
    [0x10] = "READ_RESPONSE_ONLY",
    [0x11] = "ACK",
    [0x12] = "ATOMIC_ACK",
    [0x13] = "COMPARE_SWAP",
    [0x14] = "FETCH_ADD",
    [0x16] = "SEND_LAST_INV",
    [0x17] = "SEND_ONLY_INV",
    [0x1d] = "ATOMIC_WRITE",
    -- UC: 0x20 plus the RC SEND/WRITE opcode (RoCE's UC opcodes).
    [0x20] = "UC_SEND_FIRST",
    [0x21] = "UC_SEND_MIDDLE",
    [0x22] = "UC_SEND_LAST",
    [0x23] = "UC_SEND_LAST_IMM",
    [0x24] = "UC_SEND_ONLY",
    [0x25] = "UC_SEND_ONLY_IMM",
    [0x26] = "UC_WRITE_FIRST",
    [0x27] = "UC_WRITE_MIDDLE",
    [0x28] = "UC_WRITE_LAST",
    [0x29] = "UC_WRITE_LAST_IMM",
    [0x2a] = "UC_WRITE_ONLY",
    [0x2b] = "UC_WRITE_ONLY_IMM",
    [OP_UD_SEND_ONLY] = "UD_SEND_ONLY",
    [OP_UD_SEND_ONLY_IMM] = "UD_SEND_ONLY_IMM",
}

-- The extension headers of each opcode of the byte stream, as
-- trdma_hdr_len() in kernel/trdma_wire.c has them.  reth and atomic are
-- exclusive.  (The UD opcodes are no segment's.)
local R, A, K, I, V = "reth", "aeth", "atomicack", "immdt", "ieth"
local ext_headers = {
    [0x00] = {}, [0x01] = {}, [0x02] = {}, [0x03] = { I },
    [0x04] = {}, [0x05] = { I },
    [0x06] = { R }, [0x07] = {}, [0x08] = {}, [0x09] = { I },
    [0x0a] = { R }, [0x0b] = { R, I },
    [0x0c] = { R },
    [0x0d] = { A }, [0x0e] = {}, [0x0f] = { A }, [0x10] = { A },
    [0x11] = { A },
    [0x12] = { A, K },
    [0x13] = { "atomic" }, [0x14] = { "atomic" },
    [0x16] = { V }, [0x17] = { V },
    [0x1d] = { R },     -- ATOMIC_WRITE: RETH, then 8 payload bytes
}
-- UC SENDs and WRITEs: the headers of their RC counterparts.
for op = 0x00, 0x0b do ext_headers[0x20 + op] = ext_headers[op] end
local ext_len = { reth = 16, atomic = 32, aeth = 8, atomicack = 8, immdt = 4,
                  ieth = 4 }

local BTH_AETH = 0x20     -- a request carrying an AETH (TRDMA_BTH_AETH)

-- A request's opcode that may carry an AETH: RC SEND, WRITE, READ request,
-- atomics, SEND with IETH, ATOMIC_WRITE (a UC request never does).
local function is_request(opcode)
    return opcode <= 0x0c or opcode == 0x13 or opcode == 0x14 or
           opcode == 0x16 or opcode == 0x17 or opcode == 0x1d
end

-- The extension headers of a segment by its BTH opcode and flags, or nil
-- for an unknown opcode or an AETH flag on what is not a request.  A
-- request with the flag carries an AETH after its RETH or AtomicETH.
local function exts_of(opcode, flags)
    local exts = ext_headers[opcode]
    if not exts or bit32.band(flags, BTH_AETH) == 0 then return exts end
    if not is_request(opcode) then return nil end
    local out = {}
    for _, e in ipairs(exts) do
        if e == I or e == V then table.insert(out, A) end
        table.insert(out, e)
    end
    if #out == #exts then table.insert(out, A) end
    return out
end

-- The header length of a segment: BTH plus its extension headers, or nil
-- when exts_of() knows none.
local function hdr_len(opcode, flags)
    local exts = exts_of(opcode, flags)
    if not exts then return nil end
    local len = BTH_LEN
    for _, e in ipairs(exts) do len = len + ext_len[e] end
    return len
end

-- enum trdma_syndrome; 0x20..0x3f are RNR NAKs, the low 5 bits the timer.
local syndromes = {
    [0x00] = "ACK",
    [0x61] = "NAK invalid request",
    [0x62] = "NAK remote access error",
    [0x63] = "NAK remote operational error",
}
local syndrome_short = {
    [0x00] = "ACK",
    [0x61] = "NAK_INV_REQ",
    [0x62] = "NAK_REM_ACCESS",
    [0x63] = "NAK_REM_OP",
}
for timer = 0, 31 do
    syndromes[0x20 + timer] = string.format("RNR NAK (timer %d)", timer)
end

local function is_rnr_nak(syndrome)
    return syndrome >= 0x20 and syndrome <= 0x3f
end

-------------------------------------------------------------------------------
-- trdma: the byte stream
-------------------------------------------------------------------------------

local trdma = Proto("trdma", "trdma (RDMA over TCP and UDP)")

local pf = {
    hello = ProtoField.none("trdma.hello", "Hello"),
    hello_magic = ProtoField.uint32("trdma.hello.magic", "Magic", base.HEX),
    hello_version = ProtoField.uint8("trdma.hello.version", "Version",
                                     base.DEC),
    hello_type = ProtoField.uint8("trdma.hello.type", "Type", base.DEC,
                                  hello_types),
    hello_flags = ProtoField.uint16("trdma.hello.flags", "Flags", base.HEX),
    hello_flag_sq_psn = ProtoField.bool("trdma.hello.flags.sq_psn",
                                        "sq_psn set", 16, nil, 0x0001),
    hello_flag_uc = ProtoField.bool("trdma.hello.flags.uc", "UC QP", 16,
                                    nil, 0x0002),
    hello_flag_tls = ProtoField.bool("trdma.hello.flags.tls",
                                     "Encrypted link (TLS)", 16, nil,
                                     HELLO_TLS),
    hello_nonce = ProtoField.bytes("trdma.hello.nonce", "Nonce"),
    tls_record = ProtoField.none("trdma.tls_record",
                                 "TLS record (encrypted)"),
    tls_record_len = ProtoField.uint16("trdma.tls_record.length",
                                       "Record length", base.DEC),
    hello_src_qpn = ProtoField.uint32("trdma.hello.src_qpn", "Source QPN",
                                      base.DEC),
    hello_dst_qpn = ProtoField.uint32("trdma.hello.dst_qpn",
                                      "Destination QPN", base.DEC),
    hello_start_msn = ProtoField.uint32("trdma.hello.start_msn", "Start MSN",
                                        base.DEC),
    hello_path_mtu = ProtoField.uint8("trdma.hello.path_mtu", "Path MTU",
                                      base.DEC, path_mtus),
    hello_max_rd_atomic = ProtoField.uint8("trdma.hello.max_rd_atomic",
                                           "Max outstanding READs/atomics",
                                           base.DEC),
    hello_max_dest_rd_atomic = ProtoField.uint8(
        "trdma.hello.max_dest_rd_atomic",
        "Max incoming READs/atomics", base.DEC),
    hello_reserved1 = ProtoField.uint8("trdma.hello.reserved1", "Reserved",
                                       base.HEX),
    hello_status = ProtoField.uint32("trdma.hello.status",
                                     "Status (errno)", base.DEC),
    hello_sq_psn = ProtoField.uint32("trdma.hello.sq_psn",
                                     "Sender's SQ PSN", base.DEC),
    hello_src_gid = ProtoField.ipv6("trdma.hello.src_gid", "Source GID"),
    hello_dst_gid = ProtoField.ipv6("trdma.hello.dst_gid", "Destination GID"),

    bth = ProtoField.none("trdma.bth", "Base Transport Header"),
    bth_opcode = ProtoField.uint8("trdma.bth.opcode", "Opcode", base.HEX,
                                  opcodes),
    bth_flags = ProtoField.uint8("trdma.bth.flags", "Flags", base.HEX),
    bth_se = ProtoField.bool("trdma.bth.se", "Solicited event", 8, nil, 0x80),
    bth_ackreq = ProtoField.bool("trdma.bth.ackreq", "Acknowledge request",
                                 8, nil, 0x40),
    bth_aeth = ProtoField.bool("trdma.bth.aeth", "Carries an AETH", 8, nil,
                               0x20),
    bth_flags_reserved = ProtoField.uint8("trdma.bth.flags_reserved",
                                          "Reserved", base.HEX, nil, 0x1f),
    bth_reserved = ProtoField.uint16("trdma.bth.reserved", "Reserved",
                                     base.HEX),
    bth_qpn_reserved = ProtoField.uint8("trdma.bth.qpn_reserved", "Reserved",
                                        base.HEX),
    bth_dest_qpn = ProtoField.uint24("trdma.bth.dest_qpn", "Destination QPN",
                                     base.DEC),
    bth_msn = ProtoField.uint32("trdma.bth.msn", "MSN", base.DEC),
    bth_offset = ProtoField.uint32("trdma.bth.offset", "Offset in message",
                                   base.DEC),
    bth_length = ProtoField.uint32("trdma.bth.length", "Payload length",
                                   base.DEC),

    reth = ProtoField.none("trdma.reth", "RDMA Extended Transport Header"),
    reth_va = ProtoField.uint64("trdma.reth.va", "Virtual address", base.HEX),
    reth_rkey = ProtoField.uint32("trdma.reth.rkey", "Remote key", base.HEX),
    reth_dma_len = ProtoField.uint32("trdma.reth.dma_len", "DMA length",
                                     base.DEC),

    aeth = ProtoField.none("trdma.aeth", "ACK Extended Transport Header"),
    aeth_syndrome = ProtoField.uint8("trdma.aeth.syndrome", "Syndrome",
                                     base.HEX, syndromes),
    aeth_rnr_timer = ProtoField.uint8("trdma.aeth.rnr_timer", "RNR timer",
                                      base.DEC, nil, 0x1f),
    aeth_reserved = ProtoField.uint24("trdma.aeth.reserved", "Reserved",
                                      base.HEX),
    aeth_msn = ProtoField.uint32("trdma.aeth.msn", "MSN", base.DEC),

    atomic = ProtoField.none("trdma.atomic",
                             "Atomic Extended Transport Header"),
    atomic_va = ProtoField.uint64("trdma.atomic.va", "Virtual address",
                                  base.HEX),
    atomic_rkey = ProtoField.uint32("trdma.atomic.rkey", "Remote key",
                                    base.HEX),
    atomic_reserved = ProtoField.uint32("trdma.atomic.reserved", "Reserved",
                                        base.HEX),
    atomic_swap_add = ProtoField.uint64("trdma.atomic.swap_add",
                                        "Swap or add value", base.HEX),
    atomic_compare = ProtoField.uint64("trdma.atomic.compare",
                                       "Compare value", base.HEX),

    atomicack = ProtoField.none("trdma.atomicack",
                                "Atomic ACK Extended Transport Header"),
    atomicack_orig = ProtoField.uint64("trdma.atomicack.orig",
                                       "Original value", base.HEX),

    immdt = ProtoField.uint32("trdma.immdt", "Immediate data", base.HEX),
    ieth = ProtoField.uint32("trdma.ieth.rkey",
                             "Invalidate ETH: rkey to invalidate", base.HEX),

    ud = ProtoField.none("trdma.ud", "UD datagram"),
    ud_payload_len = ProtoField.uint32("trdma.ud.payload_len",
                                       "Payload bytes in the datagram",
                                       base.DEC),
    deth = ProtoField.none("trdma.deth", "Datagram Extended Transport Header"),
    deth_qkey = ProtoField.uint32("trdma.deth.qkey", "Q_Key", base.HEX),
    deth_reserved = ProtoField.uint8("trdma.deth.reserved", "Reserved",
                                     base.HEX),
    deth_src_qpn = ProtoField.uint24("trdma.deth.src_qpn", "Source QPN",
                                     base.DEC),

    payload = ProtoField.bytes("trdma.payload", "Payload"),
    undecoded = ProtoField.bytes("trdma.undecoded", "Undecoded data"),
}
trdma.fields = pf

local ef = {
    unknown_opcode = ProtoExpert.new("trdma.unknown_opcode",
        "Unknown opcode: the segment's length is unknown, the rest of this "
        .. "direction is not decoded", expert.group.MALFORMED,
        expert.severity.ERROR),
    aeth_flag = ProtoExpert.new("trdma.bth.aeth_not_request",
        "AETH flag on a segment that is not a request: its length is "
        .. "unknown, the rest of this direction is not decoded",
        expert.group.MALFORMED, expert.severity.ERROR),
    carried_nak = ProtoExpert.new("trdma.aeth.carried_nak",
        "A NAK carried by a request (only an ACK may ride along)",
        expert.group.MALFORMED, expert.severity.ERROR),
    too_long = ProtoExpert.new("trdma.too_long",
        "Segment payload longer than 64 KiB: the rest of this direction is "
        .. "not decoded", expert.group.MALFORMED, expert.severity.ERROR),
    reserved = ProtoExpert.new("trdma.reserved_not_zero",
        "Reserved field not zero", expert.group.MALFORMED,
        expert.severity.WARN),
    stopped = ProtoExpert.new("trdma.stopped",
        "Not decoded: an earlier segment in this direction was malformed",
        expert.group.UNDECODED, expert.severity.NOTE),
    rnr_nak = ProtoExpert.new("trdma.aeth.rnr_nak", "RNR NAK",
        expert.group.SEQUENCE, expert.severity.NOTE),
    nak = ProtoExpert.new("trdma.aeth.nak", "NAK",
        expert.group.RESPONSE_CODE, expert.severity.WARN),
    reject = ProtoExpert.new("trdma.hello.rejected", "Connection rejected",
        expert.group.RESPONSE_CODE, expert.severity.WARN),

    -- UD datagrams: each of these the receiver drops (and counts).
    ud_short = ProtoExpert.new("trdma.ud.short",
        "Datagram shorter than its headers (BTH, DETH, ImmDt)",
        expert.group.MALFORMED, expert.severity.ERROR),
    ud_bad_opcode = ProtoExpert.new("trdma.ud.bad_opcode",
        "Not a UD opcode (UD_SEND_ONLY 0x64 or UD_SEND_ONLY_IMM 0x65)",
        expert.group.MALFORMED, expert.severity.ERROR),
    ud_bad_flags = ProtoExpert.new("trdma.ud.bad_flags",
        "Flags other than SE on a datagram", expert.group.MALFORMED,
        expert.severity.ERROR),
    ud_bad_offset = ProtoExpert.new("trdma.ud.bad_offset",
        "Offset not zero on a datagram", expert.group.MALFORMED,
        expert.severity.ERROR),
    ud_bad_length = ProtoExpert.new("trdma.ud.bad_length",
        "Length field is not the payload bytes after the headers",
        expert.group.MALFORMED, expert.severity.ERROR),
    ud_gsi_qkey = ProtoExpert.new("trdma.ud.gsi_qkey",
        "Q_Key of a datagram to QP1 is not 0x80010000",
        expert.group.PROTOCOL, expert.severity.WARN),
}
trdma.experts = ef

trdma.prefs.tcp_port = Pref.uint("TCP port", DEFAULT_PORT,
    "The TCP port trdma connections are accepted on (the module's 'port' "
    .. "parameter)")
trdma.prefs.udp_port = Pref.uint("UDP port", DEFAULT_UD_PORT,
    "The UDP port of UD and QP1 datagrams (the module's 'ud_port' "
    .. "parameter)")

-- Per capture file state: where decoding of a stream direction stopped at
-- a malformed segment.  stopped[key] lists ranges { first = frame holding
-- the malformed segment, last = frame where a hello started the next
-- connection with the same addresses and ports, or nil }.  Filled in on the
-- first, in-order pass; read on later ones, which visit frames in any order.
-- (The key is made of pinfo's addresses and ports, not tcp.stream: fields
-- of other protocols cannot be read when tshark dissects without a tree.)
local stopped = {}
-- Directions of encrypted links: encrypted[key] lists ranges { first =
-- frame holding a hello with the TLS flag, last = frame of the next hello
-- on the same addresses and ports, or nil }: after the hello (and its
-- nonce) that direction is TLS records.  Filled in like stopped.
local encrypted = {}

function trdma.init()
    stopped = {}
    encrypted = {}
end

local function direction_key(pinfo)
    return string.format("%s:%d>%s:%d", tostring(pinfo.src), pinfo.src_port,
                         tostring(pinfo.dst), pinfo.dst_port)
end

-- The range of stopped[key] that frame number falls into, if any.
local function stopped_range(key, number)
    for _, r in ipairs(stopped[key] or {}) do
        if number > r.first and (not r.last or number < r.last) then
            return r
        end
    end
    return nil
end

-- The range of encrypted[key] that frame number falls into, if any.
local function encrypted_range(key, number)
    for _, r in ipairs(encrypted[key] or {}) do
        if number >= r.first and (not r.last or number < r.last) then
            return r
        end
    end
    return nil
end

-- A hello in frame number, with or without the TLS flag: the direction's
-- earlier encrypted range ends there, and a new one starts with it.
local function note_hello(pinfo, tls)
    if pinfo.visited then return end
    local key, number = direction_key(pinfo), pinfo.number
    local r = encrypted_range(key, number)
    if r and r.first == number then return end
    if r then r.last = number end
    if tls then
        encrypted[key] = encrypted[key] or {}
        table.insert(encrypted[key], { first = number })
    end
end

-- Is there a plausible hello at offset?  The magic's first byte, 0x54, is
-- no opcode, so a hello is never mistaken for a segment, or vice versa.
local function is_hello(tvb, offset)
    if tvb:captured_len() - offset < 6 then return false end
    local t = tvb(offset + 5, 1):uint()
    return tvb(offset, 4):uint() == HELLO_MAGIC
        and tvb(offset + 4, 1):uint() == WIRE_VERSION
        and t >= 1 and t <= 3
end

-- Appends one PDU's summary to the Info column: the first PDU of the frame
-- replaces what TCP put there, the others follow after ", ".
local function add_info(pinfo, text)
    if tostring(pinfo.cols.protocol) ~= "TRDMA" then
        pinfo.cols.protocol = "TRDMA"
        pinfo.cols.info = text
    else
        pinfo.cols.info:append(", " .. text)
    end
end

-- dissect_tcp_pdus: the length of the PDU at offset (at least BTH_LEN bytes
-- are there).  A segment whose length cannot be known, or must not be
-- trusted, takes the rest of the TCP data; dissect_pdu() flags it.
local function hello_has_nonce(tvb, offset)
    return bit32.band(tvb(offset + 6, 2):uint(), HELLO_TLS) ~= 0
        and tvb(offset + 5, 1):uint() ~= 3
end

local function get_pdu_len(tvb, pinfo, offset)
    if is_hello(tvb, offset) then
        local tls = hello_has_nonce(tvb, offset)
        note_hello(pinfo, tls)
        return HELLO_LEN + (tls and NONCE_LEN or 0)
    end
    if encrypted_range(direction_key(pinfo), pinfo.number) then
        return TLS_HDR_LEN + tvb(offset + 3, 2):uint()
    end
    local hlen = hdr_len(tvb(offset, 1):uint(), tvb(offset + 1, 1):uint())
    local length = tvb(offset + 16, 4):uint()
    if not hlen or length > MAX_SEG then
        return tvb:reported_length_remaining(offset)
    end
    return hlen + length
end

local function dissect_hello(tvb, tree)
    local tls = hello_has_nonce(tvb, 0)
    local t = tree:add(pf.hello, tvb(0, math.min(tvb:len(),
        HELLO_LEN + (tls and NONCE_LEN or 0))))
    t:add(pf.hello_magic, tvb(0, 4))
    t:add(pf.hello_version, tvb(4, 1))
    t:add(pf.hello_type, tvb(5, 1))
    local fl = t:add(pf.hello_flags, tvb(6, 2))
    fl:add(pf.hello_flag_sq_psn, tvb(6, 2))
    fl:add(pf.hello_flag_uc, tvb(6, 2))
    fl:add(pf.hello_flag_tls, tvb(6, 2))
    if bit32.band(tvb(6, 2):uint(), 0xfff8) ~= 0 then
        fl:add_proto_expert_info(ef.reserved)
    end
    t:add(pf.hello_src_qpn, tvb(8, 4))
    t:add(pf.hello_dst_qpn, tvb(12, 4))
    t:add(pf.hello_start_msn, tvb(16, 4))
    t:add(pf.hello_path_mtu, tvb(20, 1))
    t:add(pf.hello_max_rd_atomic, tvb(21, 1))
    t:add(pf.hello_max_dest_rd_atomic, tvb(22, 1))
    t:add(pf.hello_reserved1, tvb(23, 1))
    local st = t:add(pf.hello_status, tvb(24, 4))
    t:add(pf.hello_sq_psn, tvb(28, 4))
    t:add(pf.hello_src_gid, tvb(32, 16))
    t:add(pf.hello_dst_gid, tvb(48, 16))
    if tls and tvb:len() >= HELLO_LEN + NONCE_LEN then
        t:add(pf.hello_nonce, tvb(HELLO_LEN, NONCE_LEN))
    end

    local htype = tvb(5, 1):uint()
    local text = string.format("HELLO %s src_qpn=%d dst_qpn=%d start_msn=%d",
                               hello_types[htype], tvb(8, 4):uint(),
                               tvb(12, 4):uint(), tvb(16, 4):uint())
    if bit32.band(tvb(6, 2):uint(), 1) ~= 0 then
        text = text .. string.format(" sq_psn=%d", tvb(28, 4):uint())
    end
    if tls then text = text .. " tls" end
    if htype == 3 then
        text = text .. string.format(" status=%d", tvb(24, 4):uint())
        st:add_proto_expert_info(ef.reject)
    end
    t:append_text(": " .. text)
    return text
end

-- The extension headers; each returns the Info text it adds.
local ext_dissectors = {
    reth = function(tvb, o, tree)
        local t = tree:add(pf.reth, tvb(o, 16))
        t:add(pf.reth_va, tvb(o, 8))
        t:add(pf.reth_rkey, tvb(o + 8, 4))
        t:add(pf.reth_dma_len, tvb(o + 12, 4))
        return string.format(" va=0x%s rkey=0x%08x", tvb(o, 8):uint64():tohex(),
                             tvb(o + 8, 4):uint())
    end,
    atomic = function(tvb, o, tree)
        local t = tree:add(pf.atomic, tvb(o, 32))
        t:add(pf.atomic_va, tvb(o, 8))
        t:add(pf.atomic_rkey, tvb(o + 8, 4))
        local r = t:add(pf.atomic_reserved, tvb(o + 12, 4))
        if tvb(o + 12, 4):uint() ~= 0 then
            r:add_proto_expert_info(ef.reserved)
        end
        t:add(pf.atomic_swap_add, tvb(o + 16, 8))
        t:add(pf.atomic_compare, tvb(o + 24, 8))
        return string.format(" va=0x%s rkey=0x%08x", tvb(o, 8):uint64():tohex(),
                             tvb(o + 8, 4):uint())
    end,
    aeth = function(tvb, o, tree)
        local t = tree:add(pf.aeth, tvb(o, 8))
        local syndrome = tvb(o, 1):uint()
        local msn = tvb(o + 4, 4):uint()
        local s = t:add(pf.aeth_syndrome, tvb(o, 1))
        local text
        if is_rnr_nak(syndrome) then
            t:add(pf.aeth_rnr_timer, tvb(o, 1))
            s:add_proto_expert_info(ef.rnr_nak)
            text = string.format(" aeth=RNR_NAK/%d timer=%d", msn,
                                 syndrome - 0x20)
        elseif syndrome_short[syndrome] then
            if syndrome ~= 0 then s:add_proto_expert_info(ef.nak) end
            text = string.format(" aeth=%s/%d", syndrome_short[syndrome], msn)
        else
            text = string.format(" aeth=0x%02x/%d", syndrome, msn)
        end
        local r = t:add(pf.aeth_reserved, tvb(o + 1, 3))
        if tvb(o + 1, 3):uint() ~= 0 then r:add_proto_expert_info(ef.reserved) end
        t:add(pf.aeth_msn, tvb(o + 4, 4))
        t:append_text(": " .. (syndromes[syndrome] or "unknown syndrome"))
        return text
    end,
    atomicack = function(tvb, o, tree)
        local t = tree:add(pf.atomicack, tvb(o, 8))
        t:add(pf.atomicack_orig, tvb(o, 8))
        return ""
    end,
    immdt = function(tvb, o, tree)
        tree:add(pf.immdt, tvb(o, 4))
        return string.format(" imm=0x%08x", tvb(o, 4):uint())
    end,
    ieth = function(tvb, o, tree)
        tree:add(pf.ieth, tvb(o, 4))
        return string.format(" inv_rkey=0x%08x", tvb(o, 4):uint())
    end,
}

-- The BTH at the start of tvb; returns its Info text, and the items of its
-- opcode, flags, offset and length.  ud: a datagram's, whose flags other
-- than SE the caller flags.
local function dissect_bth(tvb, tree, opcode, ud)
    local t = tree:add(pf.bth, tvb(0, BTH_LEN))
    local op = t:add(pf.bth_opcode, tvb(0, 1))
    local flags = t:add(pf.bth_flags, tvb(1, 1))
    flags:add(pf.bth_se, tvb(1, 1))
    flags:add(pf.bth_ackreq, tvb(1, 1))
    flags:add(pf.bth_aeth, tvb(1, 1))
    local fr = flags:add(pf.bth_flags_reserved, tvb(1, 1))
    if not ud and bit32.band(tvb(1, 1):uint(), 0x1f) ~= 0 then
        fr:add_proto_expert_info(ef.reserved)
    end
    local r = t:add(pf.bth_reserved, tvb(2, 2))
    if tvb(2, 2):uint() ~= 0 then r:add_proto_expert_info(ef.reserved) end
    r = t:add(pf.bth_qpn_reserved, tvb(4, 1))
    if tvb(4, 1):uint() ~= 0 then r:add_proto_expert_info(ef.reserved) end
    t:add(pf.bth_dest_qpn, tvb(5, 3))
    t:add(pf.bth_msn, tvb(8, 4))
    local off = t:add(pf.bth_offset, tvb(12, 4))
    local len = t:add(pf.bth_length, tvb(16, 4))

    local text = string.format("%s qpn=%d msn=%d len=%d",
                               opcodes[opcode] or "UNKNOWN",
                               tvb(5, 3):uint(), tvb(8, 4):uint(),
                               tvb(16, 4):uint())
    t:append_text(": " .. text)
    return text, { op = op, flags = flags, offset = off, length = len }
end

-- dissect_tcp_pdus: one hello or segment, the whole of tvb.
local function dissect_pdu(tvb, pinfo, tree)
    local t = tree:add(trdma, tvb())

    if is_hello(tvb, 0) then
        local text = dissect_hello(tvb, t)
        t:append_text(", " .. text)
        add_info(pinfo, text)
        return tvb:len()
    end

    -- An encrypted link after its hello: TLS 1.3 records (the first of
    -- each direction is its sender's key confirmation), not decrypted.
    if encrypted_range(direction_key(pinfo), pinfo.number) then
        local r = t:add(pf.tls_record, tvb())
        r:add(pf.tls_record_len, tvb(3, 2))
        local text = string.format("TLS record, %d bytes (encrypted)",
                                   tvb(3, 2):uint())
        t:append_text(", " .. text)
        add_info(pinfo, text)
        return tvb:len()
    end

    local opcode = tvb(0, 1):uint()
    local flags = tvb(1, 1):uint()
    local text, items = dissect_bth(tvb, t, opcode)
    local op_item, len_item = items.op, items.length
    local hlen = hdr_len(opcode, flags)
    local length = tvb(16, 4):uint()
    if not hlen or length > MAX_SEG then
        -- Where this segment ends is unknown, and so is where the next one
        -- starts: give up on this direction of the stream, as the
        -- receiver does (it closes the connection).
        if not ext_headers[opcode] then
            op_item:add_proto_expert_info(ef.unknown_opcode)
            text = string.format("Unknown opcode 0x%02x", opcode)
        elseif not hlen then
            op_item:add_proto_expert_info(ef.aeth_flag)
            text = string.format("AETH flag on %s", opcodes[opcode])
        else
            len_item:add_proto_expert_info(ef.too_long)
        end
        if tvb:len() > BTH_LEN then
            t:add(pf.undecoded, tvb(BTH_LEN))
        end
        if not pinfo.visited then
            local key = direction_key(pinfo)
            if not stopped_range(key, pinfo.number) then
                stopped[key] = stopped[key] or {}
                table.insert(stopped[key], { first = pinfo.number })
            end
        end
        t:append_text(", " .. text)
        add_info(pinfo, text)
        return tvb:len()
    end

    local o = BTH_LEN
    for _, e in ipairs(exts_of(opcode, flags)) do
        if e == A and is_request(opcode) and tvb(o, 1):uint() ~= 0 then
            t:add_proto_expert_info(ef.carried_nak)
        end
        text = text .. ext_dissectors[e](tvb, o, t)
        o = o + ext_len[e]
    end
    if length > 0 then
        -- The captured part of it; a short snapshot length may cut it.
        local n = math.min(length, tvb:len() - o)
        if n > 0 then
            t:add(pf.payload, tvb(o, n)):set_text(
                string.format("Payload (%d bytes)", length))
        end
    end
    t:append_text(", " .. text)
    add_info(pinfo, text)
    return tvb:len()
end

-------------------------------------------------------------------------------
-- trdma UD datagrams
-------------------------------------------------------------------------------

local PT_UDP = 3        -- enum port_type: pinfo.port_type under UDP

-- Wireshark's dissector of IB MADs (from the common MAD header on), looked
-- up on first use by the names it may have.  Wireshark 4.0 has none: its
-- InfiniBand dissector decodes MADs only inside whole IB packets.  nil
-- then, and a MAD is shown as payload bytes only.
local mad_dissector, mad_looked_up = nil, false

local function get_mad_dissector()
    if not mad_looked_up then
        mad_looked_up = true
        for _, name in ipairs({ "mad", "infiniband.mad" }) do
            local ok, d = pcall(Dissector.get, name)
            if ok and d then
                mad_dissector = d
                break
            end
        end
    end
    return mad_dissector
end

-- One UD or QP1 datagram, the whole of tvb: BTH, DETH, ImmDt for
-- UD_SEND_ONLY_IMM, payload.  Everything the receiver drops is flagged.
local function dissect_ud(tvb, pinfo, tree)
    local size = tvb:reported_len()
    local t = tree:add(trdma, tvb())
    local u = t:add(pf.ud, tvb())
    u:append_text(string.format(" (%d bytes)", size))

    local function done(text)
        t:append_text(", " .. text)
        add_info(pinfo, text)
        return tvb:len()
    end

    if size < BTH_LEN then
        u:add_proto_expert_info(ef.ud_short)
        if tvb:len() > 0 then u:add(pf.undecoded, tvb()) end
        return done(string.format("Short UD datagram (%d bytes)", size))
    end

    local opcode = tvb(0, 1):uint()
    local text, items = dissect_bth(tvb, u, opcode, true)
    if opcode ~= OP_UD_SEND_ONLY and opcode ~= OP_UD_SEND_ONLY_IMM then
        items.op:add_proto_expert_info(ef.ud_bad_opcode)
        if tvb:len() > BTH_LEN then u:add(pf.undecoded, tvb(BTH_LEN)) end
        return done(string.format("Bad UD opcode 0x%02x", opcode))
    end
    if bit32.band(tvb(1, 1):uint(), bit32.bnot(0x80)) ~= 0 then
        items.flags:add_proto_expert_info(ef.ud_bad_flags)
    end
    if tvb(12, 4):uint() ~= 0 then
        items.offset:add_proto_expert_info(ef.ud_bad_offset)
    end

    local hlen = UD_HDR_LEN + (opcode == OP_UD_SEND_ONLY_IMM and 4 or 0)
    if size < hlen then
        u:add_proto_expert_info(ef.ud_short)
        if tvb:len() > BTH_LEN then u:add(pf.undecoded, tvb(BTH_LEN)) end
        return done(string.format("%s [short datagram: %d bytes]", text,
                                  size))
    end

    local dest_qpn = tvb(5, 3):uint()
    local qkey = tvb(BTH_LEN, 4):uint()
    local d = u:add(pf.deth, tvb(BTH_LEN, DETH_LEN))
    local qk = d:add(pf.deth_qkey, tvb(BTH_LEN, 4))
    if dest_qpn == GSI_QPN and qkey ~= GSI_QKEY then
        qk:add_proto_expert_info(ef.ud_gsi_qkey)
    end
    local r = d:add(pf.deth_reserved, tvb(BTH_LEN + 4, 1))
    if tvb(BTH_LEN + 4, 1):uint() ~= 0 then
        r:add_proto_expert_info(ef.reserved)
    end
    d:add(pf.deth_src_qpn, tvb(BTH_LEN + 5, 3))
    local dtext = string.format(" src_qpn=%d qkey=0x%08x",
                                tvb(BTH_LEN + 5, 3):uint(), qkey)
    d:append_text(":" .. dtext)
    text = text .. dtext
    if opcode == OP_UD_SEND_ONLY_IMM then
        text = text .. ext_dissectors.immdt(tvb, UD_HDR_LEN, u)
    end

    -- The payload: every byte after the headers.
    local n = size - hlen
    u:add(pf.ud_payload_len, n):set_generated()
    if tvb(16, 4):uint() ~= n then
        items.length:add_proto_expert_info(ef.ud_bad_length)
    end
    local captured = math.min(n, tvb:len() - hlen)
    if captured > 0 then
        u:add(pf.payload, tvb(hlen, captured)):set_text(
            string.format("Payload (%d bytes)", n))
    end
    local ret = done(text)

    -- QP1's payload is a MAD.
    local mad = dest_qpn == GSI_QPN and captured > 0 and get_mad_dissector()
    if mad then
        pinfo.cols.info:fence()
        pcall(mad.call, mad, tvb(hlen, captured):tvb(), pinfo, tree)
    end
    return ret
end

function trdma.dissector(tvb, pinfo, tree)
    if pinfo.port_type == PT_UDP then return dissect_ud(tvb, pinfo, tree) end

    local stop = stopped_range(direction_key(pinfo), pinfo.number)
    if stop and is_hello(tvb, 0) then
        -- A new connection reusing the addresses and ports.
        if not pinfo.visited then stop.last = pinfo.number end
    elseif stop then
        local t = tree:add(trdma, tvb())
        t:add(pf.undecoded, tvb()):add_proto_expert_info(ef.stopped)
        pinfo.cols.protocol = "TRDMA"
        pinfo.cols.info = "Not decoded (malformed segment before)"
        return tvb:len()
    end
    dissect_tcp_pdus(tvb, tree, BTH_LEN, get_pdu_len, dissect_pdu)
    return tvb:len()
end

-- The port preferences: one entry each in the "tcp.port" and "udp.port"
-- tables (and in Decode As).  The dissector tells the two apart by
-- pinfo.port_type, so Decode As works for either.
local registered_port = { tcp = 0, udp = 0 }

local function register_port(transport)
    local port = trdma.prefs[transport .. "_port"]
    if port == registered_port[transport] then return end
    local dt = DissectorTable.get(transport .. ".port")
    if registered_port[transport] ~= 0 then
        dt:remove(registered_port[transport], trdma)
    end
    registered_port[transport] = port
    if port ~= 0 then dt:add(port, trdma) end
end

function trdma.prefs_changed()
    register_port("tcp")
    register_port("udp")
end

register_port("tcp")
register_port("udp")

-------------------------------------------------------------------------------
-- trdma.opt: the TCP option
-------------------------------------------------------------------------------

local trdma_opt = Proto("trdma.opt", "trdma TCP option")

local of = {
    kind = ProtoField.uint8("trdma.opt.kind", "Kind", base.DEC),
    len = ProtoField.uint8("trdma.opt.len", "Length", base.DEC),
    exid = ProtoField.uint16("trdma.opt.exid", "Experiment identifier",
                             base.HEX),
    op_qpn = ProtoField.uint32("trdma.opt.op_qpn", "Opcode and QPN",
                               base.HEX),
    opcode = ProtoField.uint8("trdma.opt.opcode", "Opcode", base.HEX, opcodes),
    qpn = ProtoField.uint24("trdma.opt.qpn", "Destination QPN", base.DEC),
    msn = ProtoField.uint32("trdma.opt.msn", "MSN", base.DEC),
    offset = ProtoField.uint32("trdma.opt.offset",
                               "Segment start (relative seq)", base.DEC),
    seg_offset = ProtoField.uint32("trdma.opt.seg_offset",
                                   "Payload offset in the trdma segment",
                                   base.DEC),
    agrees = ProtoField.bool("trdma.opt.agrees", "Agrees with the BTH"),
}
trdma_opt.fields = of

local oef = {
    bad_len = ProtoExpert.new("trdma.opt.bad_len",
        "trdma TCP option with a wrong length", expert.group.MALFORMED,
        expert.severity.ERROR),
    unknown_opcode = ProtoExpert.new("trdma.opt.unknown_opcode",
        "trdma TCP option names an unknown opcode", expert.group.MALFORMED,
        expert.severity.ERROR),
    bad_offset = ProtoExpert.new("trdma.opt.bad_offset",
        "trdma TCP option names a segment start after this packet's data",
        expert.group.PROTOCOL, expert.severity.WARN),
    mismatch = ProtoExpert.new("trdma.opt.mismatch",
        "trdma TCP option disagrees with the BTH it names",
        expert.group.PROTOCOL, expert.severity.WARN),
}
trdma_opt.experts = oef

local f_exp_exid = Field.new("tcp.options.experimental.exid")
local f_exp_data = Field.new("tcp.options.experimental.data")
local f_tcp_srcport = Field.new("tcp.srcport")
local f_tcp_seq = Field.new("tcp.seq")
local f_tcp_seq_raw = Field.new("tcp.seq_raw")
local f_tcp_hdr_len = Field.new("tcp.hdr_len")
local f_tcp_len = Field.new("tcp.len")

-- The value of the instance of field whose item starts at offset.
local function value_at(field, offset)
    for _, fi in ipairs({ field() }) do
        if fi.offset == offset then return fi.value end
    end
    return nil
end

-- The TCP header an option at offset (of the data source) belongs to:
-- the last one starting before it.  Returns its offset, the relative
-- sequence number, header and payload length; nil if not found, or if
-- TCP shows no relative sequence numbers (its preferences
-- relative_sequence_numbers or analyze_sequence_numbers are off).
local function tcp_header_of(offset)
    local start
    for _, fi in ipairs({ f_tcp_srcport() }) do
        if fi.offset < offset and (not start or fi.offset > start) then
            start = fi.offset
        end
    end
    if not start then return nil end
    local seq = value_at(f_tcp_seq, start + 4)
    if seq == value_at(f_tcp_seq_raw, start + 4) then return nil end
    local hdr_len = value_at(f_tcp_hdr_len, start + 12)
    local len = value_at(f_tcp_len, start)     -- generated, at the header
    if not seq or not hdr_len or not len then return nil end
    return start, seq, hdr_len, len
end

-- Decodes the option at offset of the data source src.
local function dissect_option(src, offset, tree)
    local olen = src(offset + 1, 1):uint()
    local t = tree:add(trdma_opt, src(offset, math.max(olen, 4)))
    t:add(of.kind, src(offset, 1))
    local l = t:add(of.len, src(offset + 1, 1))
    t:add(of.exid, src(offset + 2, 2))
    if olen ~= TCPOPT_LEN then
        l:add_proto_expert_info(oef.bad_len)
        return
    end

    local opcode = src(offset + 4, 1):uint()
    local qpn = src(offset + 5, 3):uint()
    local msn = src(offset + 8, 4):uint()
    local start = src(offset + 12, 4):uint()
    local oq = t:add(of.op_qpn, src(offset + 4, 4))
    local op = oq:add(of.opcode, src(offset + 4, 1))
    oq:add(of.qpn, src(offset + 5, 3))
    t:add(of.msn, src(offset + 8, 4))
    t:add(of.offset, src(offset + 12, 4))
    if not ext_headers[opcode] then
        op:add_proto_expert_info(oef.unknown_opcode)
    end
    local summary = string.format("%s qpn=%d msn=%d offset=%d",
                                  opcodes[opcode] or "UNKNOWN", qpn, msn, start)

    -- Where this packet's payload starts in the trdma segment.  Needs
    -- TCP's relative sequence numbers (the default) and the SYN in the
    -- capture.
    local tcp_start, seq, hdr_len, len = tcp_header_of(offset)
    if not tcp_start then
        t:append_text(", " .. summary .. " (no relative sequence numbers)")
        return
    end
    local seg_offset = (seq - start) % 2^32
    local so = t:add(of.seg_offset, src(offset + 12, 4), seg_offset)
    so:set_generated()
    if seg_offset >= 2^31 then so:add_proto_expert_info(oef.bad_offset) end
    summary = summary .. string.format(" (+%d)", seg_offset)

    -- A BTH at the start of the payload: does the option agree with it?
    local payload = tcp_start + hdr_len
    if seg_offset == 0 and len >= 12 and src:len() >= payload + 12 then
        local agrees = src(payload, 1):uint() == opcode
            and src(payload + 5, 3):uint() == qpn
            and src(payload + 8, 4):uint() == msn
        local a = t:add(of.agrees, src(payload, 12), agrees)
        a:set_generated()
        if not agrees then a:add_proto_expert_info(oef.mismatch) end
    end
    t:append_text(", " .. summary)
end

function trdma_opt.dissector(tvb, pinfo, tree)
    -- Where the kind 254 options start: 2 bytes before their ExID, or,
    -- with TCP's preference dissect_experimental_options_rfc6994 off, 2
    -- bytes before their data.  (With it on, TCP may show data after the
    -- ExID too.)
    local starts, seen = {}, {}
    for _, fi in ipairs({ f_exp_exid() }) do
        seen[fi.offset] = true
        starts[#starts + 1] = { src = fi.source, offset = fi.offset - 2 }
    end
    for _, fi in ipairs({ f_exp_data() }) do
        if not seen[fi.offset - 2] then
            starts[#starts + 1] = { src = fi.source, offset = fi.offset - 2 }
        end
    end
    for _, s in ipairs(starts) do
        local src, offset = s.src, s.offset
        if src and offset >= 0 and src:len() >= offset + 4
            and src(offset, 1):uint() == TCPOPT_KIND
            and src(offset + 2, 2):uint() == TCPOPT_EXID
            and src:len() >= offset + src(offset + 1, 1):uint() then
            dissect_option(src, offset, tree)
        end
    end
end

register_postdissector(trdma_opt)
