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


/* platform.c: where a GPU sits in an NVLink-switch system: its fabric registration (cluster, clique,
 * state, health) and its platform placement (chassis, slot, tray, host, module, IB GUID). Each comes from
 * gpuN.fabric.* and gpuN.platform.* keys of the scenario; without gpuN.fabric.state (resp.
 * gpuN.platform.chassis_serial) the call is NOT_SUPPORTED, the other keys default to 0. */
#include "fakenvml.h"

#include <string.h>

static unsigned long long key_or_zero(const struct fake_call *c, const char *key)
{
    unsigned long long v;
    return fake_dev_u64(c, &v, "%s", key) ? v : 0;
}

/* Version 2 (no health summary) and version 3 of nvmlGpuFabricInfoV_t. */
nvmlReturn_t DECLDIR nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(gpuFabricInfo != NULL);
    unsigned version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long state;
    if (!fake_dev_u64(&c, &state, "fabric.state"))
        return NVML_ERROR_NOT_SUPPORTED;
    memset(gpuFabricInfo->clusterUuid, 0, sizeof gpuFabricInfo->clusterUuid);
    gpuFabricInfo->state = (nvmlGpuFabricState_t)state;
    gpuFabricInfo->status = (nvmlReturn_t)key_or_zero(&c, "fabric.status");
    gpuFabricInfo->cliqueId = (unsigned int)key_or_zero(&c, "fabric.clique_id");
    gpuFabricInfo->healthMask = (unsigned int)key_or_zero(&c, "fabric.health_mask");
    if (version == nvmlGpuFabricInfo_v3)
        gpuFabricInfo->healthSummary = (unsigned char)key_or_zero(&c, "fabric.health_summary");
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *platformInfo)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(platformInfo != NULL);
    if (platformInfo->version != nvmlPlatformInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const char *serial = fake_dev_str(&c, "platform.chassis_serial");
    if (serial == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(platformInfo->ibGuid, 0, sizeof platformInfo->ibGuid);
    /* platform.ib_guid: the first 8 bytes, little-endian (Blackwell's 8-byte GUID; the rest stay 0). */
    unsigned long long guid = key_or_zero(&c, "platform.ib_guid");
    for (size_t i = 0; i < 8; i++)
        platformInfo->ibGuid[i] = (unsigned char)(guid >> (8 * i));
    memset(platformInfo->chassisSerialNumber, 0, sizeof platformInfo->chassisSerialNumber);
    size_t length = strlen(serial);
    if (length > sizeof platformInfo->chassisSerialNumber - 1)
        length = sizeof platformInfo->chassisSerialNumber - 1;
    memcpy(platformInfo->chassisSerialNumber, serial, length);
    platformInfo->slotNumber = (unsigned char)key_or_zero(&c, "platform.slot");
    platformInfo->trayIndex = (unsigned char)key_or_zero(&c, "platform.tray");
    platformInfo->hostId = (unsigned char)key_or_zero(&c, "platform.host_id");
    platformInfo->peerType = (unsigned char)key_or_zero(&c, "platform.peer_type");
    platformInfo->moduleId = (unsigned char)key_or_zero(&c, "platform.module_id");
    return NVML_SUCCESS;
}
