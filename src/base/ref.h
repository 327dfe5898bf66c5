/* A reference count with a release function, embedded in an object that a
 * lower layer holds without knowing its type (a received message holds the
 * lease table it reports to this way: wire/ sits below lease/). The last
 * put calls release, which frees the enclosing object. */
#ifndef CUC_BASE_REF_H
#define CUC_BASE_REF_H

#include <stdatomic.h>

struct cuc__ref {
    _Atomic unsigned n;
    void (*release)(struct cuc__ref *r);
};

static inline void cuc__ref_init(struct cuc__ref *r, void (*release)(struct cuc__ref *))
{
    atomic_init(&r->n, 1);
    r->release = release;
}

static inline void cuc__ref_get(struct cuc__ref *r)
{
    atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

static inline void cuc__ref_put(struct cuc__ref *r)
{
    if (atomic_fetch_sub_explicit(&r->n, 1, memory_order_acq_rel) == 1)
        r->release(r);
}

/* Defines prefix_ref(T *o) and prefix_unref(T *o), NULL-safe, for a type T
 * whose struct cuc__ref is its member field. */
#define CUC__REF_FUNCTIONS(prefix, T, field)          void prefix##_ref(T *o)                           {                                                     cuc__ref_get(&o->field);                      }                                                 void prefix##_unref(T *o)                         {                                                     if (o)                                                cuc__ref_put(&o->field);                  }

#endif
