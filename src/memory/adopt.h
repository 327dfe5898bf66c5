/* Memory another allocator owns (adopt.c): what the driver says a pointer
 * is (cuc_memory_kind), and the refusal of a kind a call cannot share. */
#ifndef CUC_MEMORY_ADOPT_H
#define CUC_MEMORY_ADOPT_H

#include <stddef.h>

#include "cucore/memory.h"
#include "driver/driver.h"

/* What the driver says a pointer is (one cuPointerGetAttributes, and for
 * VMM one cuMemRetainAllocationHandle). */
struct cuc__mem_info {
    int kind;               /* enum cuc_memory_kind */
    int ordinal;            /* DEVICE_ORDINAL; < 0: none */
    int host;               /* MEMORY_TYPE is host */
    CUmemoryPool pool;      /* MEMPOOL_HANDLE */
    CUdeviceptr range_base; /* RANGE_START_ADDR, RANGE_SIZE */
    size_t range_size;
};
/* fn names the caller in an error (a failed query, never a default). */
int cuc__memory_classify(CUdeviceptr p, const char *fn, struct cuc__mem_info *out);
/* CUC_E_INVALID: fn cannot take memory of kind, saying what to use. */
int cuc__memory_refuse(const char *fn, const void *ptr, int kind);

#endif
