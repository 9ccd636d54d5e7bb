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

/* identity.c: identity read once at discovery beyond names and bus ids (brand, inforom versions,
 * CUDA compute capability) and the P2P status between two GPUs. Each comes from a gpuN.<key> of the
 * scenario; an absent key is NOT_SUPPORTED. */
#include "fakenvml.h"

#include <stdio.h>

nvmlReturn_t DECLDIR nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(type != NULL);
    unsigned long long v;
    if (!fake_dev_u64(&c, &v, "brand"))
        return NVML_ERROR_NOT_SUPPORTED;
    *type = (nvmlBrandType_t)v;
    return NVML_SUCCESS;
}

static const char *inforom_key(nvmlInforomObject_t object)
{
    switch (object) {
    case NVML_INFOROM_OEM:
        return "inforom.oem";
    case NVML_INFOROM_ECC:
        return "inforom.ecc";
    case NVML_INFOROM_POWER:
        return "inforom.power";
    default:
        return NULL;
    }
}

nvmlReturn_t DECLDIR nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
                                                 unsigned int length)
{
    DEVICE_PROLOGUE(device, 0);
    const char *key = inforom_key(object);
    if (key == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = fake_dev_str(&c, "%s", key);
    return v != NULL ? fake_copy_str(version, length, v) : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t DECLDIR nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    DEVICE_PROLOGUE(device, 0);
    const char *v = fake_dev_str(&c, "inforom.image");
    return v != NULL ? fake_copy_str(version, length, v) : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(major != NULL && minor != NULL);
    unsigned long long a, b;
    if (!fake_dev_u64(&c, &a, "compute_capability.major") || !fake_dev_u64(&c, &b, "compute_capability.minor"))
        return NVML_ERROR_NOT_SUPPORTED;
    *major = (int)a;
    *minor = (int)b;
    return NVML_SUCCESS;
}

/* gpuN.gpm_supported (0/1): isSupportedDevice of nvmlGpmSupport_t version 1; absent: NOT_SUPPORTED. */
nvmlReturn_t DECLDIR nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    DEVICE_PROLOGUE(device, 0);
    REQUIRE(gpmSupport != NULL);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long v;
    if (!fake_dev_u64(&c, &v, "gpm_supported"))
        return NVML_ERROR_NOT_SUPPORTED;
    gpmSupport->isSupportedDevice = v != 0;
    return NVML_SUCCESS;
}

/* gpuN.p2p.M.nvlink: the nvmlGpuP2PStatus_t of GPU N towards GPU M for NVML_P2P_CAPS_INDEX_NVLINK;
 * the other capability indexes are NOT_SUPPORTED. The faults of GPU N apply. */
nvmlReturn_t DECLDIR nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                            nvmlGpuP2PStatus_t *p2pStatus)
{
    DEVICE_PROLOGUE(device1, 0);
    REQUIRE(p2pStatus != NULL);
    int peer, peer_mig;
    fake_decode_handle(device2, &peer, &peer_mig);
    if (peer < 0 || peer_mig >= 0 || peer == c.gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!fake_device_present(c.s, (unsigned)peer, c.t))
        return NVML_ERROR_GPU_IS_LOST;
    if (p2pIndex != NVML_P2P_CAPS_INDEX_NVLINK)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long v;
    if (!fake_dev_u64(&c, &v, "p2p.%d.nvlink", peer))
        return NVML_ERROR_NOT_SUPPORTED;
    *p2pStatus = (nvmlGpuP2PStatus_t)v;
    return NVML_SUCCESS;
}
