# SPDX-License-Identifier: GPL-2.0
# nvpeer: GPUDirect RDMA peer-memory module (kmod/, Rust-for-Linux) and companion CLI (userspace/).
#
#   make              build kmod/nvidia_peermem.ko and userspace/target/release/nvpeer
#   make run          the main job: set up, build, boot the test kernel, load the module, nvpeer check
#   make test         the whole test suite (what CI runs)
#   make kmod KDIR=…  the module only, against a given kernel build tree
#   make MODULE_NAME=nv_peer_mem   the module under the legacy name
#
# Without KDIR, the running kernel's build tree is used when it supports Rust modules, else the
# project's test kernel (built once and cached under /var/cache/nvpeer).

MODULE_NAME ?= nvidia_peermem
KDIR ?= $(shell tests/setup/kdir.sh)
CARGO ?= cargo

all: kmod cli

kmod:
	$(MAKE) -C kmod KDIR=$(KDIR) MODULE_NAME=$(MODULE_NAME)

cli:
	cd userspace && $(CARGO) build --release --locked

run:
	tests/run-main.sh

test:
	tests/run.sh

clean:
	$(MAKE) -C kmod clean
	git clean -fdXq tests/vm/plant
	cd userspace && $(CARGO) clean

.PHONY: all kmod cli run test clean
