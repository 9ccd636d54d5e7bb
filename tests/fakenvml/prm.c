/* NVLink port (PRM) counters: nvmlDeviceReadPRMCounters_v1. Counter 201 (PPCNT port_xmit_wait) of
 * local port L answers gpuN.nvlink.L.transmit_wait; a GPU with the key on none of its links answers
 * NOT_SUPPORTED for the whole call, else each entry has its own status (NOT_SUPPORTED for a link
 * without the key or another counter id). See SCENARIO.md. */
#include "fakenvml.h"


static bool any_transmit_wait(const struct fake_call *c)
{
    for (unsigned link = 0; link < FAKE_MAX_LINKS; link++)
        if (fake_dev_str(c, "nvlink.%u.transmit_wait", link) != NULL)
            return true;
    return false;
}

nvmlReturn_t DECLDIR nvmlDeviceReadPRMCounters_v1(nvmlDevice_t device, nvmlPRMCounterList_v1_t *counterList)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(counterList != NULL);
    REQUIRE(counterList->numCounters == 0 || counterList->counters != NULL);
    if (!any_transmit_wait(&c))
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned i = 0; i < counterList->numCounters; i++) {
        nvmlPRMCounter_v1_t *counter = &counterList->counters[i];
        nvmlPRMCounterValue_v1_t *out = &counter->counterValue;
        unsigned long long value;
        out->outputType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        out->outputValue.ullVal = 0;
        if (counter->counterId != NVML_PRM_COUNTER_ID_PPCNT_PORTCOUNTERS_PORT_XMIT_WAIT)
            out->status = NVML_ERROR_NOT_SUPPORTED;
        else if (counter->inData.localPort >= FAKE_MAX_LINKS)
            out->status = NVML_ERROR_INVALID_ARGUMENT;
        else if (!fake_dev_u64(&c, &value, "nvlink.%u.transmit_wait", counter->inData.localPort))
            out->status = NVML_ERROR_NOT_SUPPORTED;
        else {
            out->status = NVML_SUCCESS;
            out->outputValue.ullVal = value;
        }
    }
    return NVML_SUCCESS;
}
