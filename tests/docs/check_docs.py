#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The READMEs must not promise what the CLI does not have.

1. Every `nvpeer ...` invocation in README.md, kmod/README.md, userspace/README.md,
   userspace/CHECKS.md, userspace/SCHEMAS.md and tests/README.md (code blocks and inline code),
   and every flag named in inline code under a command's section of userspace/README.md: the
   subcommand, each flag and each listed value (`--op write|read`) must be in
   `nvpeer [<cmd>] --help` of the built binary.
2. Every field of the JSON schemas in any of those files (userspace/SCHEMAS.md; check's in
   userspace/CHECKS.md), as a path (`facts.acs[].acs.state`),
   must occur in the output of a run: check/topo/stats on every fixture tree (plus a tree with a
   `failures` file, one with an unparsable link file on a pair's path, an empty procfs and NCCL
   variables set), selftest on this host, nccl-log on
   every tests/fixtures/nccl-logs/*.log; who, detach and attach (--dry-run) on a copy of the pix
   tree with the module's records and per-GPU totals. Fields that no
   run here can produce (all of bench; a few of check, listed in STATIC) are resolved instead
   through the #[derive(Serialize)] types of userspace/nvpeer-core/src: the path must exist field
   by field in the serialized shape. A field that is in neither fails.

3. Every sample of a `check --brief` line (`nvpeer: ready (...)`, `NVPEER OK - ... | ok=N ...`)
   in the docs must be the shape of a line the binary prints on some fixture (numbers and `...`
   match anything; a sample may stop early), and every schema name (`nvpeer.<name>/<N>`) the
   docs mention must be one the binary writes (or, READ_ONLY, reads).
4. The man pages `nvpeer __generate-docs` writes: each has EXIT STATUS and EXAMPLES, each
   EXAMPLES command passes (1), and the check ids of nvpeer-check(1) are exactly the rows of
   the check table in userspace/README.md.

Prints one line per failure and "docs: N checked, N failed"; exit 1 on any failure.
--self-test: a clean copy of the READMEs must pass, a copy with a planted bogus subcommand,
flag, value, JSON fields, brief sample and schema name must fail on exactly those.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
READMES = ["README.md", "kmod/README.md", "userspace/README.md", "userspace/CHECKS.md", "userspace/SCHEMAS.md",
           "tests/README.md"]
# The CLI's README: its command sections (flags named alone) and its check table.
CLI_DOC = "userspace/README.md"
# The JSON schemas are read from the code blocks of every doc, wherever they live (today
# SCHEMAS.md, and check's in CHECKS.md); their shapes (`<name> = ...`) are shared.
SCHEMA_DOCS = READMES
SRC = os.path.join(REPO, "userspace/nvpeer-core/src")
FIXTURES = os.path.join(REPO, "tests/fixtures")

# Paths no run without hardware can produce, resolved through the serialized Rust type named.
# check: libibverbs here sees no device (so no verbs device list and no dma-buf NIC probe), and
# no fixture has a config space too short to read ACS (on a GPU-NIC path or a Grace bridge). bench needs an RDMA device.
STATIC = {
    "nvpeer.check/2": [("facts.verbs", "Verbs"), ("facts.dmabuf.nics.*", "DmabufProbe"),
                       ("facts.acs[].acs", "Acs"), ("facts.grace.acs_ports[].acs", "Acs")],
    "nvpeer.bench/1": [("", "BenchReport")],
    "nvpeer.bench-loopback-all/2": [("", "LoopbackAllReport")],
}

failures = []
checked = 0


def fail(msg):
    failures.append(msg)
    print(msg)


def count():  # one more documented item checked
    global checked
    checked += 1


# ---------------------------------------------------------------------------------------------
# 1. Subcommands and flags.

def parse_help(text):
    """{flag: (takes_value, [possible values])} and the subcommands of a --help text."""
    flags, subs, cur = {}, [], None
    section = None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            section = line[:-1]
            continue
        if section == "Commands":
            m = re.match(r"^  ([a-z][\w-]*)\s", line)
            if m:
                subs.append(m.group(1))
            continue
        m = re.match(r"^\s{2,}(?:(-[A-Za-z0-9]), )?(--[A-Za-z0-9][\w-]*)(?: <[^>]+>)?", line) \
            or re.match(r"^\s{2,}(-[A-Za-z0-9])(?: <[^>]+>)?(?:\s|$)", line)
        if m:
            takes = "<" in m.group(0)
            cur = {"takes": takes, "values": []}
            for name in m.groups():
                if name:
                    flags[name] = cur
            pv = re.search(r"\[possible values: ([^\]]+)\]", line)
            if pv:
                cur["values"] += [v.strip() for v in pv.group(1).split(",")]
            continue
        if cur is not None:
            pv = re.search(r"\[possible values: ([^\]]+)\]", line)
            if pv:
                cur["values"] += [v.strip() for v in pv.group(1).split(",")]
            m = re.match(r"^\s+- ([a-z][\w-]*)(?::|$)", line)
            if m:
                cur["values"].append(m.group(1))
    return flags, subs


class Cli:
    def __init__(self, binary):
        self.binary = binary
        self.helps = {}
        self.help_texts = {}  # sub (None: the main help) -> the --help text, as printed
        self.main_flags, self.subs = self.help(None)

    def help(self, sub):
        if sub not in self.helps:
            argv = [self.binary] + ([sub] if sub else []) + ["--help"]
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"docs: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
            self.helps[sub] = parse_help(r.stdout)
            self.help_texts[sub] = r.stdout
        return self.helps[sub]


def check_flags(cli, where, sub, tokens):
    """Checks the flag tokens (and their listed values) against `nvpeer [sub] --help`."""
    flags = cli.help(sub)[0] if sub else cli.main_flags
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not re.match(r"^--?[A-Za-z]", tok):
            continue
        name = tok.split("=", 1)[0]
        count()
        if name not in flags:
            fail(f"{where}: nvpeer {sub or ''} has no flag {name} (not in its --help)".replace("  ", " "))
            continue
        spec = flags[name]
        if not spec["takes"] or "=" in tok:
            continue
        if i < len(tokens) and not tokens[i].startswith("-"):
            value = tokens[i]
            i += 1
            if spec["values"] and re.match(r"^[a-z][\w-]*(\|[a-z][\w-]*)*$", value):
                for v in value.split("|"):
                    count()
                    if v not in spec["values"]:
                        fail(f"{where}: {name} takes no value {v!r} (possible: {', '.join(spec['values'])})")


def split_invocation(rest):
    # Inside [...] a spaced '|' separates alternatives of the synopsis, not a shell pipe.
    out, depth = [], 0
    for ch in rest:
        depth += ch == "["
        depth -= ch == "]" and depth > 0
        out.append(" " if ch == "|" and depth and out and out[-1] == " " else ch)
    rest = re.split(r"\s(?:\|\|?|&&)\s|;|\s[12]?>|\)|`", "".join(out))[0]
    return [t for t in rest.replace("[", " ").replace("]", " ").split() if t != "..."]


def check_invocation(cli, where, rest):
    tokens = split_invocation(rest)
    sub, args = None, []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if sub is None and not tok.startswith("-"):
            if not re.match(r"^[a-z][a-z0-9-]*$", tok):
                return  # prose such as `nvpeer <version>`: not an invocation
            count()
            if tok not in cli.subs:
                fail(f"{where}: nvpeer has no subcommand {tok!r}")
                return
            check_flags(cli, where, None, args)
            sub, args = tok, []
        else:
            args.append(tok)
            spec = (cli.help(sub)[0] if sub else cli.main_flags).get(tok.split("=")[0])
            if spec and spec["takes"] and "=" not in tok and i + 1 < len(tokens):
                args.append(tokens[i + 1])
                i += 1
        i += 1
    check_flags(cli, where, sub, args)


INVOCATION = re.compile(r"(?:^|[\s;&|(])(?:[\w.~-]*/)*nvpeer[ \t]+(\S.*)")


def check_readme_flags(cli, root):
    for rel in READMES:
        path = os.path.join(root, rel)
        in_code, section = False, None
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            where = f"{rel}:{n}"
            if line.startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                texts = [re.sub(r"(^|\s)#(\s.*)?$", "", line)]
            else:
                if line.startswith("## "):
                    m = re.match(r"^## `nvpeer (\w+)`", line)
                    section = m.group(1) if m else ("" if line.startswith("## Global") else None)
                texts = re.findall(r"`([^`]+)`", line)
            for text in texts:
                for m in INVOCATION.finditer(text):
                    check_invocation(cli, where, m.group(1))
                # A flag named alone under a command's section of the CLI's README.
                if not in_code and rel == CLI_DOC and section is not None and text.startswith("-"):
                    check_flags(cli, where, section or None, split_invocation(text))


# ---------------------------------------------------------------------------------------------
# 2. JSON schemas: the docs' notation into field paths.

TOKEN = re.compile(r'"[^"]*"|<[^>]+>|[{}\[\]:,|=?]|[A-Za-z_][\w.]*|\S')


def join(path, key):
    return f"{path}.{key}" if path else key


def parse_schema_block(text, where):
    """Returns (keys, refs, schema): keys are field paths, refs (path, shape name) pairs."""
    text = "\n".join(re.sub(r"(^|\s)#(\s.*)?$", "", l) for l in text.splitlines())
    text = re.sub(r"\([^()\"]*\)", " ", text)  # "(numbers)": prose
    toks = TOKEN.findall(text)
    keys, refs, stack = [], [], []
    vpath, pos, schema = "", "value", None
    i = 0

    def err(msg):
        raise ValueError(f"{where}: schema notation: {msg} near {' '.join(toks[max(0, i - 4):i + 3])}")

    def elem_path():
        return stack[-1][1] + "[]" if stack and stack[-1][0] == "[" else vpath

    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        top = stack[-1][0] if stack else None
        if t == "{":
            if pos != "value":
                err("'{' where no value may stand")
            stack.append(("{", elem_path()))
            pos = "key"
        elif t == "[":
            if pos != "value":
                err("'[' where no value may stand")
            stack.append(("[", elem_path()))
            pos = "value"
        elif t in "}]":
            if not stack or stack[-1][0] != {"}": "{", "]": "["}[t]:
                err(f"unbalanced {t!r}")
            _, vpath = stack.pop()
            if stack and stack[-1][0] == "[":
                vpath = stack[-1][1]
            pos = "after"
        elif t == ",":
            pos = "key" if top == "{" else "value"
        elif t == ":":
            if pos != "after" or top != "{":
                err("':' after no key")
            pos = "value"
        elif t == "|":
            pos = "value"
        elif t == "?":
            pass
        elif t.startswith('"'):
            s = t[1:-1]
            if pos == "key" and top == "{":
                vpath = join(stack[-1][1], re.sub(r"<[^>]+>", "*", s))
                keys.append(vpath)
                pos = "after"
            elif pos == "value":
                if stack and len(stack) == 1 and keys and keys[-1] == "schema" and schema is None:
                    schema = s
                pos = "after"
            else:
                err(f"string {t} where no key or value may stand")
        elif t.startswith("<"):
            name = t[1:-1]
            if not stack and nxt == "=":
                vpath, pos = f"<{name}>", "value"
                i += 2
                continue
            if pos == "key" and top == "{":
                refs.append((stack[-1][1], name))  # its fields are this object's
            elif pos == "value":
                refs.append((elem_path(), name))
            else:
                err(f"{t} where no value may stand")
            pos = "after"
        else:  # a bare word: a map's key name, or a value's type in words
            if pos == "key" and top == "{":
                if nxt != ":":
                    err(f"bare word {t!r} where a key must stand")
                vpath = join(stack[-1][1], "*")
                pos = "after"
            elif pos == "value":
                pos = "after"
        i += 1
    if stack:
        err("unclosed bracket")
    return keys, refs, schema


def documented_schemas(root):
    """{schema: (where, [field paths])} from the code blocks of SCHEMA_DOCS."""
    blocks = []
    for rel in SCHEMA_DOCS:
        cur, start = None, 0
        for n, line in enumerate(open(os.path.join(root, rel), encoding="utf-8"), 1):
            if line.startswith("```"):
                if cur is None:
                    cur, start = [], n
                else:
                    blocks.append((f"{rel}:{start}", "".join(cur)))
                    cur = None
            elif cur is not None:
                cur.append(line)
    parsed, shapes = [], {}
    for where, text in blocks:
        if not re.search(r'^(\{ "schema": "nvpeer\.|<)', text):
            continue
        try:
            keys, refs, schema = parse_schema_block(text, where)
        except ValueError as e:
            fail(str(e))
            continue
        # Shapes (<name> = ...) are shared by every schema of the docs (topo's <pci device> is check's too).
        for k in keys:
            m = re.match(r"^<([^>]+)>\.(.*)$", k)
            if m:
                shapes.setdefault(m.group(1), []).append(m.group(2))
        parsed.append((where, keys, refs, schema))
    all_refs = [r for _, _, refs, _ in parsed for r in refs]
    out = {}
    for where, keys, refs, schema in parsed:
        if schema is None:
            continue
        concrete = [k for k in keys if not k.startswith("<")]
        pending = list(refs)
        while pending:
            at, name = pending.pop()
            if name.startswith("nvpeer."):
                continue  # another schema, checked on its own
            if name not in shapes:
                fail(f"{where}: <{name}> is used but not defined")
                continue
            if at.startswith("<"):
                continue  # a shape inside a shape: expanded below, where the outer one is used
            concrete += [join(at, f) for f in shapes[name]]
            # shapes used inside this one, now at a concrete place
            for at2, name2 in all_refs:
                m = re.match(r"^<([^>]+)>\.?(.*)$", at2)
                if m and m.group(1) == name:
                    pending.append((join(at, m.group(2)), name2))
        if schema in out:
            fail(f"{where}: schema {schema} is documented twice (also at {out[schema][0]})")
        out[schema] = (where, sorted(set(concrete)))
    return out


def json_paths(value, path="", out=None):
    out = set() if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            q = join(path, k)
            out.add(q)
            json_paths(v, q, out)
    elif isinstance(value, list):
        for v in value:
            json_paths(v, path + "[]", out)
    return out


def path_regex(doc_path):
    parts = []
    for comp in doc_path.split("."):
        parts.append("[^.]*".join(re.escape(p) for p in comp.split("*")))
    return re.compile("^" + r"\.".join(parts) + "$")


# ---------------------------------------------------------------------------------------------
# The serialized shape of the Rust types (for STATIC): struct fields, enum variants' fields and
# serde's tag/content names; Option, Vec, Box and references unwrapped, maps keyed by '*'.

def rust_types():
    types = {}
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".rs"):
                parse_rust(open(os.path.join(dirpath, f), encoding="utf-8").read(), types)
    return types


def body_of(text, start):
    depth, i = 0, start
    while i < len(text):
        depth += text[i] == "{"
        depth -= text[i] == "}"
        if depth == 0:
            return text[start + 1:i]
        i += 1
    return text[start + 1:]


def split_top(text, sep=","):
    out, depth, cur = [], 0, []
    for ch in text:
        depth += ch in "{<(["
        depth -= ch in "}>)]"
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def parse_fields(body, fields):
    body = re.sub(r"//[^\n]*", "", body)
    for item in split_top(body):
        attrs = " ".join(re.findall(r"#\[serde\(([^]]*)\)\]", item))
        item = re.sub(r"#\[[^]]*\]", "", item).strip()
        m = re.match(r"^(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:\s*(.+)$", item, re.S)
        if not m or "skip" in re.findall(r"\b\w+\b", attrs):
            continue
        ty = " ".join(m.group(2).split())
        if "flatten" in attrs:
            fields.setdefault("<flatten>", []).append(ty)
            continue
        rn = re.search(r'rename\s*=\s*"([^"]+)"', attrs)
        fields[rn.group(1) if rn else m.group(1)] = ty


def parse_rust(text, types):
    for m in re.finditer(r"#\[derive\(([^)]*)\)\]((?:\s*#\[[^\n]*\]|\s*///[^\n]*)*)\s*pub\s+(struct|enum)\s+(\w+)[^{;]*\{", text):
        if "Serialize" not in m.group(1):
            continue
        attrs, kind, name = m.group(2), m.group(3), m.group(4)
        body = body_of(text, m.end() - 1)
        fields = {}
        if kind == "struct":
            parse_fields(body, fields)
        else:
            for key in ("tag", "content"):
                a = re.search(key + r'\s*=\s*"([^"]+)"', attrs)
                if a:
                    fields[a.group(1)] = "String"
            body = re.sub(r"//[^\n]*", "", body)
            for variant in split_top(body):
                v = re.search(r"\{(.*)\}", variant, re.S)
                if v:
                    parse_fields(v.group(1), fields)
        types[name] = fields


def unwrap(ty):
    """(array?, map?, inner type name)."""
    ty = ty.replace("&'static ", "").replace("&", "").strip()
    array = is_map = False
    while True:
        m = re.match(r"^(?:[\w:]+::)?(Option|Vec|Box|BTreeMap|HashMap)<(.*)>$", ty)
        if not m:
            break
        if m.group(1) == "Vec":
            array = True
        if m.group(1) in ("BTreeMap", "HashMap"):
            is_map = True
            ty = split_top(m.group(2))[-1].strip()
            break
        ty = m.group(2).strip()
    return array, is_map, ty.split("::")[-1]


def resolve(types, tyname, comps):
    """None when comps is a serialized path of tyname, else why not."""
    fields = types.get(tyname)
    if fields is None:
        return f"{tyname} is no #[derive(Serialize)] type" if comps else None
    if not comps:
        return None
    comp = comps[0]
    name, want_array = comp.removesuffix("[]"), comp.endswith("[]")
    candidates = {name: fields[name]} if name in fields else {}
    for flat in fields.get("<flatten>", []):
        if resolve(types, unwrap(flat)[2], [comp]) is None:
            return resolve(types, unwrap(flat)[2], comps)
    if not candidates:
        return f"{tyname} has no serialized field {name!r}"
    array, is_map, inner = unwrap(candidates[name])
    rest = comps[1:]
    if want_array != array and (want_array or rest):
        return f"{tyname}.{name} is {'no' if want_array else 'a'} list"
    if is_map:
        if rest and rest[0] != "*":
            return f"{tyname}.{name} is a map: its keys are not fields"
        rest = rest[1:]
    return resolve(types, inner, rest)


# ---------------------------------------------------------------------------------------------
# Runs without hardware.

def run_json(binary, argv, env=None):
    r = subprocess.run([binary] + argv, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    if r.returncode not in (0, 1):
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def outputs(binary, tmp):
    trees = [(os.path.join(FIXTURES, f, "sys"), os.path.join(FIXTURES, f, "proc"))
             for f in sorted(os.listdir(FIXTURES)) if os.path.isdir(os.path.join(FIXTURES, f, "sys"))]
    # A module with failures on record (no fixture has one), and a procfs without kallsyms.
    sys_copy = os.path.join(tmp, "sys")
    shutil.copytree(os.path.join(FIXTURES, "pix", "sys"), sys_copy, symlinks=True)
    with open(os.path.join(sys_copy, "module/nvidia_peermem/nvpeer/failures"), "w") as f:
        f.write("dma_map 14 2\nget_pages other 1\n")
    # The module's records and per-GPU totals (issue 37; no fixture has them): stats, who, detach.
    gpu = os.path.join(sys_copy, "module/nvidia_peermem/nvpeer/gpus/GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab")
    os.makedirs(gpu)
    for name, value in (("pinned_bytes", "65536"), ("pins", "1"), ("registrations", "1")):
        with open(os.path.join(gpu, name), "w") as f:
            f.write(value + "\n")
    os.makedirs(os.path.join(sys_copy, "kernel/debug/nvidia_peermem"))
    with open(os.path.join(sys_copy, "kernel/debug/nvidia_peermem/registrations"), "w") as f:
        f.write("# id tgid comm cgroup gpu va bytes client nic state age_ms pin pin_bytes shares\n"
                "1 4242 train /slurm/job_1 GPU-d09b8d4e-daef-237f-dd2d-1f194bd911ab 0x7f0000000000 65536 "
                "nv_mem 0000:04:00.0 mapped 10 1 65536 1\n")
    # A link file on a pair's path that cannot be parsed (no fixture has one): `unknown_links`.
    link_copy = os.path.join(tmp, "unknown-link-sys")
    shutil.copytree(os.path.join(FIXTURES, "degraded-upstream", "sys"), link_copy, symlinks=True)
    with open(os.path.join(link_copy, "bus/pci/devices/0000:03:00.0/current_link_width"), "w") as f:
        f.write("x8?\n")
    trees.append((link_copy, os.path.join(FIXTURES, "degraded-upstream", "proc")))
    empty_proc = os.path.join(tmp, "proc")
    os.mkdir(empty_proc)
    trees += [(sys_copy, os.path.join(FIXTURES, "pix", "proc")), (sys_copy, empty_proc)]
    nccl = {"NCCL_NET_GDR_LEVEL": "PIX", "NCCL_IB_DISABLE": "bogus"}
    runs = {"nvpeer.check/2": [], "nvpeer.topo/1": [], "nvpeer.stats/1": [], "nvpeer.selftest/1": []}
    for s, p in trees:
        roots = ["--sysfs-root", s, "--procfs-root", p]
        for cmd, schema in (("check", "nvpeer.check/2"), ("topo", "nvpeer.topo/1"), ("stats", "nvpeer.stats/1")):
            runs[schema].append(run_json(binary, [cmd, "--json"] + roots, nccl))
    runs["nvpeer.check/2"].append(run_json(binary, ["check", "--json"]))  # this host: verbs probed
    ops = ["--sysfs-root", sys_copy, "--procfs-root", os.path.join(FIXTURES, "pix", "proc")]
    runs["nvpeer.who/1"] = [run_json(binary, ["who", "--json"] + ops)]
    runs["nvpeer.detach/1"] = [run_json(binary, ["detach", "--dry-run", "--json"] + ops)]
    # ... and held by that registration: the holders.
    with open(os.path.join(sys_copy, "module/nvidia_peermem/nvpeer/stats/live_contexts"), "w") as f:
        f.write("1\n")
    runs["nvpeer.detach/1"].append(run_json(binary, ["detach", "--dry-run", "--json"] + ops))
    runs["nvpeer.attach/1"] = [run_json(binary, ["attach", "--dry-run", "--json"] + ops)]
    runs["nvpeer.selftest/1"].append(run_json(binary, ["selftest", "--json"]))
    logs = os.path.join(FIXTURES, "nccl-logs")
    runs["nvpeer.nccl-log/1"] = [run_json(binary, ["nccl-log", os.path.join(logs, f), "--json"])
                                 for f in sorted(os.listdir(logs)) if f.endswith(".log")]
    paths = {}
    for schema, outs in runs.items():
        got = [o for o in outs if isinstance(o, dict) and o.get("schema") == schema]
        if not got:
            fail(f"docs: no run gave {schema} output")
        paths[schema] = set().union(*(json_paths(o) for o in got)) if got else set()
    return paths


def check_schemas(binary, root, tmp):
    docs = documented_schemas(root)
    for schema in ("nvpeer.check/2", "nvpeer.topo/1", "nvpeer.stats/1", "nvpeer.bench/1", "nvpeer.selftest/1",
                   "nvpeer.nccl-log/1", "nvpeer.who/1", "nvpeer.detach/1", "nvpeer.attach/1"):
        if schema not in docs:
            fail(f"docs: schema {schema} is not documented (no code block of {', '.join(SCHEMA_DOCS)} has it)")
    seen = outputs(binary, tmp)
    types = rust_types()
    for schema, (where, fields) in sorted(docs.items()):
        got = seen.get(schema, set())
        for field in fields:
            if field.split(".")[-1] == "*":
                continue  # a map's entries: named by data, not by the schema
            count()
            rx = path_regex(field)
            if any(rx.match(p) for p in got):
                continue
            static = [(pre, ty) for pre, ty in STATIC.get(schema, [])
                      if field == pre or field.startswith(pre + ".") or pre == ""]
            if not static:
                fail(f"{where}: {schema} field {field} is in no output of the fixture runs")
                continue
            pre, ty = max(static, key=lambda x: len(x[0]))
            rest = field[len(pre):].lstrip(".")
            why = resolve(types, ty, rest.split(".") if rest else [])
            if why:
                fail(f"{where}: {schema} field {field} is in no run here and not serialized: {why}")
    return set(seen)


# ---------------------------------------------------------------------------------------------
# 3. Samples of the brief line and schema names; 4. the man pages.

SCHEMA_NAME = re.compile(r"\bnvpeer\.[a-z][a-z-]*/\d+")
# Schemas the binary reads but no longer writes (check::SCHEMAS_READ).
READ_ONLY = {"nvpeer.check/1"}
BRIEF_SAMPLE = re.compile(r"^(?:NVPEER (?:OK|WARNING|CRITICAL|UNKNOWN) - |nvpeer: (?:ready|not ready|unknown)\b)")


def inline_codes(root):
    """(file:line, text) of every inline code span and code-block line of the docs."""
    for rel in READMES:
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        for m in re.finditer(r"```.*?```|`([^`]+)`", text, re.S):
            n = text.count("\n", 0, m.start()) + 1
            if m.group(1) is not None:
                yield f"{rel}:{n}", " ".join(m.group(1).split())
            else:
                for k, line in enumerate(m.group(0).splitlines()[1:-1], 1):
                    yield f"{rel}:{n + k}", line.strip()


def brief_lines(binary, tmp):
    """The brief lines of every fixture, an empty host and a root that does not exist."""
    out = set()
    empty = os.path.join(tmp, "empty")
    os.makedirs(os.path.join(empty, "sys"))
    os.makedirs(os.path.join(empty, "proc"))
    trees = [os.path.join(FIXTURES, f) for f in sorted(os.listdir(FIXTURES))]
    trees += [empty, os.path.join(tmp, "no-such-root")]
    for t in trees:
        s, p = os.path.join(t, "sys"), os.path.join(t, "proc")
        if not os.path.isdir(s) and t != trees[-1]:
            continue
        for extra in ([], ["--strict"], ["--exit-codes", "nagios"], ["--strict", "--exit-codes", "nagios"]):
            r = subprocess.run([binary, "check", "--brief", "--sysfs-root", s, "--procfs-root", p] + extra,
                               capture_output=True, text=True, timeout=60)
            out.add(r.stdout.strip())
    return out


def sample_regex(sample):
    """Literal, but a number matches any number and `...` or a `<placeholder>` anything."""
    parts = re.split(r"(\.\.\.|<[^>]+>|\d+)", sample.rstrip(". "))
    return re.compile("^" + "".join(".*" if p == "..." or p.startswith("<") else r"\d+" if p.isdigit()
                                    else re.escape(p) for p in parts))


def check_samples(cli, binary, root, tmp, schemas_written):
    lines = brief_lines(binary, tmp)
    allowed = set(schemas_written) | set(STATIC) | READ_ONLY
    # The binary's own --help names schemas too (`--json`'s line): each must be one it writes.
    for sub in [None] + sorted(s for s in cli.subs if s != "help"):
        cli.help(sub)
        for name in SCHEMA_NAME.findall(cli.help_texts[sub]):
            count()
            if name not in allowed:
                fail(f"nvpeer {sub or ''} --help: schema {name} is not one nvpeer writes "
                     f"({', '.join(sorted(allowed))})".replace("  ", " "))
    for where, text in inline_codes(root):
        for name in SCHEMA_NAME.findall(text):
            count()
            if name not in allowed:
                fail(f"{where}: schema {name} is not one nvpeer writes ({', '.join(sorted(allowed))})")
        if BRIEF_SAMPLE.match(text):
            count()
            rx = sample_regex(text)
            if not any(rx.match(l) for l in lines):
                fail(f"{where}: brief sample {text!r} is the shape of no `check --brief` line of the fixtures")


def check_table_ids(root):
    """The ids of the check table (`| Id | What it looks at |`) of userspace/README.md."""
    ids, inside = [], False
    for line in open(os.path.join(root, CLI_DOC), encoding="utf-8"):
        if line.startswith("| Id |"):
            inside = True
            continue
        if inside:
            m = re.match(r"^\| `([a-z][a-z0-9_]*)` \|", line)
            if m:
                ids.append(m.group(1))
            elif not line.startswith("|---"):
                break
    return ids


def check_man_pages(cli, binary, root, tmp):
    out = os.path.join(tmp, "gendocs")
    subprocess.run([binary, "__generate-docs", out], capture_output=True, check=True, timeout=60)
    man = os.path.join(out, "man", "man1")
    for page in sorted(os.listdir(man)):
        text = open(os.path.join(man, page), encoding="utf-8").read()
        for sec in ("EXIT STATUS", "EXAMPLES"):
            count()
            if f'.SH "{sec}"' not in text:
                fail(f"man {page}: no {sec} section")
        examples = text.split('.SH "EXAMPLES"', 1)[-1].split("\n.SH", 1)[0]
        for m in re.finditer(r"\\fB(.*?)\\fR", examples):
            cmd = m.group(1).replace("\\-", "-").replace("\\e", "\\")
            for inv in INVOCATION.finditer(cmd):
                check_invocation(cli, f"man {page} EXAMPLES", inv.group(1))
    text = open(os.path.join(man, "nvpeer-check.1"), encoding="utf-8").read()
    listed = text.split('.SH "CHECK IDS"', 1)[-1].split("\n.SH", 1)[0].replace("\\-", "-")
    man_ids = set(re.findall(r"[a-z][a-z0-9_]*", listed))
    table = set(check_table_ids(root))
    count()
    for i in sorted(man_ids - table):
        fail(f"{CLI_DOC}: check id {i} (nvpeer-check(1), check::CHECK_IDS) has no row in the check table")
    for i in sorted(table - man_ids):
        fail(f"{CLI_DOC}: the check table's row {i} is no check id of nvpeer-check(1)")



# ---------------------------------------------------------------------------------------------

def main_check(root, binary):
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"docs: no {binary}: build it first (cd userspace && cargo build --release --locked)")
    cli = Cli(binary)
    check_readme_flags(cli, root)
    with tempfile.TemporaryDirectory() as tmp:
        written = check_schemas(binary, root, tmp)
        check_samples(cli, binary, root, tmp, written)
        check_man_pages(cli, binary, root, tmp)
    print(f"docs: {checked} checked, {len(failures)} failed")
    return 1 if failures else 0


PLANTS = [
    # (file, anchor, text put after it ("" = at the end), the word the failure line must name)
    ("README.md", "", "\n```sh\nnvpeer no-such-command --json\n```\n", "no-such-command"),
    ("userspace/README.md", "", "\n```sh\nnvpeer stats --json --no-such-flag\n```\n", "--no-such-flag"),
    ("userspace/README.md", "", "\n```sh\nnvpeer bench --op no-such-op\n```\n", "no-such-op"),
    ("userspace/CHECKS.md", '"schema": "nvpeer.check/2",', ' "no_such_field": str,', "no_such_field"),
    ("userspace/SCHEMAS.md", '"schema": "nvpeer.bench/1",', ' "no_such_bench_field": int,', "no_such_bench_field"),
    ("userspace/SCHEMAS.md", '"schema": "nvpeer.nccl-log/1",', ' "no_such_log_field": int,', "no_such_log_field"),
    # A real field name at a place where the output does not have it: paths, not names, count.
    ("userspace/SCHEMAS.md", '"schema": "nvpeer.topo/1",', ' "root_complex": str,', "field root_complex"),
    # A schema documented in a second place (the docs would disagree on which is meant).
    ("userspace/README.md", "", '\n```\n{ "schema": "nvpeer.who/1", "module": str }\n```\n', "documented twice"),
    # A brief line the binary does not print, and a schema version it does not write.
    ("README.md", "", "\nThe brief line: `nvpeer: ready (dmabuf)`.\n", "ready (dmabuf)"),
    ("README.md", "", "\nSaved as `nvpeer.bench-loopback-all/1`.\n", "nvpeer.bench-loopback-all/1"),
]


def self_test(root, binary):
    me = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        for rel in READMES:
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            shutil.copy(os.path.join(root, rel), os.path.join(tmp, rel))
        argv = [sys.executable, me, "--docs-root", tmp, "--bin", binary]
        clean = subprocess.run(argv, capture_output=True, text=True)
        if clean.returncode != 0:
            print(clean.stdout + clean.stderr, end="")
            print("docs self-test: the unmodified READMEs do not pass; fix them first")
            return 1
        for rel, anchor, new, _ in PLANTS:
            p = os.path.join(tmp, rel)
            text = open(p, encoding="utf-8").read()
            if anchor not in text:
                print(f"docs self-test: cannot plant: {anchor!r} is not in {rel}")
                return 1
            text = text.replace(anchor, anchor + new, 1) if anchor else text + new
            open(p, "w", encoding="utf-8").write(text)
        planted = subprocess.run(argv, capture_output=True, text=True)
        lines = planted.stdout.splitlines()
        bad = lines[:-1]  # every line but the summary is a failure
        ok = planted.returncode == 1 and len(bad) == len(PLANTS) and \
            all(any(word in l for l in bad) for *_, word in PLANTS) and \
            re.match(rf"^docs: \d+ checked, {len(PLANTS)} failed$", lines[-1] if lines else "")
        print(planted.stdout + planted.stderr, end="")
        if not ok:
            print(f"docs self-test: FAILED: expected exit 1 and exactly {len(PLANTS)} failures naming "
                  + ", ".join(w for *_, w in PLANTS))
            return 1
    print(f"docs self-test: ok (clean copy passes; {len(PLANTS)} planted errors each reported)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--docs-root", default=REPO, help="where the READMEs are (default: the repository)")
    ap.add_argument("--bin", default=os.path.join(REPO, "userspace/target/release/nvpeer"))
    a = ap.parse_args()
    sys.exit(self_test(a.docs_root, a.bin) if a.self_test else main_check(a.docs_root, a.bin))


if __name__ == "__main__":
    main()
