/* The vGPU software licence (nvmlDeviceGetGridLicensableFeatures_v4, DCGM field 526).
 *
 * gpuN.vgpu_license.supported = 0|1 (default 0: a bare-metal GPU, isGridLicenseSupported 0 and no
 * features listed); with 1, gpuN.vgpu_license.state lists one feature of code
 * NVML_GRID_LICENSE_FEATURE_CODE_VGPU with that featureState (non-zero: licensed), and without it no
 * vGPU feature is listed; gpuN.vgpu_license.rtx_state lists an NVIDIA RTX feature (code 2) before it. Errors come from gpuN.error.nvmlDeviceGetGridLicensableFeatures_v4 (see SCENARIO.md). */
#include "fakenvml.h"

#include <string.h>

static nvmlReturn_t licensable_features(const struct fake_call *c, nvmlGridLicensableFeatures_t *out)
{
    memset(out, 0, sizeof *out);
    unsigned long long supported = 0, state;
    (void)fake_dev_u64(c, &supported, "vgpu_license.supported");
    out->isGridLicenseSupported = supported != 0;
    if (supported == 0)
        return NVML_SUCCESS;
    static const struct {
        const char *key;
        nvmlGridLicenseFeatureCode_t code;
    } listed[] = {
        {"vgpu_license.rtx_state", NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX},
        {"vgpu_license.state", NVML_GRID_LICENSE_FEATURE_CODE_VGPU},
    };
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++) {
        if (!fake_dev_u64(c, &state, "%s", listed[i].key))
            continue;
        nvmlGridLicensableFeature_t *feature = &out->gridLicensableFeatures[out->licensableFeaturesCount++];
        feature->featureCode = listed[i].code;
        feature->featureState = (unsigned)state;
        feature->featureEnabled = 1;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device,
                                                            nvmlGridLicensableFeatures_t *pGridLicensableFeatures)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pGridLicensableFeatures != NULL);
    return licensable_features(&c, pGridLicensableFeatures);
}
