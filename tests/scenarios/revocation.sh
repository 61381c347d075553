# SPDX-License-Identifier: GPL-2.0
# revocation.sh [ours|reference] [iterations] [threads] [--only CASE] [--gen G]: cudaFree at every
# point of a registration (revocation.py).
exec python3 -u "$(dirname "$0")/revocation.py" "$@"
