/*
 * Part of gpu-exporter's test fake of libnvidia-ml.so.1 (see README.md in this folder).
 *
 * This file is compiled against NVIDIA's nvml.h, installed at build time from the PyPI wheel
 * nvidia-nvml-dev (never copied into this repository). That header asks that its notice be
 * included in the internal comments of code using it; here it is, verbatim:
 *
 * Copyright 1993-2026 NVIDIA Corporation.  All rights reserved.
 *
 * NOTICE TO USER:
 *
 * This source code is subject to NVIDIA ownership rights under U.S. and
 * international Copyright laws.  Users and possessors of this source code
 * are hereby granted a nonexclusive, royalty-free license to use this code
 * in individual and commercial software.
 *
 * NVIDIA MAKES NO REPRESENTATION ABOUT THE SUITABILITY OF THIS SOURCE
 * CODE FOR ANY PURPOSE.  IT IS PROVIDED "AS IS" WITHOUT EXPRESS OR
 * IMPLIED WARRANTY OF ANY KIND.  NVIDIA DISCLAIMS ALL WARRANTIES WITH
 * REGARD TO THIS SOURCE CODE, INCLUDING ALL IMPLIED WARRANTIES OF
 * MERCHANTABILITY, NONINFRINGEMENT, AND FITNESS FOR A PARTICULAR PURPOSE.
 * IN NO EVENT SHALL NVIDIA BE LIABLE FOR ANY SPECIAL, INDIRECT, INCIDENTAL,
 * OR CONSEQUENTIAL DAMAGES, OR ANY DAMAGES WHATSOEVER RESULTING FROM LOSS
 * OF USE, DATA OR PROFITS,  WHETHER IN AN ACTION OF CONTRACT, NEGLIGENCE
 * OR OTHER TORTIOUS ACTION,  ARISING OUT OF OR IN CONNECTION WITH THE USE
 * OR PERFORMANCE OF THIS SOURCE CODE.
 *
 * U.S. Government End Users.   This source code is a "commercial item" as
 * that term is defined at  48 C.F.R. 2.101 (OCT 1995), consisting  of
 * "commercial computer  software"  and "commercial computer software
 * documentation" as such terms are  used in 48 C.F.R. 12.212 (SEPT 1995)
 * and is provided to the U.S. Government only as a commercial end item.
 * Consistent with 48 C.F.R.12.212 and 48 C.F.R. 227.7202-1 through
 * 227.7202-4 (JUNE 1995), all U.S. Government End Users acquire the
 * source code with only those rights set forth herein.
 *
 * Any use of this source code in individual and commercial software must
 * include, in the user documentation and internal comments to the code,
 * the above Disclaimer and U.S. Government End Users Notice.
 */

/* device.c: per-device queries (identity, memory, utilisation, thermals, power, clocks, PCIe,
 * ECC). Each value comes from a gpuN.<key> of the scenario; an absent key is NOT_SUPPORTED. */
#include "fakenvml.h"

#include <stdio.h>
#include <string.h>

static bool absurd(const struct fake_call *c)
{
    unsigned long long v;
    return fake_dev_u64(c, &v, "absurd") && v != 0;
}

static nvmlReturn_t dev_string(const struct fake_call *c, const char *key, char *buf, unsigned int length)
{
    const char *v = fake_dev_str(c, "%s", key);
    return v != NULL ? fake_copy_str(buf, length, v) : NVML_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------------------------ */
/* Identity                                                                                   */

/* A MIG device is named like the real driver does: "<parent name> MIG <profile>". */
nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    const char *parent = fake_dev_str(&c, "name");
    if (parent == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (c.mig < 0)
        return fake_copy_str(name, length, parent);
    char buf[256];
    const char *profile = fake_dev_str(&c, "mig.%d.profile", c.mig);
    if (profile != NULL)
        snprintf(buf, sizeof buf, "%s MIG %s", parent, profile);
    else
        snprintf(buf, sizeof buf, "%s MIG", parent);
    return fake_copy_str(name, length, buf);
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    fake_uuid(c.s, c.gpu, c.mig, buf, sizeof buf);
    return fake_copy_str(uuid, length, buf);
}

nvmlReturn_t DECLDIR nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    DEVICE_PROLOGUE(device, 0);
    return dev_string(&c, "serial", serial, length);
}

nvmlReturn_t DECLDIR nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    DEVICE_PROLOGUE(device, 0);
    return dev_string(&c, "vbios_version", version, length);
}

nvmlReturn_t DECLDIR nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    DEVICE_PROLOGUE(device, 0);
    return dev_string(&c, "board_part_number", partNumber, length);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(minorNumber != NULL);
    if (fake_dev_str(&c, "minor_number") == NULL) {
        *minorNumber = (unsigned)c.gpu;
        return NVML_SUCCESS;
    }
    return fake_uint(&c, minorNumber, "minor_number");
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(index != NULL);
    *index = (unsigned)c.gpu;
    return NVML_SUCCESS;
}

/* The legacy (v1) struct ended after pciDeviceId, so only those fields are written for it. */
static void fill_pci(const struct fake_call *c, nvmlPciInfo_t *pci, bool legacy)
{
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned domain = 0, bus = 0, dev = 0, function = 0;
    fake_pci_bus_id(c->s, c->gpu, bus_id, sizeof bus_id);
    fake_parse_bus_id(bus_id, &domain, &bus, &dev, &function);
    unsigned long long device_id = 0x233010DEull, subsystem_id = 0; /* H100 SXM5, NVIDIA vendor id */
    fake_dev_u64(c, &device_id, "pci.device_id");
    fake_dev_u64(c, &subsystem_id, "pci.subsystem_id");
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, domain & 0xFFFFu,
             bus & 0xFFu, dev & 0xFFu);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = (unsigned)device_id;
    if (!legacy) {
        pci->pciSubSystemId = (unsigned)subsystem_id;
        snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    }
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pci != NULL);
    fill_pci(&c, pci, false);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pci != NULL);
    fill_pci(&c, pci, false);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pci != NULL);
    fill_pci(&c, pci, true);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */

/* Scenario memory.used has the v2 meaning (without reserved). A MIG device has no reserved part. */
static nvmlReturn_t memory_values(const struct fake_call *c, unsigned long long *total, unsigned long long *reserved,
                                  unsigned long long *used, unsigned long long *free_)
{
    *reserved = 0;
    if (c->mig >= 0) {
        if (!fake_dev_u64(c, total, "mig.%d.memory.total", c->mig) ||
            !fake_dev_u64(c, used, "mig.%d.memory.used", c->mig))
            return NVML_ERROR_NOT_SUPPORTED;
        *free_ = *total > *used ? *total - *used : 0;
        return NVML_SUCCESS;
    }
    if (!fake_dev_u64(c, total, "memory.total") || !fake_dev_u64(c, used, "memory.used"))
        return NVML_ERROR_NOT_SUPPORTED;
    fake_dev_u64(c, reserved, "memory.reserved");
    if (!fake_dev_u64(c, free_, "memory.free"))
        *free_ = *total > *used + *reserved ? *total - *used - *reserved : 0;
    return NVML_SUCCESS;
}

/* v1: used includes the reserved memory. */
nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(memory != NULL);
    unsigned long long total, reserved, used, free_;
    nvmlReturn_t r = memory_values(&c, &total, &reserved, &used, &free_);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->used = used + reserved;
    memory->free = free_;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_PROLOGUE(device, FAKE_MIG_OK);
    REQUIRE(memory != NULL);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, reserved, used, free_;
    nvmlReturn_t r = memory_values(&c, &total, &reserved, &used, &free_);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = free_;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(bar1Memory != NULL);
    unsigned long long total, used;
    if (!fake_dev_u64(&c, &total, "bar1.total") || !fake_dev_u64(&c, &used, "bar1.used"))
        return NVML_ERROR_NOT_SUPPORTED;
    bar1Memory->bar1Total = total;
    bar1Memory->bar1Used = used;
    bar1Memory->bar1Free = total > used ? total - used : 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Utilisation                                                                                */

nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(utilization != NULL);
    if (absurd(&c)) {
        utilization->gpu = utilization->memory = FAKE_ABSURD_UTILIZATION;
        return NVML_SUCCESS;
    }
    unsigned gpu, mem;
    if (fake_uint(&c, &gpu, "utilization.gpu") != NVML_SUCCESS ||
        fake_uint(&c, &mem, "utilization.memory") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = gpu;
    utilization->memory = mem;
    return NVML_SUCCESS;
}

/* Real drivers report a sampling period of about 167 ms for the video engines. */
static nvmlReturn_t codec_utilization(const struct fake_call *c, const char *key, unsigned int *utilization,
                                      unsigned int *samplingPeriodUs)
{
    REQUIRE(utilization != NULL && samplingPeriodUs != NULL);
    if (absurd(c))
        *utilization = FAKE_ABSURD_UTILIZATION;
    else if (fake_uint(c, utilization, key) != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    DEVICE_PROLOGUE(device, 0);
    return codec_utilization(&c, "utilization.encoder", utilization, samplingPeriodUs);
}

nvmlReturn_t DECLDIR nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    DEVICE_PROLOGUE(device, 0);
    return codec_utilization(&c, "utilization.decoder", utilization, samplingPeriodUs);
}

/* ------------------------------------------------------------------------------------------ */
/* Thermals and fans                                                                          */

static nvmlReturn_t gpu_temperature(const struct fake_call *c, unsigned int *temp)
{
    if (absurd(c)) {
        *temp = FAKE_ABSURD_TEMPERATURE;
        return NVML_SUCCESS;
    }
    return fake_uint(c, temp, "temperature.gpu");
}

nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(temp != NULL && sensorType == NVML_TEMPERATURE_GPU);
    return gpu_temperature(&c, temp);
}

nvmlReturn_t DECLDIR nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(temperature != NULL);
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    REQUIRE(temperature->sensorType == NVML_TEMPERATURE_GPU);
    unsigned value;
    nvmlReturn_t r = gpu_temperature(&c, &value);
    if (r == NVML_SUCCESS)
        temperature->temperature = (int)value;
    return r;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                                       unsigned int *temp)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(temp != NULL);
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        return fake_uint(&c, temp, "temperature.shutdown");
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        return fake_uint(&c, temp, "temperature.slowdown");
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
        return fake_uint(&c, temp, "temperature.max_operating");
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        return fake_uint(&c, temp, "temperature.mem_max");
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* Thermal margin: degrees C below the slowdown limit, signed (negative past it). */
nvmlReturn_t DECLDIR nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(marginTempInfo != NULL);
    if (marginTempInfo->version != nvmlMarginTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    double value;
    if (!fake_dev_f64(&c, &value, "temperature.margin"))
        return NVML_ERROR_NOT_SUPPORTED;
    marginTempInfo->marginTemperature = (int)value;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, speed, "fan_speed");
}

/* The fake has one fan, present when fan_speed is. */
nvmlReturn_t DECLDIR nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    DEVICE_PROLOGUE(device, 0);
    if (fake_dev_str(&c, "fan_speed") == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    REQUIRE(fan == 0);
    return fake_uint(&c, speed, "fan_speed");
}

nvmlReturn_t DECLDIR nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(numFans != NULL);
    if (fake_dev_str(&c, "fan_speed") == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *numFans = 1;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Power                                                                                      */

nvmlReturn_t DECLDIR nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, power, "power.usage");
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, limit, "power.limit");
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, defaultLimit, "power.default_limit");
}

nvmlReturn_t DECLDIR nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, limit, "power.enforced_limit");
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                  unsigned int *maxLimit)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(minLimit != NULL && maxLimit != NULL);
    unsigned lo, hi;
    if (fake_uint(&c, &lo, "power.min_limit") != NVML_SUCCESS || fake_uint(&c, &hi, "power.max_limit") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *minLimit = lo;
    *maxLimit = hi;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(energy != NULL);
    return fake_energy(&c, energy); /* samples.c: `energy` plus the integral of power since init */
}

/* ------------------------------------------------------------------------------------------ */
/* Clocks and performance                                                                     */

static const char *clock_name(nvmlClockType_t type)
{
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
        return "graphics";
    case NVML_CLOCK_SM:
        return "sm";
    case NVML_CLOCK_MEM:
        return "memory";
    case NVML_CLOCK_VIDEO:
        return "video";
    default:
        return NULL;
    }
}

static nvmlReturn_t clock_value(const struct fake_call *c, const char *family, nvmlClockType_t type,
                                unsigned int *mhz)
{
    const char *name = clock_name(type);
    REQUIRE(name != NULL && mhz != NULL);
    char key[64];
    snprintf(key, sizeof key, "%s.%s", family, name);
    return fake_uint(c, mhz, key);
}

nvmlReturn_t DECLDIR nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_PROLOGUE(device, 0);
    return clock_value(&c, "clock", type, clock);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_PROLOGUE(device, 0);
    return clock_value(&c, "max_clock", type, clock);
}

nvmlReturn_t DECLDIR nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int *clockMHz)
{
    DEVICE_PROLOGUE(device, 0);
    return clock_value(&c, "app_clock", clockType, clockMHz);
}

nvmlReturn_t DECLDIR nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                        unsigned int *clockMHz)
{
    DEVICE_PROLOGUE(device, 0);
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT:
        return clock_value(&c, "clock", clockType, clockMHz);
    case NVML_CLOCK_ID_APP_CLOCK_TARGET:
        return clock_value(&c, "app_clock", clockType, clockMHz);
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        return clock_value(&c, "max_clock", clockType, clockMHz);
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t DECLDIR nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pState != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "pstate") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *pState = v <= 15 ? (nvmlPstates_t)v : NVML_PSTATE_UNKNOWN;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(mode != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "persistence_mode") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* Auto-boosted clocks: the current setting (auto_boost) and the default (auto_boost.default, else the current). */
nvmlReturn_t DECLDIR nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device, nvmlEnableState_t *isEnabled,
                                                           nvmlEnableState_t *defaultIsEnabled)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(isEnabled != NULL && defaultIsEnabled != NULL);
    unsigned v, d;
    if (fake_uint(&c, &v, "auto_boost") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fake_uint(&c, &d, "auto_boost.default") != NVML_SUCCESS)
        d = v;
    *isEnabled = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *defaultIsEnabled = d ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(mode != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "compute_mode") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = (nvmlComputeMode_t)v;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(pVirtualMode != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "virtualization_mode") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *pVirtualMode = (nvmlGpuVirtualizationMode_t)v;
    return NVML_SUCCESS;
}

/* Both the current and the pre-12.x "throttle" names read clock_event_reasons. */
nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_ull(&c, clocksEventReasons, "clock_event_reasons");
}

nvmlReturn_t DECLDIR nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                               unsigned long long *clocksThrottleReasons)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_ull(&c, clocksThrottleReasons, "clock_event_reasons");
}

nvmlReturn_t DECLDIR nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                              unsigned long long *supportedClocksEventReasons)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(supportedClocksEventReasons != NULL);
    *supportedClocksEventReasons = nvmlClocksEventReasonAll;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                                 unsigned long long *supportedClocksThrottleReasons)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(supportedClocksThrottleReasons != NULL);
    *supportedClocksThrottleReasons = nvmlClocksEventReasonAll;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
                                                  nvmlViolationTime_t *violTime)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(violTime != NULL);
    const char *key;
    switch (perfPolicyType) {
    case NVML_PERF_POLICY_POWER:
        key = "violation.power";
        break;
    case NVML_PERF_POLICY_THERMAL:
        key = "violation.thermal";
        break;
    case NVML_PERF_POLICY_SYNC_BOOST:
        key = "violation.sync_boost";
        break;
    case NVML_PERF_POLICY_BOARD_LIMIT:
        key = "violation.board_limit";
        break;
    case NVML_PERF_POLICY_LOW_UTILIZATION:
        key = "violation.low_util";
        break;
    case NVML_PERF_POLICY_RELIABILITY:
        key = "violation.reliability";
        break;
    case NVML_PERF_POLICY_TOTAL_APP_CLOCKS:
        key = "violation.app_clocks";
        break;
    case NVML_PERF_POLICY_TOTAL_BASE_CLOCKS:
        key = "violation.base_clocks";
        break;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
    unsigned long long ns;
    if (!fake_dev_u64(&c, &ns, "%s", key))
        return NVML_ERROR_NOT_SUPPORTED;
    violTime->referenceTime = fake_now_us();
    violTime->violationTime = ns;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* PCIe                                                                                       */

nvmlReturn_t DECLDIR nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                 unsigned int *value)
{
    DEVICE_PROLOGUE(device, 0);
    switch (counter) {
    case NVML_PCIE_UTIL_TX_BYTES:
        return fake_uint(&c, value, "pcie.tx");
    case NVML_PCIE_UTIL_RX_BYTES:
        return fake_uint(&c, value, "pcie.rx");
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t DECLDIR nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, currLinkGen, "pcie.link_gen");
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, maxLinkGen, "pcie.max_link_gen");
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, maxLinkGenDevice, "pcie.max_link_gen");
}

nvmlReturn_t DECLDIR nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, currLinkWidth, "pcie.link_width");
}

nvmlReturn_t DECLDIR nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, maxLinkWidth, "pcie.max_link_width");
}

nvmlReturn_t DECLDIR nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    DEVICE_PROLOGUE(device, 0);
    return fake_uint(&c, value, "pcie.replay_counter");
}

/* ------------------------------------------------------------------------------------------ */
/* ECC, row remapping, page retirement                                                        */

nvmlReturn_t DECLDIR nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(current != NULL && pending != NULL);
    unsigned v, next;
    if (fake_uint(&c, &v, "ecc.mode") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fake_uint(&c, &next, "ecc.pending") != NVML_SUCCESS)
        next = v; /* no change pending */
    *current = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = next ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                 nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    DEVICE_PROLOGUE(device, 0);
    const char *counter = counterType == NVML_VOLATILE_ECC    ? "volatile"
                          : counterType == NVML_AGGREGATE_ECC ? "aggregate"
                                                              : NULL;
    const char *kind = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED     ? "corrected"
                       : errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? "uncorrected"
                                                                         : NULL;
    REQUIRE(counter != NULL && kind != NULL && eccCounts != NULL);
    return fake_dev_u64(&c, eccCounts, "ecc.%s.%s", counter, kind) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* ECC errors by memory location: ecc.<counter>.<type>.<location>, NOT_SUPPORTED without it. */
static const char *const k_ecc_locations[] = {"l1_cache",      "l2_cache",       "device_memory", "register_file",
                                              "texture_memory", "shared_memory", "cbu",           "sram"};

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                     nvmlEccCounterType_t counterType, nvmlMemoryLocation_t locationType,
                                                     unsigned long long *count)
{
    DEVICE_PROLOGUE(device, 0);
    const char *counter = counterType == NVML_VOLATILE_ECC    ? "volatile"
                          : counterType == NVML_AGGREGATE_ECC ? "aggregate"
                                                              : NULL;
    const char *kind = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED     ? "corrected"
                       : errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? "uncorrected"
                                                                         : NULL;
    REQUIRE(counter != NULL && kind != NULL && count != NULL);
    REQUIRE((unsigned)locationType < NVML_MEMORY_LOCATION_COUNT);
    return fake_dev_u64(&c, count, "ecc.%s.%s.%s", counter, kind, k_ecc_locations[locationType])
               ? NVML_SUCCESS
               : NVML_ERROR_NOT_SUPPORTED;
}

/* SRAM ECC status (Ampere and later; root only on a real driver: play NO_PERMISSION with
 * gpuN.error.nvmlDeviceGetSramEccErrorStatus): ecc.sram.threshold_exceeded is bThresholdExceeded
 * (0 or 1), the error counts come from ecc.aggregate.uncorrected.sram and the volatile and corrected
 * SRAM keys where given (0 otherwise); absent key: NOT_SUPPORTED. */
nvmlReturn_t DECLDIR nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(status != NULL);
    if (status->version != nvmlEccSramErrorStatus_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned exceeded;
    if (fake_uint(&c, &exceeded, "ecc.sram.threshold_exceeded") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long count = 0;
    status->aggregateUncSecDed = fake_dev_u64(&c, &count, "ecc.aggregate.uncorrected.sram") ? count : 0;
    count = 0;
    status->volatileUncSecDed = fake_dev_u64(&c, &count, "ecc.volatile.uncorrected.sram") ? count : 0;
    count = 0;
    status->aggregateCor = fake_dev_u64(&c, &count, "ecc.aggregate.corrected.sram") ? count : 0;
    count = 0;
    status->volatileCor = fake_dev_u64(&c, &count, "ecc.volatile.corrected.sram") ? count : 0;
    status->bThresholdExceeded = exceeded ? 1 : 0;
    return NVML_SUCCESS;
}

/* Row remapper histogram: banks by spare rows left; all five row_remapper.* keys or NOT_SUPPORTED. */
nvmlReturn_t DECLDIR nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(values != NULL);
    unsigned v[5];
    if (fake_uint(&c, &v[0], "row_remapper.max") != NVML_SUCCESS ||
        fake_uint(&c, &v[1], "row_remapper.high") != NVML_SUCCESS ||
        fake_uint(&c, &v[2], "row_remapper.partial") != NVML_SUCCESS ||
        fake_uint(&c, &v[3], "row_remapper.low") != NVML_SUCCESS ||
        fake_uint(&c, &v[4], "row_remapper.none") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    values->max = v[0];
    values->high = v[1];
    values->partial = v[2];
    values->low = v[3];
    values->none = v[4];
    return NVML_SUCCESS;
}

/* inforom.checksum: the configuration checksum; absent: NOT_SUPPORTED. */
nvmlReturn_t DECLDIR nvmlDeviceGetInforomConfigurationChecksum(nvmlDevice_t device, unsigned int *checksum)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(checksum != NULL);
    return fake_uint(&c, checksum, "inforom.checksum");
}

/* inforom.valid: non-zero SUCCESS, 0 CORRUPTED_INFOROM; absent: NOT_SUPPORTED. */
nvmlReturn_t DECLDIR nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    DEVICE_PROLOGUE(device, 0);
    unsigned valid;
    if (fake_uint(&c, &valid, "inforom.valid") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    return valid ? NVML_SUCCESS : NVML_ERROR_CORRUPTED_INFOROM;
}

/* pending and failure default to 0 when the two counts are given. */
nvmlReturn_t DECLDIR nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                               unsigned int *isPending, unsigned int *failureOccurred)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(corrRows != NULL && uncRows != NULL && isPending != NULL && failureOccurred != NULL);
    unsigned corr, unc, pending = 0, failure = 0;
    if (fake_uint(&c, &corr, "remapped_rows.correctable") != NVML_SUCCESS ||
        fake_uint(&c, &unc, "remapped_rows.uncorrectable") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    fake_uint(&c, &pending, "remapped_rows.pending");
    fake_uint(&c, &failure, "remapped_rows.failure");
    *corrRows = corr;
    *uncRows = unc;
    *isPending = pending;
    *failureOccurred = failure;
    return NVML_SUCCESS;
}

/* Two-call pattern: a count smaller than the number of pages gets INSUFFICIENT_SIZE and the
 * number. Addresses and timestamps are made up but stable. */
static nvmlReturn_t retired_pages(const struct fake_call *c, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps)
{
    const char *key = cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ? "retired_pages.single_bit"
                      : cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR         ? "retired_pages.double_bit"
                                                                                         : NULL;
    REQUIRE(key != NULL && pageCount != NULL);
    unsigned n;
    if (fake_uint(c, &n, key) != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    if (*pageCount < n) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    REQUIRE(n == 0 || addresses != NULL);
    for (unsigned i = 0; i < n; i++) {
        addresses[i] = ((unsigned long long)(cause + 1) << 32) | ((unsigned long long)i << 12);
        if (timestamps != NULL)
            timestamps[i] = 1700000000ull + i;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                               unsigned int *pageCount, unsigned long long *addresses)
{
    DEVICE_PROLOGUE(device, 0);
    return retired_pages(&c, cause, pageCount, addresses, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                  unsigned int *pageCount, unsigned long long *addresses,
                                                  unsigned long long *timestamps)
{
    DEVICE_PROLOGUE(device, 0);
    return retired_pages(&c, cause, pageCount, addresses, timestamps);
}

nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(isPending != NULL);
    unsigned v;
    if (fake_uint(&c, &v, "retired_pages.pending") != NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    *isPending = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
