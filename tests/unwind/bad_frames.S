/* Frames whose unwind information leads to a bad CFA or a bad return address; the walk
 * must stop there without faulting. Each calls fn(arg) and returns its result. */
        .text

/* size_t bad_rbp_call(size_t (*fn)(void *), void *arg, uintptr_t bad_rbp):
 * the CFA is rbp + 16, and rbp holds bad_rbp while fn runs. */
        .globl bad_rbp_call
        .type bad_rbp_call, @function
bad_rbp_call:
        .cfi_startproc
        push %rbp
        .cfi_def_cfa_offset 16
        .cfi_offset %rbp, -16
        mov %rsp, %rbp
        .cfi_def_cfa_register %rbp
        mov %rdx, %rbp
        mov %rdi, %rax
        mov %rsi, %rdi
        call *%rax
        mov %rsp, %rbp
        pop %rbp
        .cfi_def_cfa %rsp, 8
        ret
        .cfi_endproc
        .size bad_rbp_call, .-bad_rbp_call

/* size_t bad_ra_call(size_t (*fn)(void *), void *arg, uintptr_t bad_ra):
 * the unwind information says the return address is the slot that holds bad_ra. */
        .globl bad_ra_call
        .type bad_ra_call, @function
bad_ra_call:
        .cfi_startproc
        push %rdx
        sub $16, %rsp
        .cfi_def_cfa_offset 24
        mov %rdi, %rax
        mov %rsi, %rdi
        call *%rax
        add $24, %rsp
        .cfi_def_cfa_offset 8
        ret
        .cfi_endproc
        .size bad_ra_call, .-bad_ra_call

/* size_t rbx_cfa_call(size_t (*fn)(void *), void *arg): a good frame whose CFA is rbx + 16,
 * which no simple rule (rsp or rbp + offset) describes: libunwind must unwind it. */
        .globl rbx_cfa_call
        .type rbx_cfa_call, @function
rbx_cfa_call:
        .cfi_startproc
        push %rbx
        .cfi_def_cfa_offset 16
        .cfi_offset %rbx, -16
        mov %rsp, %rbx
        .cfi_def_cfa_register %rbx
        sub $32, %rsp
        mov %rdi, %rax
        mov %rsi, %rdi
        call *%rax
        mov %rbx, %rsp
        .cfi_def_cfa_register %rsp
        pop %rbx
        .cfi_def_cfa_offset 8
        ret
        .cfi_endproc
        .size rbx_cfa_call, .-rbx_cfa_call

/* size_t nocfi_call(size_t (*fn)(void *), void *arg): a frame with no unwind information at
 * all (no FDE) whose rbp is 0 while fn runs, like hand-written assembly that uses rbp as a
 * general register: nothing (neither our walk nor libunwind) can unwind past it. */
        .globl nocfi_call
        .type nocfi_call, @function
nocfi_call:
        push %rbp
        push %rbx
        sub $8, %rsp
        xor %ebp, %ebp
        mov %rdi, %rax
        mov %rsi, %rdi
        call *%rax
        add $8, %rsp
        pop %rbx
        pop %rbp
        ret
        .size nocfi_call, .-nocfi_call

        .section .note.GNU-stack,"",@progbits
