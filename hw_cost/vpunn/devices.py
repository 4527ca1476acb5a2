"""Architecture constants of the supported devices (docs/vpunn.md §7)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .enums import ExecutionMode, VPUDevice
from .errors import VpunnError

__all__ = ["DeviceConfig", "DEVICES", "LEGACY_DMA_OVERRIDES", "device_config"]


@dataclass(frozen=True)
class DeviceConfig:
    device: VPUDevice
    dpu_mhz: int
    cmx_mhz: int
    cmx_word_bytes: int
    cmx_read_ports: int
    dma_bytes_per_cycle: int
    dram_mbps: int
    macs_per_dpu: int
    fp16_ratio: int
    ppe_lanes: int
    input_channels_per_mac: int
    dpus_per_tile: int
    dma_ports: int
    dram_latency_cycles: int
    cmx_latency_cycles: int
    cmx_bytes: int
    owt_options: tuple[int, ...]
    execution_modes: tuple[ExecutionMode, ...]


_VPU_4_0 = DeviceConfig(
    device=VPUDevice.VPU_4_0, dpu_mhz=1700, cmx_mhz=971, cmx_word_bytes=32, cmx_read_ports=8,
    dma_bytes_per_cycle=64, dram_mbps=136000, macs_per_dpu=2048, fp16_ratio=2, ppe_lanes=64,
    input_channels_per_mac=8, dpus_per_tile=1, dma_ports=2,
    dram_latency_cycles=510,  # 300 ns at 1700 MHz
    cmx_latency_cycles=56,  # 32 CMX cycles (at 971 MHz on 4.0, 1114 MHz on 5.0), in DPU cycles
    cmx_bytes=1536 * 1024, owt_options=(1, 2, 3, 4, 5, 6, 7, 8),
    execution_modes=(ExecutionMode.CUBOID_16x16, ExecutionMode.CUBOID_8x16, ExecutionMode.CUBOID_4x16))

DEVICES: dict[VPUDevice, DeviceConfig] = {
    VPUDevice.VPU_2_0: DeviceConfig(
        device=VPUDevice.VPU_2_0, dpu_mhz=700, cmx_mhz=700, cmx_word_bytes=16, cmx_read_ports=4,
        dma_bytes_per_cycle=32, dram_mbps=20000, macs_per_dpu=256, fp16_ratio=4, ppe_lanes=16,
        input_channels_per_mac=1, dpus_per_tile=5, dma_ports=2, dram_latency_cycles=0, cmx_latency_cycles=0,
        cmx_bytes=1024 * 1024, owt_options=(1,),
        execution_modes=(ExecutionMode.VECTOR, ExecutionMode.MATRIX, ExecutionMode.VECTOR_FP16)),
    VPUDevice.VPU_2_7: DeviceConfig(
        device=VPUDevice.VPU_2_7, dpu_mhz=1300, cmx_mhz=975, cmx_word_bytes=16, cmx_read_ports=8,
        dma_bytes_per_cycle=32, dram_mbps=27000, macs_per_dpu=2048, fp16_ratio=2, ppe_lanes=64,
        input_channels_per_mac=8, dpus_per_tile=1, dma_ports=2,
        dram_latency_cycles=1242,  # 956 ns at 1300 MHz
        cmx_latency_cycles=21,  # 16 CMX cycles at 975 MHz, in DPU cycles
        cmx_bytes=2048 * 1024, owt_options=(1, 2),
        execution_modes=(ExecutionMode.CUBOID_16x16, ExecutionMode.CUBOID_8x16, ExecutionMode.CUBOID_4x16)),
    # 4.0 and 5.0: the runtime's main constant set (docs/vpunn.md §7); the 4.0 theoretical DMA uses a legacy set
    VPUDevice.VPU_4_0: _VPU_4_0,
    # 5.0: 4.0's set at its own clocks, with twice the MACs and half the PPE lanes of a DPU
    VPUDevice.NPU_5_0: replace(_VPU_4_0, device=VPUDevice.NPU_5_0, dpu_mhz=1950, cmx_mhz=1114, macs_per_dpu=4096,
                               ppe_lanes=32, dram_latency_cycles=585),  # 300 ns at 1950 MHz
}

#: The runtime's legacy constant set where it differs from the main one (docs/vpunn.md §7). Only the theoretical DMA
#: of VPU_4_0 uses it (the runtime forces the legacy DMA formula and set on generation 4); the DMA NN
#: post-processing, the theoretical DPU cycles and the newer DMA formula of NPU_5_0 use the main set above.
LEGACY_DMA_OVERRIDES: dict[VPUDevice, dict[str, int]] = {
    VPUDevice.VPU_4_0: dict(cmx_mhz=975, dram_mbps=45000,
                            dram_latency_cycles=1625,  # 956 ns at 1700 MHz
                            cmx_latency_cycles=27),  # 16 CMX cycles at 975 MHz, in DPU cycles
}


def device_config(device) -> DeviceConfig:
    try:
        return DEVICES[VPUDevice(int(device))]
    except (KeyError, ValueError):
        raise VpunnError(f"device {device!r} is not implemented; implemented: "
                         + ", ".join(d.name for d in DEVICES)) from None
