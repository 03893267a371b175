#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Which rdma-core releases provider/trdma-verbs-private.h is valid for.

    tests/unit/compare-rdma-core-tags.py RDMA_CORE_GIT_DIR [REFERENCE_TAG]

Reads, from every release tag vN.M of an rdma-core git repository (a bare
clone is enough), each declaration the trdma provider relies on: the
structs and enums it shares with libibverbs, the prototypes it calls, the
command struct declarations, the private ABI number and the symbol map.
Prints, per item, the tag ranges over which its text (comments and
whitespace ignored) stays the same, then the tags where every item equals
REFERENCE_TAG's (default v44.0, Debian 12's rdma-core).  Last, for
information, the same for the bodies of the libibverbs functions whose
behaviour the provider relies on (BODIES).

Text equality is a conservative test; check-rdma-core-layout.sh measures
the resulting binary layout for individual releases.
"""
import collections
import re
import subprocess
import sys

STRUCTS = ["verbs_device_ops", "verbs_device", "verbs_context_ops",
           "verbs_match_ent", "verbs_mr"]
ENUMS = ["ibv_mr_type"]
FUNCS = ["verbs_register_driver", "_verbs_init_and_alloc_context",
         "verbs_uninit_context", "verbs_set_ops", "ibv_cmd_get_context",
         "ibv_cmd_query_device_any", "ibv_cmd_query_port",
         "ibv_read_ibdev_sysfs_file",
         "ibv_cmd_alloc_pd", "ibv_cmd_dealloc_pd", "ibv_cmd_reg_mr",
         "ibv_cmd_rereg_mr", "ibv_cmd_dereg_mr", "ibv_cmd_advise_mr",
         "ibv_cmd_reg_dmabuf_mr", "ibv_cmd_alloc_mw",
         "ibv_cmd_dealloc_mw", "ibv_cmd_create_cq", "ibv_cmd_req_notify_cq",
         "ibv_cmd_resize_cq", "ibv_cmd_destroy_cq", "ibv_cmd_create_srq",
         "ibv_cmd_modify_srq",
         "ibv_cmd_query_srq", "ibv_cmd_destroy_srq", "ibv_cmd_create_qp",
         "ibv_cmd_query_qp", "ibv_cmd_modify_qp", "ibv_cmd_destroy_qp",
         "ibv_cmd_post_send", "ibv_cmd_post_recv", "ibv_cmd_create_ah",
         "ibv_cmd_destroy_ah"]
# Trailing arguments a later release added that the provider passes as
# NULL: the older function, which does not take them, ignores them (see
# provider/trdma-verbs-private.h), so they do not make a release differ.
TRAILING_NULL = {
    "ibv_cmd_reg_dmabuf_mr": ", struct ibv_command_buffer *driver);",
}
SYMBOLS = ["verbs_register_driver_@IBVERBS_PABI_VERSION@"] + FUNCS[1:]
CMDS = ["IB_USER_VERBS_CMD_GET_CONTEXT", "IB_USER_VERBS_CMD_QUERY_PORT",
        "IB_USER_VERBS_CMD_ALLOC_PD", "IB_USER_VERBS_CMD_REG_MR",
        "IB_USER_VERBS_CMD_REREG_MR", "IB_USER_VERBS_CMD_ALLOC_MW",
        "IB_USER_VERBS_CMD_CREATE_CQ",
        "IB_USER_VERBS_CMD_RESIZE_CQ", "IB_USER_VERBS_CMD_CREATE_QP",
        "IB_USER_VERBS_CMD_QUERY_QP", "IB_USER_VERBS_CMD_MODIFY_QP",
        "IB_USER_VERBS_CMD_CREATE_SRQ", "IB_USER_VERBS_CMD_MODIFY_SRQ",
        "IB_USER_VERBS_CMD_QUERY_SRQ"]
# Behaviour the provider relies on, beyond declarations: function bodies
# (file, function).  Reported separately, not part of EVERYTHING: a body
# may change without changing what the provider relies on, so a
# difference here is a pointer for a review, not a verdict.
BODIES = [
    # A NULL WR list sends the bare POST_SEND/POST_RECV: the doorbells.
    ("libibverbs/cmd.c", "ibv_cmd_post_send"),
    ("libibverbs/cmd.c", "ibv_cmd_post_recv"),
    # The granted capacities are copied back into the init attributes.
    ("libibverbs/cmd_qp.c", "ibv_cmd_create_qp"),
    ("libibverbs/cmd_srq.c", "ibv_cmd_create_srq"),
    # Which access flags reach reg_mr.
    ("libibverbs/verbs.c", "ibv_reg_mr_iova2"),
    # Which flags and access reach rereg_mr, and what it updates after.
    ("libibverbs/verbs.c", "ibv_rereg_mr"),
    # The comp_mask ibv_qp_to_qp_ex() tests (see provider/trdma.h).
    ("libibverbs/verbs.c", "ibv_qp_to_qp_ex"),
    # No cq_event / async_event work is left to the provider.
    ("libibverbs/dummy_ops.c", "cq_event"),
    ("libibverbs/dummy_ops.c", "async_event"),
]


def git(repo, *args):
    return subprocess.run(["git", "-C", repo] + list(args),
                          capture_output=True, text=True).stdout


def norm(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return " ".join(text.split())


def struct_body(src, name, kind="struct"):
    m = re.search(r"\n" + kind + " " + re.escape(name) + r"\s*\{", src)
    if not m:
        return None
    i, depth = m.end(), 1
    while depth:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return norm(src[m.start():i])


def prototype(src, name):
    m = re.search(r"\n[^\n;{}#]*\b" + re.escape(name) + r"\s*\([^;{]*\)[^;{]*;",
                  src)
    return norm(m.group(0)) if m else None


def function_body(src, name):
    m = re.search(r"\n[^\n;{}#]*\b" + re.escape(name) +
                  r"\s*\([^;{]*\)\s*\{", src)
    if not m:
        # Versioned entry points: LATEST_SYMVER_FUNC(name, ver, ...) {
        m = re.search(r"\nLATEST_SYMVER_FUNC\(" + re.escape(name) +
                      r",[^;{]*\)\s*\{", src)
    if not m:
        return None
    i, depth = m.end(), 1
    while depth and i < len(src):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return norm(src[m.start():i])


def bodies(repo, tag):
    out = collections.OrderedDict()
    files = {}
    for path, func in BODIES:
        if path not in files:
            files[path] = git(repo, "show", f"{tag}:{path}")
        out[f"{func}() in {path}"] = function_body(files[path], func)
    return out


def facts(repo, tag):
    driver = git(repo, "show", f"{tag}:libibverbs/driver.h")
    kern_abi = git(repo, "show", f"{tag}:libibverbs/kern-abi.h")
    ccan = git(repo, "show", f"{tag}:ccan/list.h")
    cmake = git(repo, "show", f"{tag}:CMakeLists.txt")
    symmap = git(repo, "show", f"{tag}:libibverbs/libibverbs.map.in")

    out = collections.OrderedDict()
    for s in STRUCTS:
        out[f"struct {s}"] = struct_body(driver, s)
    for e in ENUMS:
        out[f"enum {e}"] = struct_body(driver, e, "enum")
    out["struct list_node (ccan)"] = struct_body(ccan, "list_node")
    for f in FUNCS:
        out[f"{f}()"] = prototype(driver, f)
        if f in TRAILING_NULL and out[f"{f}()"]:
            out[f"{f}()"] = out[f"{f}()"].replace(TRAILING_NULL[f], ");")
    for c in CMDS:
        m = re.search(r"DECLARE_CMDX?\(" + c + r",[^\n]*", kern_abi)
        out[c] = m.group(0) if m else None
    m = re.search(r"#define DECLARE_CMDX\(.*?\n\n", kern_abi, re.S)
    out["DECLARE_CMDX"] = norm(m.group(0)) if m else None
    m = re.search(r'IBVERBS_PABI_VERSION "(\d+)"', cmake)
    out["IBVERBS_PABI_VERSION"] = m.group(1) if m else None
    private = symmap[symmap.find("IBVERBS_PRIVATE_"):]
    missing = [s for s in SYMBOLS
               if not re.search(r"\b" + re.escape(s) + r";", private)]
    out["symbols in IBVERBS_PRIVATE_<n>"] = \
        "all" if not missing else "missing " + " ".join(missing)
    return out


def ranges(tags, pred):
    runs, cur = [], []
    for t in tags:
        if pred(t):
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else r[0] for r in runs)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    repo = sys.argv[1]
    ref = sys.argv[2] if len(sys.argv) > 2 else "v44.0"
    tags = [t for t in git(repo, "tag", "--list", "v*").split()
            if re.fullmatch(r"v\d+\.\d+", t)]
    tags.sort(key=lambda t: tuple(int(x) for x in t[1:].split(".")))
    if ref not in tags:
        sys.exit(f"{ref} is not a release tag of {repo}")

    per_tag = {t: facts(repo, t) for t in tags}
    want = per_tag[ref]
    missing = [item for item, value in want.items() if value is None]
    if missing:
        sys.exit(f"not found in {ref}: {', '.join(missing)}")
    for item, value in want.items():
        print(f"{item}: same as {ref} in "
              f"{ranges(tags, lambda t: per_tag[t][item] == value)}")
    print(f"\nEVERYTHING same as {ref} in "
          f"{ranges(tags, lambda t: per_tag[t] == want)}")

    print(f"\nFunction bodies the provider relies on (informational):")
    per_tag = {t: bodies(repo, t) for t in tags}
    want = per_tag[ref]
    for item, value in want.items():
        print(f"{item}: same as {ref} in "
              f"{ranges(tags, lambda t: per_tag[t][item] == value)}")


if __name__ == "__main__":
    main()
