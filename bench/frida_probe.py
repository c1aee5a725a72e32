"""What a frida-gum probe costs at a hot instruction (issue 21 asked to decide between frida-gum
and the agent's own decoder by measurement): bench/patch_loop.c's hot loop spawned under frida,
with an Interceptor probe on its misaligned load whose CModule onEnter only increments a counter
(the least a frida-based patcher would run per access, before any alignment test or counting
into the buffer). Prints ns per access, the loop's own time included (~0.25 ns alone).

Needs the `frida` package, which ualdbg does not depend on: run it with a Python that has it,
e.g. `python3 -m venv /tmp/fr && /tmp/fr/bin/pip install frida && /tmp/fr/bin/python
bench/frida_probe.py` (after bench/patching.py built the loop)."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import frida  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / "bench" / "build" / "patching" / "patch_loop_plain"
JS = r"""
const hot = Process.mainModule.enumerateSymbols().find(s => s.name === 'hot').address;
let a = hot, target = null;
for (let i = 0; i < 20 && target === null; i++) {
  const ins = Instruction.parse(a);
  if (ins.mnemonic === 'mov' && ins.opStr.indexOf('[') >= 0) target = a;
  a = ins.next;
}
const hits = Memory.alloc(8);
const cm = new CModule(`
#include <gum/guminterceptor.h>
extern volatile long hits;
void onEnter (GumInvocationContext * ic) { hits++; }
`, { hits });
Interceptor.attach(target, cm);
send(Instruction.parse(target).toString());
"""


def probe(n: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        dev = frida.get_local_device()
        pid = dev.spawn([str(EXE), "hot", str(n)], env={**os.environ, "PATCH_LOOP_OUT": out})
        session = dev.attach(pid)
        script = session.create_script(JS)
        script.load()
        dev.resume(pid)
        deadline = time.monotonic() + 120
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        text = Path(out).read_text() if os.path.exists(out) else ""
        if not text.startswith("hot "):
            raise SystemExit(f"frida_probe: no result from the loop ({text!r})")
        return float(text.split()[1])


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    for _ in range(3):
        print(f"frida-gum Interceptor probe + CModule counter: {probe(n):,.1f} ns per access ({n:,} accesses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
