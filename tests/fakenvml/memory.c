/* The unrepairable-memory flag (nvmlDeviceGetUnrepairableMemoryFlag_v1, DCGM field 1507).
 *
 * nvml.h (nvidia-nvml-dev 13.5) declares the struct as {bUnrepairableMemory} alone, while DCGM and
 * nvidia-ml-py pass {version, bUnrepairableMemory}. The fake answers the two-word layout (the version
 * checked, the flag in the second word) unless gpuN.memory.unrepairable_layout = v1_flag_only, which
 * plays a driver of the one-word layout: the flag lands in the first word, over the version.
 * gpuN.memory.unrepairable = 0|1; without it NOT_SUPPORTED (see SCENARIO.md). */
#include "fakenvml.h"

#include <string.h>

#define FAKE_UNREPAIRABLE_VERSION 0x1000008u /* sizeof {version, flag} | 1 << 24 */

nvmlReturn_t DECLDIR nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device,
                                                           nvmlUnrepairableMemoryStatus_v1_t *unrepairableMemoryStatus)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(unrepairableMemoryStatus != NULL);
    unsigned flag;
    nvmlReturn_t r = fake_uint(&c, &flag, "memory.unrepairable");
    if (r != NVML_SUCCESS)
        return r;
    const char *layout = fake_dev_str(&c, "memory.unrepairable_layout");
    unsigned char *words = (unsigned char *)unrepairableMemoryStatus;
    if (layout != NULL && strcmp(layout, "v1_flag_only") == 0) {
        memcpy(words, &flag, sizeof flag); /* the one-word struct: no version member */
        return NVML_SUCCESS;
    }
    unsigned version;
    memcpy(&version, words, sizeof version);
    if (version != FAKE_UNREPAIRABLE_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memcpy(words + sizeof version, &flag, sizeof flag);
    return NVML_SUCCESS;
}
