#!/usr/bin/env bash
# The main job on a bundled example: break at unaligned accesses in gdb, then trace from the shell.
set -euo pipefail
cd "$(dirname "$0")/.."
prog=examples/build/not_aligned
echo "== gdb: ualdbg break on $prog 3 (stops at each unaligned access, then off) =="
gdb -q -nx -batch -x gdb/ualdbg.py \
  -ex "ualdbg break" -ex run -ex "info registers rip" -ex continue -ex "ualdbg status" \
  -ex "ualdbg off" -ex continue --args "$prog" 3
echo
echo "== shell: ualdbg trace -- $prog 1000 =="
.venv/bin/ualdbg trace -- "$prog" 1000
