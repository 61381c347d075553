#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The built CLI answers --version and --help, and rejects bad usage with exit 2.
set -uo pipefail
bin=$(cd "$(dirname "$0")/.." && pwd)/userspace/target/release/nvpeer
fail() { echo "cli-smoke: $*" >&2; exit 1; }
"$bin" --version | grep -qE '^nvpeer [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version"
"$bin" --help | grep -q 'check' || fail "--help does not list check"
"$bin" no-such-command >/dev/null 2>&1; [ $? -eq 2 ] || fail "usage error must exit 2"
# This machine has no module, GPU or RDMA device: check must fail (1) and explain each piece.
out=$("$bin" check 2>&1); rc=$?
[ $rc -eq 1 ] || fail "check on a bare host exited $rc, expected 1"
echo "$out" | grep -q 'fix:' || fail "check printed no fix"
"$bin" check --json | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["checks"][0]["id"]=="module"' \
    || fail "check --json is not the documented JSON"
echo "cli-smoke: ok"
