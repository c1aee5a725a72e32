#!/usr/bin/env bash
# The main job on a bundled example: break at unaligned accesses in gdb, then trace from the shell.
set -euo pipefail
cd "$(dirname "$0")/.."
prog=examples/build/not_aligned
echo "== gdb: ualdbg gdb -- $prog 3, then ualdbg break, run (a stop at each unaligned access), off =="
.venv/bin/ualdbg gdb -nx -batch \
  -ex "ualdbg break" -ex run -ex continue -ex "ualdbg status" -ex "ualdbg off" -ex continue -- "$prog" 3
echo
echo "== shell: ualdbg trace -- $prog 1000 =="
.venv/bin/ualdbg trace -- "$prog" 1000
