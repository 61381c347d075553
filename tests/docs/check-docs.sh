#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# check-docs.sh [--self-test] [--docs-root DIR] [--bin NVPEER]: every `nvpeer` subcommand, flag
# and JSON field the READMEs show exists in the real binary and its output (check_docs.py).
exec python3 "$(dirname "$0")/check_docs.py" "$@"
