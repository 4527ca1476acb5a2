"""`vpunas cost` and `vpunas vpunn`: latency of a network and raw VPUNN queries in bulk. Each command imports its
modules when it runs (see `nas.cli`: the command line starts without torch).

    vpunas cost MODEL --cost vpunn:VPU_2_7 [--input 1x3x224x224] [--dtype uint8|fp16] [--model-dir DIR]
    vpunas cost RUN_DIR --arch ID [--cost vpunn:VPU_2_7|lut:FILE]     (default: the run's own cost model)
    vpunas cost RUN_DIR --devices VPU_2_0,VPU_2_7,VPU_4_0,NPU_5_0       (the run's front on every generation)
    vpunas cost CONFIG --arch JSON|@FILE|largest|smallest [--devices ...]  (an arch of the config's space)
    vpunas cost CONFIG --baseline NAME [--devices ...]                   (a baseline of the config, as a run costs it)
    vpunas vpunn dpu   MODEL_FILE IN.csv -o OUT.csv [--device VPU_2_7]        -> id,cycles,error,rule
    vpunas vpunn layer MODEL_FILE IN.csv -o OUT.csv [--device VPU_2_7] [--no-prefetch] [--input-in-ddr]
                                                    [--output-in-ddr] [--dma-model dma_2_7.vpunn] [--details]
                                                                              -> layer_id,strategy,cycles,error
    vpunas vpunn dma   MODEL_FILE IN.csv -o OUT.csv [--device VPU_4_0]        -> id,cycles,error

MODEL_FILE is a path, or a file name looked up in the model folder (--model-dir, else $VPUNAS_VPUNN_DIR, else
the files shipped in the package, hw_cost/vpunn/models).
"""
from __future__ import annotations

import argparse
import logging

from hw_cost import CostModelError, CostModelSpec, load_cost_model

__all__ = ["add_cost_parser", "add_vpunn_parser", "parse_input_shape", "build_named_model"]

log = logging.getLogger(__name__)


def parse_input_shape(text: str) -> tuple[int, int, int, int]:
    """'1x3x224x224' (or '3x224x224', batch 1) -> (N, C, H, W)."""
    try:
        dims = tuple(int(d) for d in text.lower().replace(",", "x").split("x"))
    except ValueError:
        dims = ()
    if len(dims) == 3:
        dims = (1,) + dims
    if len(dims) != 4 or min(dims) < 1:
        raise CostModelError(f"--input {text!r}: expected NxCxHxW (or CxHxW), e.g. 1x3x224x224")
    return dims


def build_named_model(name: str):
    """A torchvision or timm model by name, with random weights (latency only)."""
    import torchvision

    if name in torchvision.models.list_models():
        return torchvision.models.get_model(name, weights=None)
    import timm

    if timm.is_model(name):
        return timm.create_model(name, pretrained=False)
    similar = [m for m in torchvision.models.list_models() + timm.list_models() if name[:5].lower() in m][:8]
    raise CostModelError(f"unknown model {name!r}: not a torchvision or timm model name"
                         + (f" (similar: {', '.join(similar)})" if similar else ""))


def _run_arch(run_dir: str, arch_id: str):
    """(model, input shape, cost blocks, the run's config) of arch `arch_id` of a run (random weights)."""
    from nas.config import load_config
    from nas.context import build_task_and_space
    from nas.export.models import run_arch
    from nas.rundir import RunDir
    from nas.cli.flags import as_flags

    run = RunDir(run_dir)
    with as_flags(arch_id="--arch"):
        arch = run_arch(run, arch_id).arch
    config = load_config(run.config)
    task, space = build_task_and_space(config)
    return space.build_supernet().extract(arch).eval(), (1, *task.input_shape), space.blocks(arch), config


def _cost_model(spec: CostModelSpec, args):
    """The cost model of `--cost` with `--dtype` and `--model-dir` (checked as the config's `cost` section)."""
    from nas.config import CostConfig

    config = CostConfig(model=str(spec), dtype=args.dtype or "uint8", model_dir=args.model_dir)
    return load_cost_model(spec, **config.options())


def _device_list(args, least: int) -> list[str]:
    """The VPUNN devices of `--devices`, at least `least` of them."""
    from hw_cost.vpunn import DEVICE_MODELS

    devices = [d.strip().upper() for d in args.devices.split(",") if d.strip()]
    unknown = [d for d in devices if d not in DEVICE_MODELS]
    if unknown or len(devices) < least:
        raise CostModelError(f"--devices {args.devices!r}: expected at least {('one', 'two')[least - 1]} of "
                             f"{', '.join(DEVICE_MODELS)}"
                             + (f" ({', '.join(unknown)} unknown)" if unknown else ""))
    return devices


def _devices(args) -> int:
    """`--devices`: the run's front costed on several devices (nas.reporting.device_fronts)."""
    from nas.reporting.device_fronts import cost_front_on_devices
    from nas.rundir import RunDir

    devices = _device_list(args, least=2)
    if args.arch is not None or args.cost or args.input:
        raise CostModelError("--devices costs a run's whole front on VPUNN models: leave out --arch, --cost and "
                             "--input")
    run = RunDir(args.model)
    if not run.candidates.exists():
        raise CostModelError(f"--devices: {args.model} has no candidates.csv (not a vpunas run directory?)")
    table = cost_front_on_devices(run, devices, dtype=args.dtype, model_dir=args.model_dir)
    print(f"{args.model}: {len(table.ids)} archs with a test {table.metric}, latency per device "
          f"(VPUNN, {args.dtype or 'the run dtype'})")
    print("\n".join(table.lines()))
    return 0


def _config_network(args):
    """(name, cost blocks, input shape, config) of `--arch` (JSON, @FILE, largest or smallest) or `--baseline NAME`
    of config MODEL: an arch of its space, or a baseline built as a run of the config builds it."""
    import json
    from pathlib import Path

    from nas.baselines.cached_networks import CACHED_TYPES, cached_network_parts
    from nas.baselines.scoring import resolve_arch
    from nas.config import ConfigError, load_config
    from nas.context import build_task_and_space

    if (args.arch is None) == (args.baseline is None):
        raise ConfigError(f"vpunas cost {args.model}: name what to cost in the config, --arch or --baseline")
    if args.input:
        raise ConfigError("--input: a config's networks are costed at its task's input shape")
    config = load_config(args.model)
    task, space = build_task_and_space(config)
    shape = (1, *task.input_shape)
    if args.baseline is not None:
        entries = {entry.name: entry for entry in config.baselines}
        if args.baseline not in entries:
            raise ConfigError(f"--baseline {args.baseline!r}: not a baseline of {args.model} (its baselines: "
                              f"{', '.join(entries) or 'none'})")
        entry = entries[args.baseline]
        if entry.type in CACHED_TYPES:
            return entry.name, [cached_network_parts(task, entry).block], shape, config
        if getattr(entry, "arch", None) is None:
            raise ConfigError(f"--baseline {args.baseline!r}: a {entry.type} baseline has no network to cost")
        return entry.name, space.blocks(resolve_arch(space, entry.arch, entry.where + ".arch")), shape, config
    text = args.arch
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    if text.strip() in ("largest", "smallest"):
        arch = text.strip()
    else:
        try:
            arch = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--arch: not an arch as JSON ({exc.msg} at character {exc.pos})") from None
    return f"{args.model} arch", space.blocks(resolve_arch(space, arch, "--arch")), shape, config


def _cost_config_network(args) -> int:
    """An arch or a baseline of a config, on the config's cost model, `--cost`, or each of `--devices`."""
    from hw_cost import complexity
    from nas.context import npu_generation_model

    name, blocks, shape, config = _config_network(args)
    if args.devices is not None:
        if args.cost:
            raise CostModelError("--devices costs on VPUNN models: leave out --cost")
        models = [npu_generation_model(config.cost, device, dtype=args.dtype, model_dir=args.model_dir)
                  for device in _device_list(args, least=1)]
    elif args.cost:
        models = [_cost_model(CostModelSpec.parse(args.cost), args)]
    else:
        models = [load_cost_model(config.cost.spec, **config.cost.options())]
    params, macs = complexity(blocks)
    print(f"{name} (input {'x'.join(map(str, shape))}): {macs / 1e6:.1f} M MACs, {params / 1e6:.2f} M params")
    for model in models:
        ms = model.latency_ms(blocks)
        print(f"{model.name:>16} {ms * 1e3:9.1f} us {shape[0] * 1e3 / ms:9.1f} fps")
    return 0


def _cost(args) -> int:
    from pathlib import Path

    if Path(args.model).suffix in (".yaml", ".yml"):
        return _cost_config_network(args)
    if args.baseline is not None:
        raise CostModelError("--baseline names a baseline of a config: vpunas cost CONFIG --baseline NAME")
    if args.devices is not None:
        return _devices(args)
    if args.arch is not None:
        from nas.context import run_cost_model
        from nas.rundir import RunDir

        model, shape, blocks, config = _run_arch(args.model, args.arch)
        name = f"{args.model} arch {args.arch}"
        if args.input:
            raise CostModelError("--input: a run's arch is costed at the run's own input shape")
        # by default the run's own cost model, with its own options (a table as the run corrected it)
        cost_model = (_cost_model(CostModelSpec.parse(args.cost), args) if args.cost else
                      run_cost_model(config, RunDir(args.model)))
    else:
        spec = CostModelSpec.parse(args.cost or "vpunn:VPU_2_7")
        if spec.is_table:
            raise CostModelError(f"--cost {spec}: a latency table holds the blocks of a search space, so it costs "
                                 "the archs of a run (vpunas cost RUN_DIR --arch ID), not a named model; use "
                                 "--cost vpunn:... for MODEL")
        cost_model = _cost_model(spec, args)
        shape = parse_input_shape(args.input or "1x3x224x224")
        model, blocks, name = build_named_model(args.model), None, args.model
    result = cost_model.network_cost(model, shape)
    if result is None:  # a cost model without per-layer costs (e.g. a latency table)
        ms = cost_model.latency_ms(blocks) if blocks is not None else cost_model.model_latency_ms(model, shape)
        corrected = cost_model.correction
        note = f" (corrected for the run's machine: {corrected.scale:.3g} x table + {corrected.offset_ms:.4f} ms)" \
            if corrected else ""
        print(f"{name} on {cost_model.name}{note}: {ms:.4f} ms, {shape[0] * 1e3 / ms:.1f} fps")
        return 0
    print(result.table())
    print(f"{name} on {cost_model.name} ({args.dtype or 'uint8'}, input {'x'.join(map(str, shape))}): "
          f"{result.ms:.4f} ms, {result.fps:.1f} fps")
    return 0


def add_cost_parser(sub) -> None:
    p = sub.add_parser("cost", help="latency of a network on a cost model, with a per-layer table",
                       description="Latency of a torchvision or timm model on a cost model (per-layer table for "
                                   "VPUNN, then total ms and fps).")
    p.add_argument("model", metavar="MODEL_OR_RUN",
                   help="torchvision or timm model name (e.g. mobilenet_v2), a run directory with --arch or "
                        "--devices, or a config (.yaml) with --arch or --baseline")
    p.add_argument("--arch", metavar="ID", help="cost arch ID of the run directory MODEL_OR_RUN (candidates.csv); "
                                                "with a config, an arch of its space: JSON, @FILE, largest or smallest")
    p.add_argument("--baseline", metavar="NAME", help="cost baseline NAME of the config MODEL_OR_RUN, built as a run "
                                                      "of it builds it (e.g. a zoo network at the task's input)")
    p.add_argument("--cost", help="cost model spec: vpunn:VPU_2_7, vpunn:VPU_2_0, vpunn:VPU_2_7.fast, lut:FILE "
                                  "(a run's archs only); default: the run's own with --arch, else vpunn:VPU_2_7")
    p.add_argument("--input", help="input shape NxCxHxW of a named model (default 1x3x224x224)")
    p.add_argument("--devices", metavar="D1,D2,...", help="cost the front of the run directory MODEL_OR_RUN on each "
                   "of these VPUNN devices (VPU_2_0, VPU_2_7, VPU_4_0, NPU_5_0) and show where the ranking changes; "
                   "with a config, its --arch or --baseline on each")
    p.add_argument("--dtype", choices=("uint8", "fp16"), help="inference precision (default uint8; with --devices "
                                                                "the run's)")
    p.add_argument("--model-dir", help="folder of the .vpunn files")
    p.set_defaults(handler=_cost)


def _vpunn(args) -> int:
    """`vpunas vpunn dpu|layer|dma`: a table costed by `hw_cost.vpunn.tables`, VPUNN's errors under the flags."""
    from hw_cost import CostModelError
    from hw_cost.vpunn.tables import dma_table, dpu_table, layer_table
    from nas.cli.flags import as_flags

    table, what = {"dpu": (dpu_table, "DPU workloads"), "layer": (layer_table, "layers"),
                   "dma": (dma_table, "DMA transfers")}[args.vpunn_kind]
    options = dict(model_dir=args.model_dir, device=args.device)
    if args.vpunn_kind == "layer":
        options.update(dma_model=args.dma_model, prefetching=not args.no_prefetch, input_in_ddr=args.input_in_ddr,
                       output_in_ddr=args.output_in_ddr, details=args.details)
    with as_flags(also=(CostModelError,), device="--device", model_dir="--model-dir"):
        n = table(args.model_file, args.input_csv, args.output, **options)
    log.info("costed %d %s -> %s", n, what, args.output)
    return 0


def add_vpunn_parser(sub) -> None:
    p = sub.add_parser("vpunn", help="raw VPUNN queries in bulk (dpu | layer | dma)",
                       description="Cost a CSV of DPU workloads, layers or DMA transfers with a .vpunn model file.")
    p.set_defaults(handler=_vpunn)
    kinds = p.add_subparsers(dest="vpunn_kind", required=True, metavar="KIND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("model_file", metavar="MODEL_FILE", help="a .vpunn file, or its name in the model folder")
    common.add_argument("input_csv", metavar="IN.csv", help="input table (columns of the reference vectors)")
    common.add_argument("-o", "--output", required=True, metavar="OUT.csv", help="output table")
    common.add_argument("--model-dir", help="folder of the .vpunn files")
    by_device = argparse.ArgumentParser(add_help=False)
    by_device.add_argument("--device", help="cost only the rows of this device (VPU_2_0, VPU_2_7, VPU_4_0 or "
                                            "NPU_5_0)")

    kinds.add_parser("dpu", parents=[common, by_device],
                     help="DPU workloads -> id,cycles,error,rule (the validity rule an invalid one breaks)")

    layer = kinds.add_parser("layer", parents=[common, by_device], help="layers -> layer_id,strategy,cycles,error")
    layer.add_argument("--no-prefetch", action="store_true", help="add each layer's weights DMA")
    layer.add_argument("--input-in-ddr", action="store_true", help="add the DDR->CMX transfer of the input")
    layer.add_argument("--output-in-ddr", action="store_true", help="add the CMX->DDR transfer of the output")
    layer.add_argument("--dma-model", metavar="FILE", help="DMA NN for those transfers (default: theoretical DMA)")
    layer.add_argument("--details", action="store_true", help="add the per-tile detail columns")

    kinds.add_parser("dma", parents=[common, by_device], help="DMA transfers -> id,cycles,error")
