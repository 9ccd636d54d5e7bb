"""Field values of the NVLink5 port counters, the NVLink data ECC total and the GPU's C2C link, as
the C fake answers them (tests/fakenvml/links.c): per-link counters read ``nvlink.L.<key>`` for
scopeId L, and for scopeId UINT_MAX the sum over the links (NVML's aggregate); the ECC total is the
sum of ``nvlink.L.ecc_errors``; the bit error rates read ``ber.symbol`` / ``ber.effective`` (NVML's
encoding) for scopeId UINT_MAX only; C2C fields read ``c2c.<key>`` whatever the scopeId. A missing key is
NOT_SUPPORTED. Field ids are ``NVML_FI_DEV_*`` of ``nvml.h``."""

from __future__ import annotations

from gpu_exporter.simulate import errors
from gpu_exporter.simulate.call import Call

ULL = 3  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
ALL_LINKS = 0xFFFFFFFF
#: NVLink5 counter field id → the per-link key (201-221; 235-250 are fec_history.B).
NVLINK5_KEYS: dict[int, str] = {
    201: "tx_packets", 202: "tx_bytes", 203: "rx_packets", 204: "rx_bytes", 206: "malformed_packet_errors",
    207: "buffer_overrun_errors", 208: "receive_errors", 209: "receive_remote_errors",
    210: "receive_general_errors", 211: "local_link_integrity_errors", 212: "transmit_discard_errors",
    213: "recovery_succeeded", 214: "recovery_failed", 215: "recovery_events", 221: "symbol_errors",
    219: "effective_errors",
    **{235 + b: f"fec_history.{b}" for b in range(16)},
}  # fmt: skip
NVLINK_ECC_TOTAL = 160
#: NVLink5 bit error rates (SYMBOL_BER 222, EFFECTIVE_BER 220) → key: NVML's encoded value, scopeId UINT_MAX only.
BER_KEYS: dict[int, str] = {222: "ber.symbol", 220: "ber.effective"}
#: C2C field id → key (170-172, 231-234).
C2C_KEYS: dict[int, str] = {
    170: "c2c.link_count", 171: "c2c.status", 172: "c2c.max_bandwidth", 231: "c2c.crc_errors",
    232: "c2c.replay_errors", 233: "c2c.replay_b2b_errors", 234: "c2c.power_state",
}  # fmt: skip


def _per_link(c: Call, scope: int, key: str) -> int | None:
    if scope != ALL_LINKS:
        return c.u64(f"nvlink.{scope}.{key}") if scope < 36 else None
    links = c.s.gpus[c.gpu].links if c.gpu in c.s.gpus else set()
    present = [value for value in (c.u64(f"nvlink.{link}.{key}") for link in sorted(links)) if value is not None]
    return sum(present) if present else None


def link_value(c: Call, field_id: int, scope: int) -> tuple[int, int, int] | None:
    """(return code, value type, value) when ``field_id`` is one of these fields, else None."""
    if field_id in NVLINK5_KEYS:
        value = _per_link(c, scope, NVLINK5_KEYS[field_id])
    elif field_id in BER_KEYS:
        value = c.u64(BER_KEYS[field_id]) if scope == ALL_LINKS else None
    elif field_id == NVLINK_ECC_TOTAL:
        value = _per_link(c, ALL_LINKS, "ecc_errors")
    elif field_id in C2C_KEYS:
        value = c.u64(C2C_KEYS[field_id])
    else:
        return None
    return (errors.NOT_SUPPORTED, ULL, 0) if value is None else (errors.SUCCESS, ULL, value)
