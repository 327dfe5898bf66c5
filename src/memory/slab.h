/* Slabs (slab.c): the sub-allocator of cucore/slab.h; the hook a carved
 * view's release calls is declared in memory/buffer.h. */
#ifndef CUC_MEMORY_SLAB_H
#define CUC_MEMORY_SLAB_H

#include "cucore/slab.h"
#include "memory/buffer.h"

#endif
