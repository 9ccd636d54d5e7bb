/* The vGPU software licence (nvmlDeviceGetGridLicensableFeatures_v4, DCGM field 526).
 *
 * gpuN.vgpu_license.supported = 0|1 (default 0: a bare-metal GPU, isGridLicenseSupported 0 and no
 * features listed); with 1, gpuN.vgpu_license.state lists one feature of code
 * NVML_GRID_LICENSE_FEATURE_CODE_VGPU with that featureState (non-zero: licensed), and without it no
 * feature is listed. Errors come from gpuN.error.nvmlDeviceGetGridLicensableFeatures_v4 (see SCENARIO.md). */
#include "fakenvml.h"

#include <string.h>

static nvmlReturn_t licensable_features(struct fake_call *c, nvmlGridLicensableFeatures_t *out)
{
    memset(out, 0, sizeof *out);
    unsigned long long supported = 0, state;
    (void)fake_dev_u64(c, &supported, "vgpu_license.supported");
    out->isGridLicenseSupported = supported != 0;
    if (supported != 0 && fake_dev_u64(c, &state, "vgpu_license.state")) {
        nvmlGridLicensableFeature_t *feature = &out->gridLicensableFeatures[0];
        feature->featureCode = NVML_GRID_LICENSE_FEATURE_CODE_VGPU;
        feature->featureState = (unsigned)state;
        feature->featureEnabled = 1;
        out->licensableFeaturesCount = 1;
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
