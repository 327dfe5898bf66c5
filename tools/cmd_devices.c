/* `cucore devices [--json]`: the devices as this process sees them. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_text(int n, const struct cuc_driver_info *info, const char *cvd)
{
    int i;

    printf("driver: %s (version %d)%s\n", info->path, info->version,
           info->simulated ? " [simulated]" : "");
    printf("CUDA_VISIBLE_DEVICES: %s\n", cvd ? cvd : "(unset)");
    for (i = 0; i < n; i++) {
        cuc_device *d;
        int maj, min;
        if (cuc_device_get(i, &d))
            continue;
        cuc_device_compute_capability(d, &maj, &min);
        printf("%d  %s  %s  %s  %zu MiB  sm_%d%d\n", i, cuc_device_uuid_string(d),
               cuc_device_name(d), cuc_device_pci_bus_id(d),
               cuc_device_total_memory(d) >> 20, maj, min);
    }
}

static void print_caps_json(unsigned caps)
{
    printf("{\"memory_pools\":%s,\"pool_posix_fd\":%s,\"vmm\":%s,"
           "\"vmm_posix_fd\":%s,\"ipc_events\":%s,\"fabric\":%s}",
           caps & CUC_DEVICE_CAP_MEMORY_POOLS ? "true" : "false",
           caps & CUC_DEVICE_CAP_POOL_POSIX_FD ? "true" : "false",
           caps & CUC_DEVICE_CAP_VMM ? "true" : "false",
           caps & CUC_DEVICE_CAP_VMM_POSIX_FD ? "true" : "false",
           caps & CUC_DEVICE_CAP_IPC_EVENTS ? "true" : "false",
           caps & CUC_DEVICE_CAP_FABRIC ? "true" : "false");
}

static void print_json(int n, const struct cuc_driver_info *info, const char *cvd)
{
    int i;

    printf("{\"driver\":");
    json_str(stdout, info->path);
    printf(",\"driver_version\":%d,\"simulated\":%s,\"cuda_visible_devices\":",
           info->version, info->simulated ? "true" : "false");
    json_str(stdout, cvd);
    printf(",\"devices\":[");
    for (i = 0; i < n; i++) {
        cuc_device *d;
        int maj, min;
        if (cuc_device_get(i, &d))
            continue;
        cuc_device_compute_capability(d, &maj, &min);
        printf("%s{\"ordinal\":%d,\"uuid\":\"%s\",\"name\":", i ? "," : "", i,
               cuc_device_uuid_string(d));
        json_str(stdout, cuc_device_name(d));
        printf(",\"pci_bus_id\":\"%s\",\"total_memory\":%zu,"
               "\"compute_capability\":\"%d.%d\",\"caps\":",
               cuc_device_pci_bus_id(d), cuc_device_total_memory(d), maj, min);
        print_caps_json(cuc_device_caps(d));
        printf("}");
    }
    printf("]}\n");
}

const char cli_devices_usage[] =
    "usage: cucore devices [--json]\n"
    "The devices this process sees: ordinal, UUID, name, PCI bus id, memory,\n"
    "compute capability, and the CUDA_VISIBLE_DEVICES in force. Exit 1, with the\n"
    "driver's reason, when the driver does not load or no device is visible.\n";

int cli_devices(int argc, char **argv)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    struct cuc_driver_info info;
    int json = 0, n = 0, i, rc;

    for (i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else
            return cli_usage_error("devices", cli_devices_usage, "unknown argument \"%s\"",
                                   argv[i]);
    }
    rc = cuc_driver_load(&info);
    if (rc)
        return cli_fail("no device visible", rc);
    rc = cuc_device_count(&n);
    if (rc)
        return cli_fail("no device visible", rc);
    if (json)
        print_json(n, &info, cvd);
    else
        print_text(n, &info, cvd);
    return CLI_OK;
}
