/* The umbrella header as a user's compiler sees it: ctest compiles this
 * file alone, as C99 with -pedantic-errors (test_header_c99) and as C++
 * (test_header_cxx), and it must compile with no warning. Each module's
 * types are used, so that a header that only parses is not enough. */
#include <cucore.h>

#ifdef __cplusplus
extern "C" int header_check(void);
#else
int header_check(void);
#endif

int header_check(void)
{
    struct cuc_record_view view;
    struct cuc_stream_record srec;
    struct cuc_event_record erec;
    struct cuc_kernel_record krec;
    struct cuc_pool_record prec;
    struct cuc_buffer_record brec;
    struct cuc_vmm_record vrec;
    struct cuc_pool_props props;
    struct cuc_driver_info info;
    cuc_launch_config cfg;
    cuc_uuid uuid;
    int n = 0;

    (void)view;
    (void)srec;
    (void)erec;
    (void)krec;
    (void)prec;
    (void)brec;
    (void)vrec;
    (void)info;
    (void)uuid;
    cuc_launch_config_init(&cfg);
    cuc_pool_props_init(&props);
    n += CUC_RECORD_RELEASE + CUC_E_BUSY + CUC_STREAM_CREATED + CUC_IMAGE_FATBIN;
    n += (int)sizeof(cuc_stream *) + (int)sizeof(cuc_event *) + cuc_version();
    return n + (int)cfg.grid[0] + props.kind;
}
