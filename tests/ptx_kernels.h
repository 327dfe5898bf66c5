/* PTX images for the kernel tests: real kernels (they run on a GPU) whose
 * `.entry` names the simulator also finds. */
#ifndef CUC_TEST_PTX_KERNELS_H
#define CUC_TEST_PTX_KERNELS_H

/* twice(u32 *out, u32 n): out[i] = 2 * i for i < n; noop(). */
static const char ptx_twice[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry twice(.param .u64 out, .param .u32 n)\n"
    "{\n"
    "  .reg .u32 %r<6>;\n"
    "  .reg .u64 %rd<4>;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p, %r5, %r1;\n"
    "  @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mul.wide.u32 %rd2, %r5, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  shl.b32 %r1, %r5, 1;\n"
    "  st.global.u32 [%rd3], %r1;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    ".visible .entry noop()\n"
    "{\n"
    "  ret;\n"
    "}\n";

/* mixed(u8, u16, f32, u64, 24-byte struct aligned to 16, f64): does
 * nothing; its parameter layout is PTX's (each aligned to its own size,
 * .align where given): offsets 0 / 2 / 4 / 8 / 16 / 40, sizes 1 / 2 / 4 /
 * 8 / 24 / 8. */
static const char ptx_mixed[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry mixed(.param .u8 a, .param .u16 b, .param .f32 c,\n"
    "    .param .u64 d, .param .align 16 .b8 e[24], .param .f64 f)\n"
    "{\n"
    "  ret;\n"
    "}\n";

/* A different image with one kernel. */
static const char ptx_other[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry other()\n"
    "{\n"
    "  ret;\n"
    "}\n";

/* copy_u64(const u64 *src, u64 *dst, u32 n): dst[i] = src[i] for i < n. */
static const char ptx_copy_u64[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry copy_u64(.param .u64 src, .param .u64 dst, .param .u32 n)\n"
    "{\n"
    "  .reg .u32 %r<6>;\n"
    "  .reg .u64 %rd<7>;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [src];\n"
    "  ld.param.u64 %rd2, [dst];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p, %r5, %r1;\n"
    "  @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  cvta.to.global.u64 %rd2, %rd2;\n"
    "  mul.wide.u32 %rd3, %r5, 8;\n"
    "  add.u64 %rd4, %rd1, %rd3;\n"
    "  add.u64 %rd5, %rd2, %rd3;\n"
    "  ld.global.u64 %rd6, [%rd4];\n"
    "  st.global.u64 [%rd5], %rd6;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#endif
