# SPDX-License-Identifier: GPL-2.0
# nvpeer: GPUDirect RDMA peer-memory module (kmod/, Rust-for-Linux) and companion CLI (userspace/).
#
#   make              build kmod/nvidia_peermem.ko and userspace/target/release/nvpeer
#   make run          the main job: set up, build, boot the test kernel, load the module, nvpeer check
#   make test         the whole test suite (what CI runs)
#   make bench        registration benchmark, ours vs NVIDIA's nvidia-peermem (BENCHMARKS.md)
#   make bench-rdma   nvpeer bench vs perftest on Soft-RoCE, ratios (BENCHMARKS.md)
#   make soak         the reliability suites for long (SOAK_MINUTES, SOAK_RACES, SOAK_THREADS)
#   make kmod KDIR=…  the module only, against a given kernel build tree
#   make KDIR=test:6.12|test:7.2|test:7.3 [ARCH=arm64]   the module for the project's test kernel
#                     of that series (built once and cached; arm64 cross-built)
#   make test-matrix  the module on 6.12, 7.3, arm64 and Debian's stock 7.3 (tests/run-matrix.sh)
#   make MODULE_NAME=nv_peer_mem   the module under the legacy name
#   make install [DESTDIR=…] [PREFIX=/usr/local] [KDIR=…] [NVPEER_OPTIONS="peerdirect_support=1"]
#                     module into /lib/modules/<kver>/updates, modules-load.d, modprobe.d (softdep),
#                     the CLI into $(PREFIX)/bin, its man pages and completions under $(PREFIX)/share,
#                     nvpeer.service; builds only what is not built yet
#   make uninstall    removes exactly what `make install` listed in /var/lib/nvpeer/manifest
#   make deb          Debian packages nvpeer (CLI, man pages, completions, unit, NHC, Slurm) and
#                     nvpeer-dkms (module source, dh-dkms) into build/deb/ (dist/debian/)
#   make dkms-install the module source (kmod/ + include/) into /usr/src/nvpeer-<version> for DKMS
#   make KDIR=stock:7.2.12+deb13-amd64   the module for a stock Debian kernel whose headers ship no
#                     Rust artefacts (kmod/scripts/stock-kbuild.sh: a matching toolchain and tree, cached),
#                     into build/stock/<release>/
#   make sign KEY=<key.pem> CERT=<cert> [KO=<module>] [KDIR=<tree>|KDIR=stock:<release>]
#                     sign the module with the kernel's scripts/sign-file (Secure Boot, sig_enforce)
#
# Without KDIR, the running kernel's build tree is used when it supports Rust modules, else the
# project's test kernel (built once and cached under /var/cache/nvpeer).

MODULE_NAME ?= nvidia_peermem
# Without KDIR, the tree is found (tests/setup/kdir.sh) when a recipe first needs it, once: `make
# cli`, `make dkms-install` or `make deb` build no kernel.
ifeq ($(origin KDIR),undefined)
KDIR = $(eval KDIR := $(shell tests/setup/kdir.sh))$(KDIR)
KDIR_GIVEN :=
else
KDIR_GIVEN := $(KDIR)
endif
# KDIR=test:<series>: the project's test kernel of that series (6.12, 7.2, 7.3; built once and
# cached by tests/kernel/build.sh), for ARCH (x86_64, or arm64: cross-built).
TEST_SERIES := $(patsubst test:%,%,$(filter test:%,$(KDIR_GIVEN)))
ifneq ($(TEST_SERIES),)
override KDIR := $(shell tests/setup/deps.sh $(if $(filter arm64,$(ARCH)),--cross arm64) >&2 && \
	tests/kernel/build.sh $(TEST_SERIES) $(if $(filter arm64,$(ARCH)),arm64,x86_64))
ifeq ($(KDIR),)
$(error test kernel $(TEST_SERIES) $(ARCH) could not be built: see above)
endif
endif
CARGO ?= cargo
PREFIX ?= /usr/local
DESTDIR ?=
# KDIR=stock:<release>: a stock distribution kernel, built by kmod/scripts/stock-kbuild.sh in its chroot.
STOCK := $(patsubst stock:%,%,$(filter stock:%,$(KDIR_GIVEN)))
ifeq ($(STOCK),)
KO := kmod/$(MODULE_NAME).ko
else
KO := build/stock/$(STOCK)/$(MODULE_NAME).ko
endif
CLI_BIN := userspace/target/release/nvpeer
NVPEER_VERSION := $(shell sed -n 's/^NVPEER_VERSION ?= //p' kmod/Kbuild)
DKMS_SRC = $(DESTDIR)/usr/src/nvpeer-$(NVPEER_VERSION)

# The CLI is built for the host; with ARCH=arm64 only the module is cross-built (the rustup
# standard library of aarch64 is not part of the set-up).
ifeq ($(filter arm64,$(ARCH)),)
all: kmod cli
else
all: kmod
endif

kmod:
ifeq ($(STOCK),)
	$(MAKE) -C kmod KDIR=$(KDIR) MODULE_NAME=$(MODULE_NAME)
else
	MODULE_NAME=$(MODULE_NAME) kmod/scripts/stock-kbuild.sh build $(STOCK)
endif

# Sign with the target kernel's sign-file (kmod/scripts/sign.sh); KO= names the module(s), default the built one.
sign:
	kmod/scripts/sign.sh "$(KEY)" "$(CERT)" "$(KDIR)" $(KO)

cli:
	cd userspace && $(CARGO) build --release --locked

run:
	tests/run-main.sh

# Install what is built; build only what is missing (an up-to-date tree is not rebuilt, so the
# install works from a read-only checkout).
$(KO):
	$(MAKE) kmod
$(CLI_BIN):
	$(MAKE) cli

install: $(KO) $(CLI_BIN)
	@kver=$$(kmod/scripts/find-deps.sh --kver $(KDIR)) || exit 1; \
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" KVER="$$kver" MODULE_NAME=$(MODULE_NAME) \
	KO=$(KO) CLI=$(CLI_BIN) NVPEER_OPTIONS="$(NVPEER_OPTIONS)" kmod/packaging/nvpeer-install install
	@# Man pages and completions from the CLI's clap definitions, added to the manifest.
	@docs=$$(mktemp -d) && trap 'rm -rf "$$docs"' EXIT && \
	$(CLI_BIN) __generate-docs "$$docs" >/dev/null && \
	inst() { install -D -m 0644 "$$1" "$(DESTDIR)$$2" && echo "$$2" >> "$(DESTDIR)/var/lib/nvpeer/manifest" && \
		echo "nvpeer-install: installed $$2"; } && \
	for p in "$$docs"/man/man1/*.1; do inst "$$p" "$(PREFIX)/share/man/man1/$${p##*/}" || exit 1; done && \
	inst "$$docs/completions/bash/nvpeer" "$(PREFIX)/share/bash-completion/completions/nvpeer" && \
	inst "$$docs/completions/zsh/_nvpeer" "$(PREFIX)/share/zsh/site-functions/_nvpeer" && \
	inst "$$docs/completions/fish/nvpeer.fish" "$(PREFIX)/share/fish/vendor_completions.d/nvpeer.fish"

uninstall:
	DESTDIR="$(DESTDIR)" MODULE_NAME=$(MODULE_NAME) kmod/packaging/nvpeer-install uninstall

# DKMS source tree: then `dkms add/build/install nvpeer/$(NVPEER_VERSION)` (kmod/dkms.conf).
dkms-install:
	rm -rf $(DKMS_SRC)
	install -d $(DKMS_SRC)/kmod $(DKMS_SRC)/include
	cp -R kmod/Kbuild kmod/Makefile kmod/client kmod/glue kmod/runtime kmod/scripts $(DKMS_SRC)/kmod/
	cp -r include/. $(DKMS_SRC)/include/
	sed 's/^PACKAGE_VERSION=.*/PACKAGE_VERSION="$(NVPEER_VERSION)"/' kmod/dkms.conf > $(DKMS_SRC)/dkms.conf
	@echo "dkms-install: $(DKMS_SRC); next: dkms add nvpeer/$(NVPEER_VERSION) && dkms install nvpeer/$(NVPEER_VERSION)"

dkms-uninstall:
	-dkms remove nvpeer/$(NVPEER_VERSION) --all
	rm -rf $(DKMS_SRC)

# Debian packages nvpeer and nvpeer-dkms into build/deb/ (dist/debian/, dpkg-buildpackage).
deb:
	dist/debian/make-deb.sh build/deb

test:
	tests/run.sh

test-matrix:
	tests/run-matrix.sh

bench:
	tests/run-bench.sh

bench-rdma:
	tests/run-bench-rdma.sh

soak:
	tests/run-soak.sh

clean:
	$(MAKE) -C kmod clean
	rm -rf build/stock
	git clean -fdXq tests/vm/plant
	cd userspace && $(CARGO) clean

.PHONY: all kmod cli run deb test test-matrix bench bench-rdma soak sign clean install uninstall dkms-install dkms-uninstall
