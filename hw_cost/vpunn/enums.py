"""VPUNN enumerations, with the C++ identifiers as names and the library's current order as values.

Descriptor interfaces encode these by *name* into their own (older) enum orders; see `descriptors.py`.
"""
from __future__ import annotations

from enum import IntEnum
from collections import namedtuple

from .errors import VpunnError

__all__ = ["int_codes", "VPUDevice", "Operation", "DataType", "Layout", "ExecutionMode", "ActivationFunction",
           "Swizzling",
           "ISIStrategy", "VPUTilingStrategy", "DMADirection", "NumDMAEngine", "parse_enum", "DTYPE_BITS",
           "DEV", "DTYPE", "ISI", "LAYOUT", "MODE", "OP", "SWZ", "TILING"]


class VPUDevice(IntEnum):
    VPU_2_0 = 0
    VPU_2_1 = 1
    VPU_2_7 = 2
    VPU_4_0 = 3
    NPU_5_0 = 4
    NPU_RESERVED = 5
    NPU_RESERVED_1 = 6


class Operation(IntEnum):
    CONVOLUTION = 0
    DW_CONVOLUTION = 1
    ELTWISE = 2
    MAXPOOL = 3
    AVEPOOL = 4
    CM_CONVOLUTION = 5
    LAYER_NORM = 6
    ELTWISE_MUL = 7


class DataType(IntEnum):
    UINT8 = 0
    INT8 = 1
    FLOAT16 = 2
    BFLOAT16 = 3
    BF8 = 4
    HF8 = 5
    UINT4 = 6
    INT4 = 7
    UINT2 = 8
    INT2 = 9
    UINT1 = 10
    INT1 = 11
    INT32 = 12
    FLOAT32 = 13
    UINT16 = 14
    INT16 = 15
    FLOAT4 = 16


#: bits per element of each DataType, indexed by value
DTYPE_BITS = (8, 8, 16, 16, 8, 8, 4, 4, 2, 2, 1, 1, 32, 32, 16, 16, 4)


class Layout(IntEnum):
    ZMAJOR = 0
    CMAJOR = 1
    XYZ = 2
    XZY = 3
    YXZ = 4
    YZX = 5
    ZXY = 6
    ZYX = 7
    INVALID = 8


class ExecutionMode(IntEnum):
    VECTOR = 0
    MATRIX = 1
    VECTOR_FP16 = 2
    CUBOID_16x16 = 3
    CUBOID_8x16 = 4
    CUBOID_4x16 = 5


class ActivationFunction(IntEnum):
    NONE = 0
    RELU = 1
    LRELU = 2
    ADD = 3
    SUB = 4
    MULT = 5


class Swizzling(IntEnum):
    KEY_0 = 0
    KEY_1 = 1
    KEY_2 = 2
    KEY_3 = 3
    KEY_4 = 4
    KEY_5 = 5


class ISIStrategy(IntEnum):
    CLUSTERING = 0
    SPLIT_OVER_H = 1
    SPLIT_OVER_K = 2


class VPUTilingStrategy(IntEnum):
    """Inter-tile strategies of the layer model, with the runtime's values; AUTO_MIN (ours) is the minimum over the
    strategies of the device."""

    NONE = 0
    SOH_Overlapped = 1
    SOK = 2
    SOW = 3
    SOHW = 4
    SOHK = 5
    SOHO_K_SWITCH = 7
    AUTO_MIN = 100


class NumDMAEngine(IntEnum):
    Num_Engine_1 = 0
    Num_Engine_2 = 1


class DMADirection(IntEnum):
    """In the order of DMA descriptor interface 1."""

    DDR2CMX = 0
    CMX2CMX = 1
    CMX2DDR = 2
    DDR2DDR = 3


def int_codes(enum_cls: type[IntEnum]) -> tuple:
    """The members as plain ints, in a named tuple (numpy looks up array hooks on an IntEnum's class at every
    operation; numba reads a global named tuple as constants)."""
    return namedtuple(f"{enum_cls.__name__}Codes", [m.name for m in enum_cls])(*map(int, enum_cls))


#: the enums' members as plain ints (`int_codes`), for the modules that compute with them
DEV = int_codes(VPUDevice)
DTYPE = int_codes(DataType)
ISI = int_codes(ISIStrategy)
LAYOUT = int_codes(Layout)
MODE = int_codes(ExecutionMode)
OP = int_codes(Operation)
SWZ = int_codes(Swizzling)
TILING = int_codes(VPUTilingStrategy)


def parse_enum(enum_cls: type[IntEnum], text, what: str = "", aliases: dict[str, str] | None = None) -> IntEnum:
    """The member of `enum_cls` named `text` (an existing member passes through); VpunnError names the field."""
    if isinstance(text, enum_cls):
        return text
    key = str(text).strip()
    if aliases and key in aliases:
        key = aliases[key]
    try:
        return enum_cls[key]
    except KeyError:
        where = f"{what}: " if what else ""
        raise VpunnError(f"{where}unknown {enum_cls.__name__} {key!r}; valid: "
                         + ", ".join(m.name for m in enum_cls)) from None
