/* entry.S - the agent's code that must not be C: signal handler entries that clear EFLAGS.AC
 * before any compiled code runs (signal delivery does not clear it: PLATFORM.md), and TF: the
 * kernel clears TF for a handler, so TF at its entry is a debugger's single-step, which pushfq
 * copies to the stack; popfq would then make it the thread's own and every later instruction
 * would trap (lldb-server steps on from the trap at a handler's entry: a `continue` after a step
 * over a fault stopped with "stop reason = trace" in on_sigbus_c, issue 32), the
 * trampoline an out-of-scope routine returns through to re-arm, and vfork, which cannot be
 * wrapped by a C function (the child would return through the parent's frame).
 */
    .text

.macro AC_OFF_ENTRY name, target
    .globl \name
    .hidden \name
    .type \name, @function
\name:
    .cfi_startproc
    pushfq
    .cfi_adjust_cfa_offset 8
    andl $0xfffbfeff, (%rsp)      /* AC (bit 18) and TF (bit 8) */
    popfq
    .cfi_adjust_cfa_offset -8
    jmp \target
    .cfi_endproc
    .size \name, . - \name
.endm

    AC_OFF_ENTRY ualdbg_sigbus_entry, on_sigbus_c
    AC_OFF_ENTRY ualdbg_sigtrap_entry, on_sigtrap_c
    AC_OFF_ENTRY ualdbg_signal_entry, on_signal_c

/* An out-of-scope routine whose return address the agent replaced returns here, with AC clear.
 * rax/rdx (and xmm0/xmm1/st0, which ualdbg_skip_pop does not touch: general-regs-only) hold
 * its return value; rcx, rsi, rdi, r8-r11 are dead after a return (SysV ABI). */
    .globl ualdbg_skip_return
    .hidden ualdbg_skip_return
    .type ualdbg_skip_return, @function
ualdbg_skip_return:
    pushq %rax
    pushq %rdx
    leaq 16(%rsp), %rdi          /* rsp as the routine left it: the slot was rsp - 8 */
    call ualdbg_skip_pop         /* rax = the real return address, rdx = 1 to re-arm */
    movq %rax, %r11
    movq %rdx, %r10
    popq %rdx
    popq %rax
    pushq %r11
    testq %r10, %r10
    jz 1f
    pushfq
    orl $0x40000, (%rsp)
    popfq
1:  ret
    .size ualdbg_skip_return, . - ualdbg_skip_return

/* vfork: the child shares the parent's stack, so the return address lives in a register across
 * the system call (as in glibc). AC is cleared first: the child runs until execve unarmed. */
    .globl vfork
    .type vfork, @function
    .globl __vfork
    .type __vfork, @function
vfork:
__vfork:
    pushfq
    andl $0xfffbffff, (%rsp)
    popfq
    popq %rdi
    movl $58, %eax               /* SYS_vfork */
    syscall
    pushq %rdi
    cmpq $-4095, %rax
    jae 2f
    testq %rax, %rax
    jz 1f
    pushq %rax
    call ualdbg_vfork_parent
    popq %rax
1:  ret
2:  movq %rax, %rdi
    jmp ualdbg_vfork_error
    .size vfork, . - vfork

    .section .note.GNU-stack,"",@progbits
