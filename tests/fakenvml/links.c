/* NVLink5 port counters, NVLink data ECC total and the GPU's C2C link: values NVML offers only through
 * nvmlDeviceGetFieldValues (see SCENARIO.md, "NVLink5 counters and the C2C link"). The per-link counters
 * read gpuN.nvlink.L.<key> for scopeId L, and for scopeId UINT_MAX the sum over the links (NVML's
 * aggregate, as DCGM asks on NVLink5); the NVLink5 bit error rates read gpuN.ber.symbol / gpuN.ber.effective
 * (NVML's encoding) for scopeId UINT_MAX only; the C2C fields read gpuN.c2c.<key> whatever the scopeId (the fake
 * has one C2C link's values). A missing key is NOT_SUPPORTED. */

#include "fakenvml.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

struct link_field {
    unsigned id;
    const char *key;
};

static const struct link_field k_nvlink5[] = {
    {NVML_FI_DEV_NVLINK_COUNT_XMIT_PACKETS, "tx_packets"},
    {NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, "tx_bytes"},
    {NVML_FI_DEV_NVLINK_COUNT_RCV_PACKETS, "rx_packets"},
    {NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES, "rx_bytes"},
    {NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS, "malformed_packet_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS, "buffer_overrun_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS, "receive_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS, "receive_remote_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS, "receive_general_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS, "local_link_integrity_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS, "transmit_discard_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS, "recovery_succeeded"},
    {NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, "recovery_failed"},
    {NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, "recovery_events"},
    {NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, "symbol_errors"},
    {NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, "effective_errors"},
};

static const struct link_field k_c2c[] = {
    {NVML_FI_DEV_C2C_LINK_COUNT, "c2c.link_count"},
    {NVML_FI_DEV_C2C_LINK_GET_STATUS, "c2c.status"},
    {NVML_FI_DEV_C2C_LINK_GET_MAX_BW, "c2c.max_bandwidth"},
    {NVML_FI_DEV_C2C_LINK_ERROR_INTR, "c2c.crc_errors"},
    {NVML_FI_DEV_C2C_LINK_ERROR_REPLAY, "c2c.replay_errors"},
    {NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B, "c2c.replay_b2b_errors"},
    {NVML_FI_DEV_C2C_LINK_POWER_STATE, "c2c.power_state"},
};

/* gpuN.nvlink.L.<key> of link ``scope``, or the sum over the links for UINT_MAX. */
static bool per_link(const struct fake_call *c, unsigned scope, const char *key, unsigned long long *v)
{
    if (scope != UINT_MAX)
        return scope < FAKE_MAX_LINKS && fake_dev_u64(c, v, "nvlink.%u.%s", scope, key);
    bool any = false;
    *v = 0;
    for (unsigned l = 0; l < FAKE_MAX_LINKS; l++) {
        unsigned long long one;
        if ((c->s->gpu[c->gpu].link_mask & (1ull << l)) && fake_dev_u64(c, &one, "nvlink.%u.%s", l, key)) {
            *v += one;
            any = true;
        }
    }
    return any;
}

bool fake_link_field(const struct fake_call *c, nvmlFieldValue_t *f, nvmlReturn_t *r)
{
    unsigned long long v = 0;
    bool found = false, known = false;
    char key[32];
    for (size_t i = 0; !known && i < sizeof k_nvlink5 / sizeof k_nvlink5[0]; i++)
        if (k_nvlink5[i].id == f->fieldId) {
            known = true;
            found = per_link(c, f->scopeId, k_nvlink5[i].key, &v);
        }
    if (!known && f->fieldId >= NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0 &&
        f->fieldId <= NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_15) {
        known = true;
        snprintf(key, sizeof key, "fec_history.%u", f->fieldId - NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0);
        found = per_link(c, f->scopeId, key, &v);
    }
    if (!known && (f->fieldId == NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER || f->fieldId == NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER)) {
        /* the GPU's encoded rate over all links: scopeId UINT_MAX only, as DCGM asks */
        known = true;
        found = f->scopeId == UINT_MAX &&
                fake_dev_u64(c, &v, "%s", f->fieldId == NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER ? "ber.symbol" : "ber.effective");
    }
    if (!known && f->fieldId == NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL) { /* summed over the links */
        known = true;
        found = per_link(c, UINT_MAX, "ecc_errors", &v);
    }
    for (size_t i = 0; !known && i < sizeof k_c2c / sizeof k_c2c[0]; i++)
        if (k_c2c[i].id == f->fieldId) {
            known = true;
            found = fake_dev_u64(c, &v, "%s", k_c2c[i].key);
        }
    if (!known)
        return false;
    memset(&f->value, 0, sizeof f->value);
    f->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    f->value.ullVal = v;
    *r = found ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    if (!found)
        f->value.ullVal = 0;
    return true;
}
