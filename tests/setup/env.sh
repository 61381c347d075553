# SPDX-License-Identifier: GPL-2.0
# Sourced by every build and test script: tool versions and where cached artefacts live.
# Caches live outside the repository so a fresh clone reuses them.
: "${NVPEER_CACHE:=/var/cache/nvpeer}"
NVPEER_TOOLS="$NVPEER_CACHE/tools"
BINDGEN_VERSION=0.72.1
LIBCLANG_VERSION=18.1.1
KUBERNETES_VALIDATE_VERSION=1.37.0
export NVPEER_CACHE NVPEER_TOOLS
export PATH="$NVPEER_TOOLS/bin:$NVPEER_TOOLS/venv/bin:$HOME/.cargo/bin:$PATH"
if [ -d "$NVPEER_TOOLS/venv" ]; then
    LIBCLANG_PATH=$(ls -d "$NVPEER_TOOLS"/venv/lib/python3*/site-packages/clang/native 2>/dev/null | head -n1)
    export LIBCLANG_PATH
fi
