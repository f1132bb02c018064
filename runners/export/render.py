"""The generated `<kernel>_configs.py`: an export's data as literals (imports only triton), then the lookup
code of runtime.py, copied verbatim below its marker line. It holds, for every GPU and Triton version
exported: the covering sets (COVER), the winner of each measured shape (BEST_BY_SHAPE), all their configs
once (CONFIGS, for @triton.autotune), the map from the kernel's arguments to the sweep's dims (KEY, from
the kernel's export key or --key), the sections that look the kinds of size up apart (ALIGNED_APART), a
prune function for autotune and config_for() (lookup.LOOKUP_RULES says how they look a call up).

The data it is given has been checked against the file format (fileformat.py); every value goes in as the
repr() of that checked value, and the text the docstring shows (GPU names, versions, sweep ids) only in a
printable form that cannot end it (`_printable`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from triton_sweep.export.lookup import LOOKUP_RULES

LAUNCH_OPTIONS = ("num_warps", "num_stages")  # triton.Config keywords; every other key is a meta-parameter
RUNTIME = Path(__file__).resolve().parent / "runtime.py"
LOOKUP = RUNTIME.with_name("lookup.py")  # the module's entry points: after runtime.py's code
RUNTIME_MARKER = "# ---- generated modules copy everything below this line ----\n"


def _printable(text) -> str:
    """Text for the docstring: letters, digits and a few marks of ASCII; any other character a '?'."""
    return re.sub(r"[^A-Za-z0-9 _.,:;+=@#%()\[\]/-]", "?", str(text))


def _provenance(gpu: str, version: str, section: dict) -> str:
    """The docstring's lines of one section: where, how and from which sweeps it was measured."""
    text = {name: _printable(section.get(name) or "not recorded")
            for name in ("driver_version", "cuda_version", "torch_version", "kernel_hash", "exported_at")}
    timed = section.get("timing_method") or "CUDA events (before timing_method was recorded)"
    where = f"driver {text['driver_version']}, CUDA {text['cuda_version']},"
    if section.get("backend") == "interpret":
        where = ("INTERPRETER TIMINGS (export --interpreter), to try the flow on a CPU:\n  used only under "
                 "TRITON_INTERPRET=1; they say nothing of a GPU;")
    return (f"- {_printable(gpu)}, Triton {_printable(version)}: {where}\n  torch {text['torch_version']}, "
            f"kernel source {text['kernel_hash']};\n  timed by {_printable(timed)};\n  {section['trials']} "
            f"ok trials of sweeps {_printable(', '.join(section['sweep_ids']))}; within "
            f"{100 * section['tolerance']:g}%; exported {text['exported_at']}")


def _config_source(config: dict) -> str:
    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = "".join(f", {k}={config[k]!r}" for k in LAUNCH_OPTIONS if k in config)
    return f"triton.Config({meta!r}{options})"


def _identity(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _literal_lines(data: dict, configs: dict) -> tuple[list[str], list[str]]:
    """The lines of the COVER and BEST_BY_SHAPE literals: gpu -> Triton version -> ..."""
    cover_lines, best_lines = [], []
    for gpu, versions in data["gpus"].items():
        cover_lines.append(f"    {gpu!r}: {{")
        best_lines.append(f"    {gpu!r}: {{")
        for version, section in versions.items():
            cover_lines.append(f"        {version!r}: {{")
            best_lines.append(f"        {version!r}: {{")
            for dtype, dtype_data in section["dtypes"].items():
                cover_lines.append(f"            {dtype!r}: [")
                for entry in dtype_data["configs"]:
                    verified = ", ".join(f"{tuple(at['shape'])!r}: {round(at['p50_us'], 3)!r}"
                                         for at in entry["ok_at"])
                    index = configs[_identity(entry["config"])][0]
                    cover_lines.append(f"                (CONFIGS[{index}], {{{verified}}}),")
                cover_lines.append("            ],")
                for shape in dtype_data["best_by_shape"]:
                    throughput = f", {shape['gbps']:.0f} GB/s" if shape["gbps"] is not None else ""
                    searched = (f"; {shape['configs_measured']} of {shape['configs_planned']} configs "
                                "measured" if shape.get("configs_planned") is not None else "")
                    best_lines.append(f"            # p50 {shape['p50_us']:.2f} us{throughput}; fastest "
                                      f"there {shape['fastest_p50_us']:.2f} us, the list's best "
                                      f"{shape['list_p50_us']:.2f} us{searched}")
                    best_lines.append(f"            ({dtype!r}, {tuple(shape['shape'])!r}): "
                                      f"{_config_source(shape['config'])},")
            cover_lines.append("        },")
            best_lines.append("        },")
        cover_lines.append("    },")
        best_lines.append("    },")
    return cover_lines, best_lines


def _aligned_apart_literal(all_sections: list) -> str:
    """The ALIGNED_APART literal: (GPU, Triton version, dtype) of the sections whose leave-one-out estimate
    chose to look the kinds of size up apart (runners/export/generalization.py)."""
    apart = [(gpu, version, dtype) for gpu, version, section in all_sections
             for dtype, dtype_data in section["dtypes"].items()
             if dtype_data.get("leave_one_out", {}).get("aligned_apart")]
    return "{" + ", ".join(map(repr, apart)) + "}" if apart else "set()"


def _all_configs(all_sections: list) -> dict:
    """Every config of the covering sets once, in GPU, version, dtype, list order: identity -> (index,
    config)."""
    configs = {}
    for _, _, section in all_sections:
        for dtype_data in section["dtypes"].values():
            for entry in dtype_data["configs"]:
                configs.setdefault(_identity(entry["config"]), (len(configs), entry["config"]))
    return configs


def lookup_code() -> str:
    """The code below the marker of runtime.py, then of lookup.py, verbatim."""
    runtime, lookup = (path.read_text().split(RUNTIME_MARKER, 1)[1].strip("\n") for path in (RUNTIME, LOOKUP))
    return f"{runtime}\n\n\n{lookup}\n"


def _docstring(data: dict, all_sections: list, json_name: str) -> str:
    """The generated module's docstring: where each section was measured, how to use the module, and the
    rules of its lookups (lookup.LOOKUP_RULES)."""
    kernel = data["kernel"]
    provenance = "\n".join(_provenance(gpu, version, section) for gpu, version, section in all_sections)
    key_args = list(data["key"]) or [d for d in data["dims"]]
    rules = LOOKUP_RULES.split("Lookups, ", 1)[1].strip()
    tolerances = sorted({f"{100 * s['tolerance']:g}%" for _, _, s in all_sections})
    return f'''"""{kernel} launch configs measured by the triton-sweep runner.
Generated from {json_name}: do not edit.

{provenance}

COVER[gpu][triton version][dtype] starts with a covering set: at every measured shape, the fastest of
its configs that was ok there is within {" / ".join(tolerances)} of the fastest config measured there (p50
of the kernel time of record, timed as each section's line above says; where finalists were re-timed
round-robin, their re-timed p50s); then the alternates, every other config within that of the fastest at
one measured shape at least, which the space between measured shapes can need. Each config comes with
the shapes where it was verified (ok) and its p50 there, in us. Use:

    from {json_name[:-len(".json")]} import CONFIGS, config_for, do_bench, make_prune, prune_configs

    @triton.autotune(configs=CONFIGS, key={key_args!r}, do_bench=do_bench,
                     prune_configs_by={{"early_config_prune": prune_configs}})  # or make_prune(check=...)
    @triton.jit
    def kernel(...): ...

    config = config_for("float16", {key_args[0]}=...)  # without autotune (the rules below)

@triton.autotune never calls the prune when it is given a single config: pass CONFIGS whole.
Lookups, {rules}
"""'''


def render_module(data: dict, json_name: str) -> str:
    """The .py of an export: its docstring, its data as literals, then the lookup code of
    runners/export/runtime.py and lookup.py."""
    kernel = data["kernel"]
    all_sections = [(gpu, version, section) for gpu, versions in data["gpus"].items()
                    for version, section in versions.items()]  # in file order
    configs = _all_configs(all_sections)
    cover_lines, best_lines = _literal_lines(data, configs)
    config_lines = "\n".join(f"    {_config_source(config)}," for _, config in configs.values())
    return f'''{_docstring(data, all_sections, json_name)}
import triton

KERNEL = {kernel!r}
DIMS = {tuple(data["dims"])!r}
# The kernel's argument -> the dim of the measured shapes it gives (export --key, or export.key).
KEY = {data["key"]!r}
GPU_ENV = "TRITON_EXPORT_GPU"  # names the GPU whose configs apply, instead of the CUDA device's name
TRITON_ENV = "TRITON_EXPORT_TRITON"  # names the Triton version whose configs apply, not the running one

# Every config of COVER once: autotune over all of them, and let prune_configs keep the right ones.
CONFIGS = [
{config_lines}
]

# GPU -> Triton version -> dtype -> the covering set, best first, then the alternates: (config, {{shape
# where it was ok: its p50 there, us}}).
COVER = {{
{chr(10).join(cover_lines)}
}}

# GPU -> Triton version -> (dtype, shape) -> the winner measured there (the finalists' choice, else the
# lowest p50).
BEST_BY_SHAPE = {{
{chr(10).join(best_lines)}
}}

# (GPU, Triton version, dtype) where sizes that are multiples of 16 and sizes that are not are looked up
# apart: the export's leave-one-out estimate was higher so (the rules below).
ALIGNED_APART = {_aligned_apart_literal(all_sections)}


{lookup_code()}'''
