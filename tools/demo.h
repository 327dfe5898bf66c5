/* `cucore demo`, shared by its producer (demo_producer.c) and consumer
 * (demo_consumer.c). They talk over a cucore channel: each step is one
 * message from the producer; the consumer resolves every record, prints
 * what it got, and answers with a message of the devices it resolved the
 * records to (or with no record at all when something failed, after
 * printing why), which the producer decodes: an answer that names the
 * same GPU decodes to the very device singleton the producer sent. */
#ifndef CUC_DEMO_H
#define CUC_DEMO_H

#include <stdint.h>

#include "cli.h"

/* The producer fills buffer b with demo_word(b, k) at word k; the consumer
 * checks that, and on a GPU its kernel adds 1 to every word of buffer 0. */
#define DEMO_BUFFERS 3
#define DEMO_BUFFER_BYTES ((size_t)1 << 20)
#define DEMO_WORDS (DEMO_BUFFER_BYTES / 4)
#define DEMO_TIMEOUT_MS 30000

static inline uint32_t demo_word(int b, size_t k)
{
    return (uint32_t)(b + 1) << 24 | (uint32_t)(k & 0xffffffu);
}

/* add_one(u32 *p, u32 n): p[i] += 1 for i < n. JIT-compiled by the driver
 * for whatever GPU receives it (sm_70 PTX runs on any later GPU). */
static const char demo_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry add_one(.param .u64 p, .param .u32 n)\n"
    "{\n"
    "  .reg .u32 %r<7>;\n"
    "  .reg .u64 %rd<4>;\n"
    "  .reg .pred %q;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %q, %r5, %r1;\n"
    "  @%q bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mul.wide.u32 %rd2, %r5, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r6, [%rd3];\n"
    "  add.u32 %r6, %r6, 1;\n"
    "  st.global.u32 [%rd3], %r6;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

/* demo_consumer.c: serves the producer on the channel fd it inherited. */
int demo_consumer(int fd);
/* demo_producer.c: runs every step with a consumer already started on
 * ch; returns the number of mismatches (0: all matched). */
int demo_producer_steps(cuc_channel *ch, int simulated);

/* Prints a line prefixed with the side's name, flushed at once so that the
 * two processes' lines come out in step order. */
void demo_say(const char *side, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
