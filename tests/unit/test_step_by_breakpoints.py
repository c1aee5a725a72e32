"""The step engine on a target without a trap flag (arm64 under qemu's stub): a breakpoint on every
instruction of the scope, each hit checked before the instruction runs, nothing single-stepped;
natural is the default policy there; scopes it cannot do are one line. Fake target, real decoder."""
from __future__ import annotations

import pytest
from stepfakes import FakeControl
from stepfakes import FakeTarget as _FakeTarget

from ualdbg.engines.scope import ScopeError
from ualdbg.engines.session import Session
from ualdbg.engines.step import ScopeRequest, StepDecision

# 0x1000: str w2, [x0]       (4-byte write)
# 0x1004: str w3, [x0, #4]   (4-byte write)
# 0x1008: bl  0x2000         (out of the scope: no breakpoint there)
# 0x100c: ret
CODE = {0x1000: bytes.fromhex("020000b9" "030400b9" "fe030094" "c0035fd6")}


def FakeTarget(regs: dict[str, int]) -> _FakeTarget:
    return _FakeTarget(regs, CODE, arch="aarch64", writable=False)


def test_a_breakpoint_per_instruction_and_each_hit_checked() -> None:
    s = Session("fake")
    s.mode.tracing = True
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1010",)), None, "aarch64")
    assert s.rules.policy.name == "natural"  # the default off x86
    t = FakeTarget({"pc": 0x2000, "x0": 0x5001, "x2": 0, "x3": 0, "sp": 0x7000})
    c = FakeControl()
    s.lifecycle.arm_now(t, c)  # type: ignore[arg-type]
    assert sorted(a for k, a in c.calls if k == "break") == [0x1000, 0x1004, 0x1008, 0x100c]
    for pc in (0x1000, 0x1004, 0x1008, 0x100c):
        t.regs["pc"] = pc
        assert s.step.on_breakpoint(t, 7) is StepDecision.STEP  # type: ignore[arg-type]
    t.regs["pc"] = 0x2000  # a breakpoint of someone else's outside the scope
    assert s.step.on_breakpoint(t, 7) is StepDecision.RUN  # type: ignore[arg-type]
    assert [(f.pc, f.va, f.size) for f in s.buffer.records] == [(0x1000, 0x5001, 4), (0x1004, 0x5005, 4)]
    assert s.step.stats.steps == 4 and s.step.stats.entries == 1
    assert not [k for k, _ in c.calls if k in ("step", "unstep")]  # nothing single-stepped


def test_a_thread_already_in_scope_has_its_instruction_checked_at_arm() -> None:
    s = Session("fake")
    s.mode.tracing = True
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1010",)), "natural", "aarch64")
    t = FakeTarget({"pc": 0x1004, "x0": 0x5002, "x3": 0, "sp": 0x7000})
    s.lifecycle.arm_now(t, FakeControl())  # type: ignore[arg-type]
    assert [(f.pc, f.va) for f in s.buffer.records] == [(0x1004, 0x5006)]


@pytest.mark.parametrize("request_", [ScopeRequest(everywhere=True), ScopeRequest(until_return=True)])
def test_scopes_without_ranges_are_refused_in_one_line(request_: ScopeRequest) -> None:
    s = Session("fake")
    s.step.configure(request_, None, "aarch64")
    with pytest.raises(ScopeError, match="--in FUNC or --range"):
        s.lifecycle.arm_now(FakeTarget({"pc": 0x1000, "sp": 0x7000}), FakeControl())  # type: ignore[arg-type]


def test_default_policy_follows_the_target_when_configured_before_it_existed() -> None:
    s = Session("fake")
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1010",)), None)  # no process yet: x86's default
    assert s.rules.policy.name == "ac"
    s.lifecycle.arm_now(FakeTarget({"pc": 0x2000, "sp": 0x7000}), FakeControl())  # type: ignore[arg-type]
    assert s.rules.policy.name == "natural"
    s.step.configure(ScopeRequest(ranges=("0x1000,0x1010",)), "cacheline")
    s.lifecycle.arm_now(FakeTarget({"pc": 0x2000, "sp": 0x7000}), FakeControl())  # type: ignore[arg-type]
    assert s.rules.policy.name == "cacheline"  # what the user typed stays
