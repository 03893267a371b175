#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Which rdma-core releases provider/trdma-verbs-private.h is valid for.

    tests/unit/compare-rdma-core-tags.py RDMA_CORE_GIT_DIR [REFERENCE_TAG]

Reads, from every release tag vN.M of an rdma-core git repository (a bare
clone is enough), each declaration the trdma provider relies on: the
structs it shares with libibverbs, the prototypes it calls, the command
struct declarations, the private ABI number and the symbol map.  Prints,
per item, the tag ranges over which its text (comments and whitespace
ignored) stays the same, then the tags where every item equals
REFERENCE_TAG's (default v44.0, Debian 12's rdma-core).

Text equality is a conservative test; check-rdma-core-layout.sh measures
the resulting binary layout for individual releases.
"""
import collections
import re
import subprocess
import sys

STRUCTS = ["verbs_device_ops", "verbs_device", "verbs_context_ops",
           "verbs_match_ent"]
FUNCS = ["verbs_register_driver", "_verbs_init_and_alloc_context",
         "verbs_uninit_context", "verbs_set_ops", "ibv_cmd_get_context",
         "ibv_cmd_query_device_any", "ibv_cmd_query_port",
         "ibv_read_ibdev_sysfs_file"]
SYMBOLS = ["verbs_register_driver_@IBVERBS_PABI_VERSION@"] + FUNCS[1:]
CMDS = ["IB_USER_VERBS_CMD_GET_CONTEXT", "IB_USER_VERBS_CMD_QUERY_PORT"]


def git(repo, *args):
    return subprocess.run(["git", "-C", repo] + list(args),
                          capture_output=True, text=True).stdout


def norm(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return " ".join(text.split())


def struct_body(src, name):
    m = re.search(r"\nstruct " + re.escape(name) + r"\s*\{", src)
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


def facts(repo, tag):
    driver = git(repo, "show", f"{tag}:libibverbs/driver.h")
    kern_abi = git(repo, "show", f"{tag}:libibverbs/kern-abi.h")
    ccan = git(repo, "show", f"{tag}:ccan/list.h")
    cmake = git(repo, "show", f"{tag}:CMakeLists.txt")
    symmap = git(repo, "show", f"{tag}:libibverbs/libibverbs.map.in")

    out = collections.OrderedDict()
    for s in STRUCTS:
        out[f"struct {s}"] = struct_body(driver, s)
    out["struct list_node (ccan)"] = struct_body(ccan, "list_node")
    for f in FUNCS:
        out[f"{f}()"] = prototype(driver, f)
    for c in CMDS:
        m = re.search(r"DECLARE_CMD\(" + c + r",[^\n]*", kern_abi)
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
    for item, value in want.items():
        print(f"{item}: same as {ref} in "
              f"{ranges(tags, lambda t: per_tag[t][item] == value)}")
    print(f"\nEVERYTHING same as {ref} in "
          f"{ranges(tags, lambda t: per_tag[t] == want)}")


if __name__ == "__main__":
    main()
