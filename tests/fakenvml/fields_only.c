/* Field values NVML offers only through nvmlDeviceGetFieldValues (no call of their own): the HW
 * slowdown times, PCIe correctable errors and bytes, the recovery action and power smoothing's settings. Each
 * reads one gpuN key (see SCENARIO.md, "Fields without a call"); a missing key is NOT_SUPPORTED. The
 * per-profile power smoothing fields take the preset profile as scopeId. */

#include "fakenvml.h"

#include <stdio.h>
#include <string.h>

enum kind { UINT, ULL, DBL };

struct only_field {
    unsigned id;
    const char *key; /* the per-profile fields: the part after power_smoothing.profile.P. */
    enum kind kind;
    bool scoped;
};

static const struct only_field k_only[] = {
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, "slowdown.hw_thermal", ULL, false},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, "slowdown.hw_power_brake", ULL, false},
    {NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, "pcie.correctable_errors", ULL, false},
    {NVML_FI_DEV_PCIE_COUNT_TX_BYTES, "pcie.tx_bytes", ULL, false},
    {NVML_FI_DEV_PCIE_COUNT_RX_BYTES, "pcie.rx_bytes", ULL, false},
    {NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, "recovery_action", UINT, false},
    {NVML_FI_PWR_SMOOTHING_ENABLED, "power_smoothing.enabled", UINT, false},
    {NVML_FI_PWR_SMOOTHING_PRIV_LVL, "power_smoothing.privilege_level", UINT, false},
    {NVML_FI_PWR_SMOOTHING_IMM_RAMP_DOWN_ENABLED, "power_smoothing.immediate_ramp_down", UINT, false},
    {NVML_FI_PWR_SMOOTHING_APPLIED_TMP_CEIL, "power_smoothing.applied_ceiling", DBL, false},
    {NVML_FI_PWR_SMOOTHING_APPLIED_TMP_FLOOR, "power_smoothing.applied_floor", DBL, false},
    {NVML_FI_PWR_SMOOTHING_MAX_PERCENT_TMP_FLOOR_SETTING, "power_smoothing.max_floor_percent", DBL, false},
    {NVML_FI_PWR_SMOOTHING_MIN_PERCENT_TMP_FLOOR_SETTING, "power_smoothing.min_floor_percent", DBL, false},
    {NVML_FI_PWR_SMOOTHING_HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING, "power_smoothing.lifetime_remaining_percent", DBL,
     false},
    {NVML_FI_PWR_SMOOTHING_MAX_NUM_PRESET_PROFILES, "power_smoothing.preset_profiles", UINT, false},
    {NVML_FI_PWR_SMOOTHING_PROFILE_PERCENT_TMP_FLOOR, "floor_percent", DBL, true},
    {NVML_FI_PWR_SMOOTHING_PROFILE_RAMP_UP_RATE, "ramp_up", DBL, true},
    {NVML_FI_PWR_SMOOTHING_PROFILE_RAMP_DOWN_RATE, "ramp_down", DBL, true},
    {NVML_FI_PWR_SMOOTHING_PROFILE_RAMP_DOWN_HYST_VAL, "hysteresis", UINT, true},
    {NVML_FI_PWR_SMOOTHING_ACTIVE_PRESET_PROFILE, "power_smoothing.active_profile", UINT, false},
    {NVML_FI_PWR_SMOOTHING_ADMIN_OVERRIDE_PERCENT_TMP_FLOOR, "power_smoothing.override.floor_percent", DBL, false},
    {NVML_FI_PWR_SMOOTHING_ADMIN_OVERRIDE_RAMP_UP_RATE, "power_smoothing.override.ramp_up", DBL, false},
    {NVML_FI_PWR_SMOOTHING_ADMIN_OVERRIDE_RAMP_DOWN_RATE, "power_smoothing.override.ramp_down", DBL, false},
    {NVML_FI_PWR_SMOOTHING_ADMIN_OVERRIDE_RAMP_DOWN_HYST_VAL, "power_smoothing.override.hysteresis", UINT, false},
};

bool fake_field_only(const struct fake_call *c, nvmlFieldValue_t *f, nvmlReturn_t *r)
{
    for (size_t i = 0; i < sizeof k_only / sizeof k_only[0]; i++) {
        const struct only_field *e = &k_only[i];
        if (e->id != f->fieldId)
            continue;
        char key[96]; /* the scopeId of an unscoped field is ignored, as NVML does */
        if (e->scoped)
            snprintf(key, sizeof key, "power_smoothing.profile.%u.%s", f->scopeId, e->key);
        else
            snprintf(key, sizeof key, "%s", e->key);
        double d = 0;
        unsigned long long v = 0;
        *r = NVML_SUCCESS;
        if (e->kind == DBL) {
            if (!fake_dev_f64(c, &d, "%s", key))
                *r = NVML_ERROR_NOT_SUPPORTED;
            f->valueType = NVML_VALUE_TYPE_DOUBLE;
            f->value.dVal = d;
        } else if (!fake_dev_u64(c, &v, "%s", key)) {
            *r = NVML_ERROR_NOT_SUPPORTED;
        } else if (e->kind == UINT) {
            f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            f->value.uiVal = (unsigned)v;
        } else {
            f->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            f->value.ullVal = v;
        }
        if (*r != NVML_SUCCESS)
            memset(&f->value, 0, sizeof f->value);
        return true;
    }
    return false;
}
