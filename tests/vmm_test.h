/* Helpers for the VMM tests (test_vmm*.c): bytes in and out of device
 * memory through the driver, a reproducible pattern, the access every
 * device should have (decided by UUID), and the simulator's mappings in
 * /proc/self/maps. */
#ifndef CUC_TEST_VMM_H
#define CUC_TEST_VMM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "check.h"
#include "pattern.h"
#include "device/device.h"
#include "memory/vmm.h"

/* Copies through the driver, so that the same code runs on a GPU (where
 * the range is not host memory) and on the simulator. */
static inline void vmm_t_write(const cuc_vmm *v, size_t off, const void *src, size_t n)
{
    CHECK_OK(cuc_device_set_current(cuc_vmm_device(v)));
    CHECK(CUC_DRV->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)cuc_vmm_ptr(v) + off, src, n,
                                     NULL) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuStreamSynchronize(NULL) == CUDA_SUCCESS);
}

static inline void vmm_t_read(const cuc_vmm *v, size_t off, void *dst, size_t n)
{
    CHECK_OK(cuc_device_set_current(cuc_vmm_device(v)));
    CHECK(CUC_DRV->cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)cuc_vmm_ptr(v) + off, n,
                                     NULL) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuStreamSynchronize(NULL) == CUDA_SUCCESS);
}

#define vmm_t_pattern test_pattern

/* Fills the whole range with the pattern of seed. */
static inline void vmm_t_fill(const cuc_vmm *v, uint64_t seed)
{
    size_t n = cuc_vmm_size(v);
    void *buf = malloc(n);

    CHECK(buf != NULL);
    vmm_t_pattern(seed, buf, n);
    vmm_t_write(v, 0, buf, n);
    free(buf);
}

/* 1 if the whole range holds the pattern of seed. */
static inline int vmm_t_holds(const cuc_vmm *v, uint64_t seed)
{
    size_t n = cuc_vmm_size(v);
    uint8_t *got = calloc(1, n);
    int same;

    CHECK(got != NULL);
    vmm_t_read(v, 0, got, n);
    same = test_pattern_is(seed, got, n);
    free(got);
    return same;
}

/* 1 if uuid is the owner's or one of the peers' in the list of UUID
 * strings expect (owner first; NULL entries skipped). */
static inline int vmm_t_uuid_in(const cuc_device *d, const char *const *expect, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (expect[i] && !strcmp(expect[i], cuc_device_uuid_string(d)))
            return 1;
    return 0;
}

/* Every visible device's access to v, through cucore and through the
 * driver's cuMemGetAccess on each chunk: read-write exactly for the
 * devices whose UUID is in expect, none for the others. */
static inline void vmm_t_check_access(const cuc_vmm *v, const char *const *expect,
                                      size_t nexpect)
{
    int n, i;

    CHECK_OK(cuc_device_count(&n));
    for (i = 0; i < n; i++) {
        cuc_device *d;
        unsigned acc = 0xdead;
        unsigned long long want;
        size_t off = 0;
        CHECK_OK(cuc_device_get(i, &d));
        want = vmm_t_uuid_in(d, expect, nexpect) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                  : CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CHECK_OK(cuc_vmm_access(v, d, &acc));
        CHECK(acc == (want ? CUC_VMM_ACCESS_READWRITE : CUC_VMM_ACCESS_NONE));
        for (size_t c = 0; c < cuc_vmm_chunk_count(v); c++) {
            CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, d->cu};
            unsigned long long f = 0xdead;
            CHECK(CUC_DRV->cuMemGetAccess(&f, &loc, (CUdeviceptr)(uintptr_t)cuc_vmm_ptr(v) +
                                                        off) == CUDA_SUCCESS);
            CHECK(f == want);
            off += cuc_vmm_chunk_size(v, c);
        }
    }
}

/* One resource on dev created, imported here (from a message that came on
 * no channel) and freed: what the driver opens on first use of either is
 * then in an fd baseline taken afterwards. */
static inline void vmm_t_warm_up(const cuc_device *dev)
{
    size_t g;
    cuc_vmm *v, *imp;
    cuc_msg *m;

    CHECK_OK(cuc_vmm_granularity(dev, &g));
    CHECK_OK(cuc_vmm_create(dev, NULL, 0, &g, 1, &v));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, v));
    CHECK_OK(cuc_msg_get_vmm(m, 0, &imp));
    vmm_t_fill(imp, 9);
    CHECK(vmm_t_holds(v, 9));
    cuc_vmm_unref(imp);
    cuc_msg_destroy(m);
    cuc_vmm_unref(v);
}

/* Lines of /proc/self/maps that map a simulator VMM chunk (its memfd);
 * with lo < hi, only those overlapping [lo, hi). 0 on a real GPU. */
static inline int vmm_t_sim_maps(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[1024];
    int n = 0;

    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        if (!strstr(line, "cucore-sim-vmm") || sscanf(line, "%lx-%lx", &a, &b) != 2)
            continue;
        if (lo < hi && (b <= lo || a >= hi))
            continue;
        n++;
    }
    fclose(f);
    return n;
}

#endif
