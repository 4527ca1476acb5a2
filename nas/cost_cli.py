"""`vpunas cost` and `vpunas vpunn`: latency of a network and raw VPUNN queries in bulk."""
from __future__ import annotations


def add_cost_parser(sub) -> None:
    p = sub.add_parser("cost", help="latency of a network on a cost model")
    p.set_defaults(handler=lambda args: (_ for _ in ()).throw(NotImplementedError("vpunas cost")))


def add_vpunn_parser(sub) -> None:
    p = sub.add_parser("vpunn", help="raw VPUNN queries in bulk (dpu | layer | dma)")
    p.set_defaults(handler=lambda args: (_ for _ in ()).throw(NotImplementedError("vpunas vpunn")))
