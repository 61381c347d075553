#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Compares nvpeer's declarations of the two foreign ABIs with the real headers (tests/abi).

  abi.py gen --ours DIR --real-peer-mem FILE --real-nv-p2p FILE --out WORK
      Scans both header sets and writes into WORK the Kbuild and three translation units:
        abi_ours.c / abi_real.c  include one header set each; built to .o with DWARF (struct,
                                 union, typedef and enum layouts) and to .s, where every macro
                                 and enumerator value is emitted as `.ascii "->LABEL $VALUE"`
                                 (the asm-offsets technique);
        abi_proto.c              includes the REAL headers and our prototypes under renamed
                                 typedefs; assigns each real function to a pointer of our type
                                 and records __builtin_types_compatible_p of the two.
  abi.py compare --work WORK [--report FILE]
      After `make -C KDIR M=WORK abi_ours.o abi_real.o abi_ours.s abi_real.s abi_proto.s`:
      compares everything both sides declare, prints each mismatch and the line
      "abi: N items compared, M mismatches"; exits 1 when M > 0.

Everything that exists on one side only is listed as a note, not a mismatch, with one
exception: a member present in only one side of a struct both declare is a mismatch, unless it
is a documented version difference (the `flags` member of page table 2.x against a 1.x header).
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys

# ----------------------------------------------------------------------------- header scanning


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_args(s):
    """Splits a macro/function argument list at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def scan_header(path):
    raw = open(path, encoding="utf-8", errors="replace").read()
    text = strip_comments(raw).replace("\\\n", " ")
    lines = text.splitlines()
    macros, guard = {}, None
    directives = [l.strip() for l in lines if l.strip().startswith("#")]
    # The include guard: the first directive is `#ifndef X`, the next `#define X`.
    if len(directives) >= 2:
        m1 = re.match(r"#\s*ifndef\s+(\w+)$", directives[0])
        m2 = re.match(r"#\s*define\s+(\w+)\s*$", directives[1])
        if m1 and m2 and m1.group(1) == m2.group(1):
            guard = m1.group(1)
    for l in directives:
        m = re.match(r"#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)$", l)
        if not m or m.group(1) == guard:
            continue
        params = None if m.group(2) is None else [p.strip() for p in m.group(3).split(",") if p.strip()]
        macros[m.group(1)] = {"params": params, "body": m.group(4).strip()}
    code = "\n".join(l for l in lines if not l.strip().startswith("#"))
    enumerators = []
    for m in re.finditer(r"\benum\b\s*\w*\s*\{(.*?)\}", code, flags=re.S):
        for item in split_args(m.group(1)):
            n = re.match(r"\s*([A-Za-z_]\w*)", item)
            if n:
                enumerators.append(n.group(1))
    functions = {}
    depth, stmt = 0, ""
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            s = " ".join(stmt.split())
            stmt = ""
            if "{" in s or s.startswith("typedef") or not s:
                continue
            f = re.match(r"^(?:extern\s+)?(?P<ret>[\w\s\*]*?[\w\*])\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)$", s)
            if f and f.group("ret").split()[-1] not in ("return",):
                functions[f.group("name")] = {"ret": f.group("ret").strip(), "params": f.group("params").strip()}
            continue
        stmt += ch
    return {"path": path, "macros": macros, "guard": guard, "enumerators": enumerators, "functions": functions}


def merge_scans(scans):
    out = {"macros": {}, "enumerators": [], "functions": {}, "guards": [], "paths": []}
    for s in scans:
        out["macros"].update(s["macros"])
        out["enumerators"] += [e for e in s["enumerators"] if e not in out["enumerators"]]
        out["functions"].update(s["functions"])
        out["guards"].append(s["guard"])
        out["paths"].append(s["path"])
    return out


def pointer_params(macros):
    """For every function-like macro, the set of parameter indexes used as struct pointers
    (`(p)->` in the body, or handed on to another macro in such a position)."""
    kinds = {n: set() for n, m in macros.items() if m["params"] is not None}
    changed = True
    while changed:
        changed = False
        for n, m in macros.items():
            if m["params"] is None:
                continue
            for i, p in enumerate(m["params"]):
                if i in kinds[n]:
                    continue
                ptr = re.search(r"\(\s*%s\s*\)\s*->|\b%s\s*->" % (re.escape(p), re.escape(p)), m["body"])
                if not ptr:
                    for c in re.finditer(r"\b(\w+)\s*\(", m["body"]):
                        callee = c.group(1)
                        if callee not in kinds or not kinds[callee]:
                            continue
                        # the argument list of this call
                        rest, depth, j = m["body"][c.end():], 1, 0
                        while j < len(rest) and depth:
                            depth += {"(": 1, ")": -1}.get(rest[j], 0)
                            j += 1
                        args = split_args(rest[: j - 1])
                        for k in kinds[callee]:
                            if k < len(args) and re.fullmatch(r"\(*\s*%s\s*\)*" % re.escape(p), args[k]):
                                ptr = True
                if ptr:
                    kinds[n].add(i)
                    changed = True
    return kinds


# Arguments the function-like macros are evaluated with: every combination.
INT_VECTORS = [0x0, 0x00010001, 0x00010002, 0x00020000, 0x00020003, 0x00020004, 0x0003FFFF, 0xFFFF0000]


def macro_vectors(nparams, ptr_idx):
    out = []
    for combo in itertools.product(INT_VECTORS, repeat=nparams):
        args, label = [], []
        for i, v in enumerate(combo):
            if i in ptr_idx:
                args.append("ABI_P(0x%x)" % v)
                label.append("p.version=0x%x" % v)
            else:
                args.append("0x%xULL" % v)
                label.append("0x%x" % v)
        out.append((", ".join(args), ",".join(label)))
    return out


COMMON_H = r"""/* Generated by tests/abi/abi.py. */
#define ABI_VAL(label, val) \
	asm volatile("\n.ascii \"->" label " %0\"" : : "i" ((long long)(val)))
struct abi_v { unsigned int version; };
#define ABI_P(v) (&(const struct abi_v){ .version = (v) })
"""

KERNEL_INCLUDES = "#include <linux/types.h>\n#include <linux/scatterlist.h>\n"


def value_lines(side, other, kinds_side, kinds_other):
    """ABI_VAL lines of one side: every macro and enumerator it declares; function-like macros
    with the argument vectors both sides agree on."""
    lines = []
    for name, m in sorted(side["macros"].items()):
        if m["params"] is None:
            if m["body"]:
                lines.append('\tABI_VAL("macro %s", %s);' % (name, name))
            continue
        o = other["macros"].get(name)
        if o is None or o["params"] is None or len(o["params"]) != len(m["params"]):
            continue
        if kinds_side[name] != kinds_other[name]:
            continue
        for args, label in macro_vectors(len(m["params"]), kinds_side[name]):
            lines.append('\tABI_VAL("macro %s(%s)", %s(%s));' % (name, label, name, args))
    for e in side["enumerators"]:
        lines.append('\tABI_VAL("enum %s", %s);' % (e, e))
    return lines


def gen(args):
    ours = merge_scans([scan_header(os.path.join(args.ours, "rdma/peer_mem.h")),
                        scan_header(os.path.join(args.ours, "nv-p2p.h"))])
    real = merge_scans([scan_header(args.real_peer_mem), scan_header(args.real_nv_p2p)])
    ko, kr = pointer_params(ours["macros"]), pointer_params(real["macros"])
    os.makedirs(args.out, exist_ok=True)

    def w(name, text):
        with open(os.path.join(args.out, name), "w") as f:
            f.write(text)

    w("abi_common.h", COMMON_H)
    w("Kbuild", "# Generated by tests/abi/abi.py.\n"
      "obj-m := abi_ours.o abi_real.o abi_proto.o\n"
      "ccflags-y := -g -gdwarf-4 -fno-eliminate-unused-debug-types -I$(src)\n"
      "CFLAGS_abi_proto.o := -Wno-error=incompatible-pointer-types\n"
      "# the .ascii value lines inside a function are not code objtool could follow\n"
      "OBJECT_FILES_NON_STANDARD := y\n")
    for side_name, side, other, ks, kother in (("ours", ours, real, ko, kr), ("real", real, ours, kr, ko)):
        inc = "".join('#include "%s"\n' % os.path.abspath(p) for p in side["paths"])
        w("abi_%s.c" % side_name,
          "/* Generated by tests/abi/abi.py: values of the %s headers. */\n" % side_name
          + KERNEL_INCLUDES + inc + '#include "abi_common.h"\n\n'
          + "void abi_values(void);\nvoid abi_values(void)\n{\n"
          + "\n".join(value_lines(side, other, ks, kother)) + "\n}\n")
    shared_fns = sorted(set(ours["functions"]) & set(real["functions"]))
    proto = ["/* Generated by tests/abi/abi.py: each REAL function against OUR prototype. */",
             KERNEL_INCLUDES.rstrip("\n")]
    proto += ['#include "%s"' % os.path.abspath(p) for p in real["paths"]]
    proto += ['#include "abi_common.h"', ""]
    for fn in shared_fns:
        o = ours["functions"][fn]
        proto.append("typedef %s (*abi_ours_%s_t)(%s);" % (o["ret"], fn, o["params"]))
        proto.append("static abi_ours_%s_t abi_assign_%s __attribute__((used)) = %s;" % (fn, fn, fn))
    proto += ["", "void abi_protos(void);", "void abi_protos(void)", "{"]
    for fn in shared_fns:
        proto.append('\tABI_VAL("proto %s", __builtin_types_compatible_p(typeof(&%s), abi_ours_%s_t));'
                     % (fn, fn, fn))
    proto.append("}")
    w("abi_proto.c", "\n".join(proto) + "\n")
    meta = {}
    for side_name, side in (("ours", ours), ("real", real)):
        meta[side_name] = {"paths": side["paths"], "macros": side["macros"],
                           "enumerators": side["enumerators"], "functions": side["functions"]}
    w("abi_meta.json", json.dumps(meta, indent=1))
    return 0


# ----------------------------------------------------------------------------- DWARF reading


def readelf(*a):
    return subprocess.run(["readelf"] + list(a), check=True, capture_output=True, text=True).stdout


def parse_dwarf(obj):
    dies, parents, cur = {}, {}, None
    for line in readelf("--debug-dump=info", obj).splitlines():
        m = re.match(r"\s*<(\d+)><([0-9a-f]+)>: Abbrev Number: (\d+)(?: \((\w+)\))?", line)
        if m:
            depth, off, num, tag = int(m.group(1)), int(m.group(2), 16), int(m.group(3)), m.group(4)
            if num == 0:
                cur = None
                continue
            die = {"off": off, "tag": tag, "attrs": {}, "children": [], "depth": depth}
            dies[off] = die
            parents[depth] = die
            if depth > 0 and depth - 1 in parents:
                parents[depth - 1]["children"].append(off)
                die["parent"] = parents[depth - 1]["off"]
            cur = die
            continue
        m = re.match(r"\s*<[0-9a-f]+>\s+(DW_AT_\w+)\s*:\s*(.*)$", line)
        if m and cur is not None:
            val = re.sub(r"^\((?:indirect|indexed|alt indirect)[^)]*\):\s*", "", m.group(2).strip())
            cur["attrs"][m.group(1)] = val
    files = {}
    in_table = False
    for line in readelf("--debug-dump=rawline", obj).splitlines():
        if "The File Name Table" in line:
            in_table = True
            continue
        if in_table:
            m = re.match(r"\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(\S+)\s*$", line)
            if m:
                files[int(m.group(1))] = os.path.basename(m.group(3))
            elif line.strip() and not line.strip().startswith("Entry"):
                in_table = False
    return dies, files


def ref(v):
    m = re.match(r"<0x([0-9a-f]+)>", v or "")
    return int(m.group(1), 16) if m else None


def intval(v):
    m = re.search(r"DW_OP_plus_uconst: (\d+)", v)
    if m:
        return int(m.group(1))
    return int(v.split()[0], 0)


class Types:
    def __init__(self, dies):
        self.d = dies

    def name(self, off):
        if off is None:
            return "void"
        d = self.d[off]
        t, a = d["tag"], d["attrs"]
        inner = ref(a.get("DW_AT_type"))
        if t == "DW_TAG_base_type":
            return a["DW_AT_name"]
        if t == "DW_TAG_pointer_type":
            return self.name(inner) + " *"
        if t == "DW_TAG_const_type":
            return "const " + self.name(inner)
        if t == "DW_TAG_volatile_type":
            return "volatile " + self.name(inner)
        if t == "DW_TAG_typedef":
            return self.name(inner)
        if t in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_enumeration_type"):
            kw = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
                  "DW_TAG_enumeration_type": "enum"}[t]
            return "%s %s" % (kw, a.get("DW_AT_name", "{anonymous}"))
        if t == "DW_TAG_array_type":
            dims = ""
            for c in d["children"]:
                ca = self.d[c]["attrs"]
                if "DW_AT_count" in ca:
                    dims += "[%d]" % intval(ca["DW_AT_count"])
                elif "DW_AT_upper_bound" in ca:
                    dims += "[%d]" % (intval(ca["DW_AT_upper_bound"]) + 1)
                else:
                    dims += "[]"
            return self.name(inner) + dims
        if t == "DW_TAG_subroutine_type":
            ps = []
            for c in d["children"]:
                cd = self.d[c]
                if cd["tag"] == "DW_TAG_formal_parameter":
                    ps.append(self.name(ref(cd["attrs"].get("DW_AT_type"))))
                elif cd["tag"] == "DW_TAG_unspecified_parameters":
                    ps.append("...")
            if "DW_AT_prototyped" in a and not ps:
                ps = ["void"]
            return "%s (%s)" % (self.name(inner), ", ".join(ps))
        return t

    def size(self, off):
        if off is None:
            return 0
        d = self.d[off]
        a = d["attrs"]
        if "DW_AT_byte_size" in a:
            return intval(a["DW_AT_byte_size"])
        if d["tag"] == "DW_TAG_pointer_type":
            return 8
        if d["tag"] == "DW_TAG_array_type":
            n = 1
            for c in d["children"]:
                ca = self.d[c]["attrs"]
                if "DW_AT_count" in ca:
                    n *= intval(ca["DW_AT_count"])
                elif "DW_AT_upper_bound" in ca:
                    n *= intval(ca["DW_AT_upper_bound"]) + 1
            return n * self.size(ref(a.get("DW_AT_type")))
        return self.size(ref(a.get("DW_AT_type")))

    def strip(self, off):
        """Through typedefs and qualifiers, to the defining DIE."""
        while off is not None and self.d[off]["tag"] in ("DW_TAG_typedef", "DW_TAG_const_type",
                                                        "DW_TAG_volatile_type"):
            off = ref(self.d[off]["attrs"].get("DW_AT_type"))
        return off

    def members(self, off, prefix="", base=0):
        """Flattened members: path -> (offset, size, type[, bits]). Anonymous aggregates and
        aggregates defined inline without a tag are descended into."""
        out = {}
        for c in self.d[off]["children"]:
            cd = self.d[c]
            if cd["tag"] != "DW_TAG_member":
                continue
            a = cd["attrs"]
            name = a.get("DW_AT_name", "")
            moff = base + (intval(a["DW_AT_data_member_location"]) if "DW_AT_data_member_location" in a else 0)
            t = ref(a.get("DW_AT_type"))
            path = prefix + name
            entry = {"offset": moff, "size": self.size(t), "type": self.name(t)}
            if "DW_AT_bit_size" in a:
                entry["bits"] = "%s@%s" % (a["DW_AT_bit_size"], a.get("DW_AT_data_bit_offset", a.get("DW_AT_bit_offset")))
            if path:
                out[path] = entry
            inner = self.strip(t)
            while inner is not None and self.d[inner]["tag"] == "DW_TAG_array_type":
                inner = self.strip(ref(self.d[inner]["attrs"].get("DW_AT_type")))
            if inner is not None and self.d[inner]["tag"] in ("DW_TAG_structure_type", "DW_TAG_union_type") \
                    and "DW_AT_name" not in self.d[inner]["attrs"]:
                out.update(self.members(inner, path + "." if path else "", moff))
        return out


def layouts(obj, header_names):
    """Structs, unions, enums and typedefs declared in the given header files."""
    dies, files = parse_dwarf(obj)
    T = Types(dies)
    ours = {i for i, n in files.items() if n in header_names}
    aggs, typedefs, enums = {}, {}, {}

    def in_headers(d):
        try:
            return int(d["attrs"].get("DW_AT_decl_file", "-1")) in ours
        except ValueError:
            return False

    for off, d in dies.items():
        if not in_headers(d) or "DW_AT_declaration" in d["attrs"]:
            continue
        t, a = d["tag"], d["attrs"]
        if t in ("DW_TAG_structure_type", "DW_TAG_union_type") and "DW_AT_name" in a:
            kw = "struct" if t == "DW_TAG_structure_type" else "union"
            aggs["%s %s" % (kw, a["DW_AT_name"])] = {"size": T.size(off), "members": T.members(off)}
        elif t == "DW_TAG_enumeration_type" and "DW_AT_name" in a:
            enums["enum " + a["DW_AT_name"]] = T.size(off)
        elif t == "DW_TAG_typedef":
            target = ref(a.get("DW_AT_type"))
            typedefs[a["DW_AT_name"]] = T.name(target)
            s = T.strip(target)
            if s is not None and "DW_AT_name" not in dies[s]["attrs"] and dies[s]["tag"] in (
                    "DW_TAG_structure_type", "DW_TAG_union_type"):
                aggs["typedef %s" % a["DW_AT_name"]] = {"size": T.size(s), "members": T.members(s)}
    return aggs, typedefs, enums


def asm_values(sfile):
    vals = {}
    for line in open(sfile):
        m = re.search(r'\.ascii\s+"->(.*) \$?(-?\d+)"', line)
        if m:
            vals[m.group(1)] = int(m.group(2))
    return vals


# ----------------------------------------------------------------------------- comparison


def compare(args):
    W = args.work
    meta = json.load(open(os.path.join(W, "abi_meta.json")))
    hdrs = {"peer_mem.h", "nv-p2p.h"}
    o_aggs, o_tds, o_enums = layouts(os.path.join(W, "abi_ours.o"), hdrs)
    r_aggs, r_tds, r_enums = layouts(os.path.join(W, "abi_real.o"), hdrs)
    ov, rv = asm_values(os.path.join(W, "abi_ours.s")), asm_values(os.path.join(W, "abi_real.s"))
    pv = asm_values(os.path.join(W, "abi_proto.s"))

    items, mismatches, notes, report = 0, [], [], []

    def check(label, a, b, fmt=str):
        nonlocal items
        items += 1
        if a == b:
            report.append("ok        %s: %s" % (label, fmt(a)))
            return True
        mismatches.append("%s: ours %s, real %s" % (label, fmt(a), fmt(b)))
        report.append("MISMATCH  %s: ours %s, real %s" % (label, fmt(a), fmt(b)))
        return False

    def note(s):
        notes.append(s)
        report.append("note      " + s)

    hx = lambda v: "0x%x" % (v & 0xFFFFFFFFFFFFFFFF) if v < 0 else "0x%x" % v

    # Page-table generations: ours declares 1.x and 2.x; the real header one of them.
    rpt = rv.get("macro NVIDIA_P2P_PAGE_TABLE_VERSION")
    real_pt_major = (rpt >> 16) if rpt is not None else None
    allowed_ours_only = set()
    pt_size_override = None
    if real_pt_major is not None and real_pt_major < 2:
        allowed_ours_only.add(("struct nvidia_p2p_page_table", "flags"))
        allowed_ours_only.add(("typedef nvidia_p2p_page_table_t", "flags"))
        pt_size_override = ov.get("macro NVIDIA_P2P_PAGE_TABLE_V1_SIZE")

    # 1. structs and unions
    for key in sorted(set(o_aggs) | set(r_aggs)):
        if key not in r_aggs:
            note("%s only in ours" % key)
            continue
        if key not in o_aggs:
            note("%s only in the real header" % key)
            continue
        o, r = o_aggs[key], r_aggs[key]
        om, rm = o["members"], r["members"]
        if key in ("struct nvidia_p2p_page_table", "typedef nvidia_p2p_page_table_t") and pt_size_override is not None:
            check("sizeof(%s) [real page table 0x%08x vs ours NVIDIA_P2P_PAGE_TABLE_V1_SIZE]" % (key, rpt),
                  pt_size_override, r["size"])
            note("sizeof(%s): ours %d (page table 2.x), the real header declares 1.x (%d bytes)"
                 % (key, o["size"], r["size"]))
        else:
            check("sizeof(%s)" % key, o["size"], r["size"])
        for m in sorted(set(om) | set(rm), key=lambda p: (om.get(p, rm.get(p))["offset"], p)):
            if m not in rm:
                if (key, m) in allowed_ours_only:
                    note("%s.%s only in ours (page table 2.x member; the real header is 0x%08x)" % (key, m, rpt))
                    if om[m]["offset"] < r["size"]:
                        check("%s.%s lies past the end of the real 1.x table" % (key, m), True, False)
                else:
                    items += 1
                    mismatches.append("%s: member %s only in ours (offset %d)" % (key, m, om[m]["offset"]))
                    report.append("MISMATCH  %s: member %s only in ours" % (key, m))
                continue
            if m not in om:
                items += 1
                mismatches.append("%s: member %s only in the real header (offset %d, %s)"
                                  % (key, m, rm[m]["offset"], rm[m]["type"]))
                report.append("MISMATCH  %s: member %s only in the real header" % (key, m))
                continue
            check("offsetof(%s, %s)" % (key, m), om[m]["offset"], rm[m]["offset"])
            check("sizeof(%s.%s)" % (key, m), om[m]["size"], rm[m]["size"])
            check("type of %s.%s" % (key, m), om[m]["type"], rm[m]["type"])
            if "bits" in om[m] or "bits" in rm[m]:
                check("bit-field %s.%s" % (key, m), om[m].get("bits"), rm[m].get("bits"))

    # 2. typedefs and enum types
    for name in sorted(set(o_tds) | set(r_tds)):
        if name not in r_tds:
            note("typedef %s only in ours" % name)
        elif name not in o_tds:
            note("typedef %s only in the real header" % name)
        else:
            check("typedef %s" % name, o_tds[name], r_tds[name])
    for name in sorted(set(o_enums) | set(r_enums)):
        if name in o_enums and name in r_enums:
            check("sizeof(%s)" % name, o_enums[name], r_enums[name])
        else:
            note("%s only in %s" % (name, "ours" if name in o_enums else "the real header"))

    # 3. macros (values; function-like ones over argument vectors; empty ones by presence)
    om_, rm_ = meta["ours"]["macros"], meta["real"]["macros"]
    for name in sorted(set(om_) | set(rm_)):
        if name not in rm_:
            note("macro %s only in ours" % name)
            continue
        if name not in om_:
            note("macro %s only in the real header" % name)
            continue
        o, r = om_[name], rm_[name]
        if (o["params"] is None) != (r["params"] is None) or (o["params"] and len(o["params"]) != len(r["params"])):
            check("macro %s: form" % name, o["params"], r["params"])
            continue
        if o["params"] is None:
            if not o["body"] or not r["body"]:
                check("macro %s: defined empty" % name, not o["body"], not r["body"])
                continue
            label = "macro %s" % name
            ours_val = ov.get(label)
            if name == "NVIDIA_P2P_PAGE_TABLE_VERSION" and real_pt_major is not None:
                alt = ov.get("macro NVIDIA_P2P_PAGE_TABLE_VERSION_V%d" % real_pt_major)
                if alt is not None and alt != ours_val:
                    note("ours NVIDIA_P2P_PAGE_TABLE_VERSION is %s; the real header is page table %d.x: "
                         "compared with ours NVIDIA_P2P_PAGE_TABLE_VERSION_V%d" % (hx(ours_val), real_pt_major, real_pt_major))
                    check("macro NVIDIA_P2P_PAGE_TABLE_VERSION [ours _V%d]" % real_pt_major, alt, rv.get(label), hx)
                    continue
            if ours_val is None or rv.get(label) is None:
                items += 1
                mismatches.append("%s: not evaluated (ours %s, real %s)" % (label, ours_val, rv.get(label)))
                continue
            check(label, ours_val, rv[label], hx)
            continue
        olab = {k: v for k, v in ov.items() if k.startswith("macro %s(" % name)}
        rlab = {k: v for k, v in rv.items() if k.startswith("macro %s(" % name)}
        if not olab or set(olab) != set(rlab):
            check("macro %s: argument kinds" % name, sorted(olab)[:1], sorted(rlab)[:1])
            continue
        bad = [k for k in sorted(olab) if olab[k] != rlab[k]]
        items += 1
        if bad:
            mismatches.append("macro %s differs for %d of %d argument vectors, e.g. %s: ours %s, real %s"
                              % (name, len(bad), len(olab), bad[0], olab[bad[0]], rlab[bad[0]]))
            report.append("MISMATCH  macro %s (%d vectors differ)" % (name, len(bad)))
        else:
            report.append("ok        macro %s: equal over %d argument vectors" % (name, len(olab)))

    # 4. enumerators
    oe, re_ = meta["ours"]["enumerators"], meta["real"]["enumerators"]
    for e in sorted(set(oe) | set(re_)):
        if e in oe and e in re_:
            check("enum %s" % e, ov.get("enum " + e), rv.get("enum " + e))
        else:
            note("enumerator %s only in %s" % (e, "ours" if e in oe else "the real header"))

    # 5. function prototypes
    of, rf = meta["ours"]["functions"], meta["real"]["functions"]
    for fn in sorted(set(of) | set(rf)):
        if fn in of and fn in rf:
            ok = pv.get("proto %s" % fn)
            items += 1
            if ok == 1:
                report.append("ok        prototype %s: compatible" % fn)
            else:
                mismatches.append("prototype %s: the real function's type is %s with ours: %s %s(%s)"
                                  % (fn, "not compatible" if ok == 0 else "not comparable", of[fn]["ret"],
                                     fn, of[fn]["params"]))
                report.append("MISMATCH  prototype %s" % fn)
        else:
            note("function %s only in %s" % (fn, "ours" if fn in of else "the real header"))

    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(report) + "\n")
    for n in notes:
        print("abi: note: " + n)
    for m in mismatches:
        print("abi: MISMATCH: " + m)
    print("abi: %d items compared, %d mismatches" % (items, len(mismatches)))
    return 1 if mismatches or items == 0 else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--ours", required=True)
    g.add_argument("--real-peer-mem", required=True)
    g.add_argument("--real-nv-p2p", required=True)
    g.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--work", required=True)
    c.add_argument("--report")
    a = ap.parse_args()
    return gen(a) if a.cmd == "gen" else compare(a)


if __name__ == "__main__":
    sys.exit(main())
