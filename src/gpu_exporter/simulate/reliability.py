"""Per-device entry points for the PCIe link (throughput in KB/s, generation, width, replays) and
memory errors (ECC mode and counts, row remapping, retired pages)."""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

CORRUPTED_INFOROM = 14  # NVML_ERROR_CORRUPTED_INFOROM
UNREPAIRABLE_VERSION = 0x1000008  # nvmlUnrepairableMemory_v1: sizeof {version, flag} | 1 << 24
SRAM_STATUS_VERSION = 0x1000068  # nvmlEccSramErrorStatus_v1: sizeof the v1 struct (104) | 1 << 24


@device("nvmlDeviceGetPcieThroughput")
def pcie_throughput(c: Call, counter: Any, out: Any) -> int:
    key = {0: "pcie.tx", 1: "pcie.rx"}.get(abi.number(counter))
    return errors.INVALID_ARGUMENT if key is None else c.out(out, key)


@device("nvmlDeviceGetCurrPcieLinkGeneration")
def pcie_gen(c: Call, out: Any) -> int:
    return c.out(out, "pcie.link_gen")


@device("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
def pcie_max_gen(c: Call, out: Any) -> int:
    return c.out(out, "pcie.max_link_gen")


@device("nvmlDeviceGetCurrPcieLinkWidth")
def pcie_width(c: Call, out: Any) -> int:
    return c.out(out, "pcie.link_width")


@device("nvmlDeviceGetMaxPcieLinkWidth")
def pcie_max_width(c: Call, out: Any) -> int:
    return c.out(out, "pcie.max_link_width")


@device("nvmlDeviceGetPcieReplayCounter")
def pcie_replay(c: Call, out: Any) -> int:
    return c.out(out, "pcie.replay_counter")


@device("nvmlDeviceGetEccMode")
def ecc_mode(c: Call, current: Any, pending: Any) -> int:
    if abi.target(current) is None or abi.target(pending) is None:
        return errors.INVALID_ARGUMENT
    value = c.u64("ecc.mode")
    if value is None:
        return errors.NOT_SUPPORTED
    after_reboot = c.u64("ecc.pending")  # absent: no change pending
    abi.put(current, 1 if value else 0)
    return abi.put(pending, 1 if (value if after_reboot is None else after_reboot) else 0)


@device("nvmlDeviceGetTotalEccErrors")
def ecc_errors(c: Call, error_type: Any, counter_type: Any, out: Any) -> int:
    counter = {0: "volatile", 1: "aggregate"}.get(abi.number(counter_type))
    kind = {0: "corrected", 1: "uncorrected"}.get(abi.number(error_type))
    if counter is None or kind is None or abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return c.out(out, f"ecc.{counter}.{kind}")


#: nvmlMemoryLocation_t 0-7 → the key's last part (``ecc.<counter>.<type>.<location>``).
ECC_LOCATIONS = ("l1_cache", "l2_cache", "device_memory", "register_file", "texture_memory", "shared_memory",
                 "cbu", "sram")  # fmt: skip


@device("nvmlDeviceGetMemoryErrorCounter")
def memory_errors(c: Call, error_type: Any, counter_type: Any, location: Any, out: Any) -> int:
    """ECC errors in one memory location: ``ecc.<counter>.<type>.<location>``."""
    counter = {0: "volatile", 1: "aggregate"}.get(abi.number(counter_type))
    kind = {0: "corrected", 1: "uncorrected"}.get(abi.number(error_type))
    where = abi.number(location)
    if counter is None or kind is None or not 0 <= where < len(ECC_LOCATIONS) or abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return c.out(out, f"ecc.{counter}.{kind}.{ECC_LOCATIONS[where]}")


@device("nvmlDeviceGetSramEccErrorStatus")
def sram_status(c: Call, out: Any) -> int:
    """SRAM ECC status (root only on a real driver): ``ecc.sram.threshold_exceeded`` is bThresholdExceeded,
    the SRAM counts from the ``ecc.<counter>.<type>.sram`` keys (0 without them); absent: NOT_SUPPORTED."""
    status = abi.target(out)
    if status is None:
        return errors.INVALID_ARGUMENT
    if status.version != SRAM_STATUS_VERSION:
        return errors.ARGUMENT_VERSION_MISMATCH
    exceeded = c.u64("ecc.sram.threshold_exceeded")
    if exceeded is None:
        return errors.NOT_SUPPORTED
    for member, key in (
        ("aggregateUncSecDed", "aggregate.uncorrected"),
        ("volatileUncSecDed", "volatile.uncorrected"),
        ("aggregateCor", "aggregate.corrected"),
        ("volatileCor", "volatile.corrected"),
    ):
        setattr(status, member, c.u64(f"ecc.{key}.sram") or 0)
    status.bThresholdExceeded = 1 if exceeded else 0
    return errors.SUCCESS


@device("nvmlDeviceGetRowRemapperHistogram")
def row_remapper_histogram(c: Call, out: Any) -> int:
    """Banks by spare rows left: every one of ``row_remapper.max/high/partial/low/none``, else NOT_SUPPORTED."""
    values = abi.target(out)
    if values is None:
        return errors.INVALID_ARGUMENT
    names = ("max", "high", "partial", "low", "none")
    counts = [c.u64(f"row_remapper.{name}") for name in names]
    if any(count is None for count in counts):
        return errors.NOT_SUPPORTED
    for name, count in zip(names, counts, strict=True):
        setattr(values, name, (count or 0) & 0xFFFFFFFF)
    return errors.SUCCESS


@device("nvmlDeviceGetInforomConfigurationChecksum")
def inforom_checksum(c: Call, out: Any) -> int:
    """``inforom.checksum``, the inforom's configuration checksum."""
    return c.out(out, "inforom.checksum")


@device("nvmlDeviceValidateInforom")
def inforom_valid(c: Call) -> int:
    """``inforom.valid``: non-zero SUCCESS, 0 CORRUPTED_INFOROM, absent NOT_SUPPORTED."""
    valid = c.u64("inforom.valid")
    if valid is None:
        return errors.NOT_SUPPORTED
    return errors.SUCCESS if valid else CORRUPTED_INFOROM


@device("nvmlDeviceGetRemappedRows")
def remapped_rows(c: Call, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
    if any(abi.target(arg) is None for arg in (corr, unc, pending, failure)):
        return errors.INVALID_ARGUMENT
    correctable, uncorrectable = c.u64("remapped_rows.correctable"), c.u64("remapped_rows.uncorrectable")
    if correctable is None or uncorrectable is None:
        return errors.NOT_SUPPORTED
    abi.put(corr, correctable)
    abi.put(unc, uncorrectable)
    abi.put(pending, c.u64("remapped_rows.pending") or 0)
    return abi.put(failure, c.u64("remapped_rows.failure") or 0)


def _retired(c: Call, cause: Any, count: Any, addresses: Any, stamps: Any) -> int:
    """Two-call pattern; made-up but stable addresses and timestamps."""
    number, addresses, stamps = abi.number(cause), abi.target(addresses), abi.target(stamps)
    key = {0: "retired_pages.single_bit", 1: "retired_pages.double_bit"}.get(number)
    if key is None or abi.target(count) is None:
        return errors.INVALID_ARGUMENT
    pages = c.u64(key)
    if pages is None:
        return errors.NOT_SUPPORTED
    pages &= 0xFFFFFFFF
    if abi.target(count).value < pages:
        abi.put(count, pages)
        return errors.INSUFFICIENT_SIZE
    if pages and addresses is None:
        return errors.INVALID_ARGUMENT
    for i in range(pages):
        addresses[i] = ((number + 1) << 32) | (i << 12)
        if stamps is not None:
            stamps[i] = 1700000000 + i
    return abi.put(count, pages)


@device("nvmlDeviceGetRetiredPages")
def retired_pages(c: Call, cause: Any, count: Any, addresses: Any) -> int:
    return _retired(c, cause, count, addresses, None)


@device("nvmlDeviceGetRetiredPages_v2")
def retired_pages_v2(c: Call, cause: Any, count: Any, addresses: Any, stamps: Any = None) -> int:
    return _retired(c, cause, count, addresses, stamps)


@device("nvmlDeviceGetRetiredPagesPendingStatus")
def retired_pending(c: Call, out: Any) -> int:
    return c.flag(out, "retired_pages.pending")


@device("nvmlDeviceGetUnrepairableMemoryFlag_v1")
def unrepairable_memory(c: Call, status: Any) -> int:
    """``memory.unrepairable`` (0/1; absent NOT_SUPPORTED) into the two-word {version, flag} struct, the
    version checked; ``memory.unrepairable_layout = v1_flag_only`` plays a driver of nvml.h 13.5's
    one-word struct, which writes the flag over the version word."""
    target = abi.target(status)
    if target is None:
        return errors.INVALID_ARGUMENT
    flag = c.u64("memory.unrepairable")
    if flag is None:
        return errors.NOT_SUPPORTED
    words = (ctypes.c_uint * 2).from_address(ctypes.addressof(target))
    if c.text("memory.unrepairable_layout") == "v1_flag_only":
        words[0] = flag & 0xFFFFFFFF
        return errors.SUCCESS
    if words[0] != UNREPAIRABLE_VERSION:
        return errors.ARGUMENT_VERSION_MISMATCH
    words[1] = flag & 0xFFFFFFFF
    return errors.SUCCESS
