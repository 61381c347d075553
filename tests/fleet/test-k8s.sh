#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# test-k8s.sh: dist/k8s/nvpeer-daemonset.yaml (issue 37) is valid YAML (yamllint, Debian) and a
# valid DaemonSet (kubernetes-validate, PyPI, strict: unknown fields rejected) for the oldest and
# newest Kubernetes versions it knows; its probes are `nvpeer check --brief --require peermem`
# (so a node where dma-buf also works still fails them when the module is gone; no modprobe
# anywhere), each with a timeout, it attaches at start through the host's own nvpeer, and it
# leaves the module loaded when the pod stops (no preStop detach: a rolling update must not
# unload it under the jobs). Then the probe's command is run on fixture trees: it fails a
# dma-buf-only host (the module gone) and passes one where peer memory carries every pair.
# The checks are not blind: a misspelled field and a broken indent must be rejected.
# Needs yamllint and kubernetes-validate (tests/setup/deps.sh).
# shellcheck disable=SC2015  # `a && ok || bad`: bad is what should run when either fails
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC1091  # the tools' PATH
. "$repo/tests/setup/env.sh"
ds=$repo/dist/k8s/nvpeer-daemonset.yaml
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
for tool in yamllint kubernetes-validate; do
    command -v "$tool" >/dev/null || { echo "FAIL  $tool is missing (tests/setup/deps.sh installs it)"; exit 1; }
done
lint() { yamllint -s -d '{extends: default, rules: {line-length: {max: 100}}}' "$@"; }
kv() { kubernetes-validate --strict --quiet "$@"; }
lint "$ds" >"$t/out" 2>&1 && ok "yamllint (default rules, 100 columns)" || bad "yamllint: $(cat "$t/out")"
versions=$(python3 -c 'import kubernetes_validate.utils as u; v = sorted(u.all_versions(), key=lambda s: tuple(map(int, s.split(".")))); print(v[0], v[-1])' 2>/dev/null) \
    || versions="1.37.0"
for v in $versions; do
    kv -k "$v" "$ds" >"$t/out" 2>&1 && ok "kubernetes-validate --strict: a valid DaemonSet for Kubernetes $v" \
        || bad "kubernetes-validate $v: $(cat "$t/out")"
done
python3 - "$ds" >"$t/out" 2>"$t/err" <<'PY' && ok "probes are 'nvpeer check --brief --require peermem' with timeouts, attach at start, no detach, no modprobe" || bad "$(cat "$t/out" "$t/err")"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
assert doc["kind"] == "DaemonSet", doc["kind"]
c = doc["spec"]["template"]["spec"]["containers"][0]
probe_cmd = ["chroot", "/host", "/usr/bin/nvpeer", "check", "--brief", "--require", "peermem"]
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    assert c[probe]["exec"]["command"] == probe_cmd, (probe, c[probe])
    assert c[probe].get("timeoutSeconds", 1) >= 5, (probe, "timeoutSeconds (default 1 s)")
assert "nvpeer attach" in " ".join(c["args"]), c["args"]
assert "lifecycle" not in c, ("the pod must not detach when it stops", c["lifecycle"])
code = [l for l in open(sys.argv[1]) if not l.lstrip().startswith("#")]
assert not [l for l in code if "modprobe" in l or "detach" in l], "a modprobe or detach in the manifest"
assert c["securityContext"]["privileged"] is True
print(" ".join(probe_cmd[2:]))
PY
# The probe on fixture trees (the real CLI): a host whose pairs dma-buf carries and whose peer
# module is gone fails it; a host with peer memory on every pair passes it.
bin=${NVPEER_BIN:-$repo/userspace/target/release/nvpeer}
[ -x "$bin" ] || { echo "FAIL  $bin is missing: build it (cargo build --release)"; exit 1; }
probe=$(cat "$t/out"); probe=${probe#/usr/bin/nvpeer }
# shellcheck disable=SC2086  # the probe's words
on() { "$bin" --sysfs-root "$repo/tests/fixtures/$1/sys" --procfs-root "$repo/tests/fixtures/$1/proc" $probe >"$t/probe" 2>&1; }
on inbox-dmabuf && bad "the probe passes a dma-buf-only host without the module: $(cat "$t/probe")" \
    || ok "the probe fails where only dma-buf is left: $(cat "$t/probe")"
on doca && ok "the probe passes a host with peer memory on every pair" || bad "the probe on doca: $(cat "$t/probe")"
sed 's/livenessProbe:/livenesProbe:/' "$ds" >"$t/typo.yaml"
! kv "$t/typo.yaml" >/dev/null 2>&1 && ok "kubernetes-validate rejects a misspelled field" || bad "a misspelled field passed"
sed 's/^  selector:/ selector:/' "$ds" >"$t/indent.yaml"
! lint "$t/indent.yaml" >/dev/null 2>&1 && ok "yamllint rejects a broken indent" || bad "a broken indent passed"
echo "[test-k8s] $pass ok, $fail failed"
[ "$fail" = 0 ]
