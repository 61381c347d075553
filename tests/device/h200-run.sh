#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# h200-run.sh NVPEER [DIR]: the commands of tests/results/h200-*.txt, on a GPU machine without RDMA
# NIC (the device tool's H200). Prints each command (set -x) and its exit status; the record is the
# verbatim output. Never fails itself: a failing step is part of what is recorded. Files the
# commands write (the --plot SVG) go to DIR (default: the current directory).
nvpeer=${1:?path to the nvpeer binary}
dir=${2:-.}
set -x
uname -r
nvidia-smi -L
nvidia-smi --query-gpu=driver_version --format=csv,noheader
ls /dev/infiniband
ls /sys/class/infiniband
ldd "$nvpeer"
"$nvpeer" --version
"$nvpeer" selftest; echo rc=$?
"$nvpeer" selftest --size 64M --json; echo rc=$?
"$nvpeer" check; echo rc=$?
# Issue 36's rows on a real driver: GPU-initiated networking asked for, the job's own memlock
# (as the shell gives it, and under an 8 MiB limit as containerd would), the per-pair JSON.
"$nvpeer" check --for gin; echo rc=$?
"$nvpeer" check --as-job; echo rc=$?
prlimit --memlock=8388608 "$nvpeer" check --as-job; echo rc=$?
"$nvpeer" check --json; echo rc=$?
"$nvpeer" who; echo rc=$?
"$nvpeer" bench --mem cuda --compare-staged -a; echo rc=$?
"$nvpeer" bench --mem cuda --reg dmabuf -s 1M; echo rc=$?
"$nvpeer" bench --mem cuda --lat --op send; echo rc=$?
NVPEER_LIBIBVERBS=libibverbs-absent.so.1 "$nvpeer" bench --mem cuda; echo rc=$?
"$nvpeer" selftest --gpu 7; echo rc=$?
# The allocation kinds (--alloc): VMM with and without gpuDirectRDMACapable, managed and
# host-registered memory; each says which registration path its pointer takes.
"$nvpeer" selftest --alloc vmm; echo rc=$?
"$nvpeer" selftest --alloc vmm-no-rdma; echo rc=$?
"$nvpeer" selftest --alloc managed; echo rc=$?
"$nvpeer" selftest --alloc host-registered; echo rc=$?
"$nvpeer" selftest --alloc vmm --size 64M --json; echo rc=$?
"$nvpeer" bench --mem cuda --alloc vmm --compare-staged -s 1M; echo rc=$?
"$nvpeer" bench --mem cuda --alloc vmm-no-rdma; echo rc=$?
"$nvpeer" bench --mem host --alloc vmm; echo rc=$?
# dma-buf export with the driver's mapping and with the PCIe mapping type
# (CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE): no NIC here, so each run ends at "no RDMA device",
# which says whether the export was done and with which mapping type; a driver or platform that
# does not offer the PCIe type is one line instead. The flag without --reg dmabuf is a usage error.
"$nvpeer" bench --mem cuda --reg dmabuf -s 1M; echo rc=$?
"$nvpeer" bench --mem cuda --reg dmabuf --dmabuf-mapping pcie -s 1M; echo rc=$?
"$nvpeer" bench --mem cuda --alloc vmm --reg dmabuf --dmabuf-mapping pcie -s 8M; echo rc=$?
"$nvpeer" bench --mem cuda --dmabuf-mapping pcie; echo rc=$?
# Both directions per GPU-NIC pair: no NIC here, one line.
"$nvpeer" bench --loopback-all; echo rc=$?
# The plot of the staged comparison: no NIC, so the staging copies (GPU -> host) alone.
"$nvpeer" bench --mem cuda --compare-staged -a --plot "$dir/h200-staged.svg"; echo rc=$?
grep -c '<polyline' "$dir/h200-staged.svg"
true
