# SPDX-License-Identifier: GPL-2.0
# modversions.sh KO_DIR: the generation markers unversioned, on a CONFIG_MODVERSIONS kernel
# (modversions.py; built and booted by tests/compat/test-modversions.sh).
exec python3 -u "$(dirname "$0")/modversions.py" "$@"
