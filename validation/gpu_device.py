"""Which GPU a campaign runs on: its datasheet spec, the name its results carry, and what the box has installed.

The GPU machine lent to a session may be any model (an H100 on 2026-11-27, an H200 since). The campaign reads the
device's name (torch, or ``--device-name``: the dry run passes one so that CI exercises the selection), takes the
datasheet spec whose GPU that name names (``DATASHEETS``), and names every result by the device
(``fidelity-<slug>-<date>``). A GPU with no datasheet spec here is priced by its calibrated spec only: the
datasheet column then says which spec stood in and why, never a silent other model under its label.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "hardware_specs"
#: a token of the device's name -> the datasheet spec of that GPU (first match wins: the more specific first).
#: nvidia-smi names the H100 PCIe card "NVIDIA H100 PCIe" and the SXM5 part "NVIDIA H100 80GB HBM3"
DATASHEETS = (("h200", SPECS / "h200-sxm-host.yaml"), ("h100 pcie", SPECS / "h100-pcie-host.yaml"),
              ("h100", SPECS / "h100-sxm-host.yaml"))
#: the spec a GPU without its own stands in with (named as such in the results)
FALLBACK = SPECS / "h100-sxm-host.yaml"
#: packages whose presence decides what a campaign can run (fused kernels, compilers, the planners' solvers)
WATCHED = ("torch", "triton", "fbgemm_gpu", "fbgemm-gpu", "torchrec", "pulp", "highspy", "pydantic", "numpy", "scipy")


def slug(device_name: str) -> str:
    """The device's short name in file names: the datasheet token it matches (``h200``), else its name in
    lower case with runs of other characters as one dash (``nvidia-a100-sxm4-80gb``)."""
    low = device_name.lower()
    for token, _spec in DATASHEETS:
        if re.search(rf"\b{token}\b", low):
            return token.replace(" ", "-")
    return re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "gpu"


def datasheet_for(device_name: str) -> tuple[Path, str | None]:
    """(the datasheet spec for the device, None) where one names it; else (FALLBACK, why it stands in)."""
    low = device_name.lower()
    for token, spec in DATASHEETS:
        if re.search(rf"\b{token}\b", low):
            return spec, None
    return FALLBACK, (f"no datasheet spec names {device_name!r}: {FALLBACK.name} stands in for the datasheet "
                      "column (the calibrated spec is this GPU's own)")


def packages() -> dict:
    """Every installed distribution (name -> version) and whether the watched ones import."""
    dists = {}
    for d in importlib.metadata.distributions():
        name = d.metadata.get("Name")
        if name:
            dists[name] = d.version
    importable = {}
    for name in WATCHED:
        module = name.replace("-", "_")
        try:
            importable[name] = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            importable[name] = False
    return {"installed": dict(sorted(dists.items(), key=lambda kv: kv[0].lower())), "importable": importable}


def describe(device_name: str, dry: bool) -> dict:
    """What env.json records of the device: name, slug (``cpu-dry-run-<slug>`` on a dry run), datasheet spec."""
    spec, why = datasheet_for(device_name)
    return {"device_name": device_name, "device_slug": ("cpu-dry-run-" if dry else "") + slug(device_name),
            "datasheet_spec": str(spec.relative_to(ROOT)), "datasheet_note": why}
