/* The owner's callbacks of memory another allocator owns (release.c):
 * one per adopt of an allocation (cuc_buffer_adopt, cuc_vmm_adopt), run
 * once when cucore no longer uses the memory. Below buffers and VMM
 * resources, which run them at their release. */
#ifndef CUC_MEMORY_RELEASE_H
#define CUC_MEMORY_RELEASE_H

#include <stddef.h>

struct cuc__release {
    void (*fn)(void *arg);
    void *arg;
};
struct cuc__releases {
    size_t n, cap;
    struct cuc__release *v;
};

/* Appends fn(arg) (fn NULL: nothing) to *r, made on first use; the
 * caller's lock guards *r. CUC_E_NOMEM leaves *r as it was. */
int cuc__releases_add(struct cuc__releases **r, void (*fn)(void *), void *arg);
/* Runs every callback of r once, in the order given, and frees r (NULL:
 * nothing). Called with no lock held: a callback may call cucore. */
void cuc__releases_run(struct cuc__releases *r);
/* Frees r without running it (a forked child's copy: the owner is the
 * parent's; an adopt that failed). */
void cuc__releases_drop(struct cuc__releases *r);

#endif
