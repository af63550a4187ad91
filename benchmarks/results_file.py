"""The results files the benchmark scripts write and the book reads: ``benchmarks/results/<name>.json``.

Every file has the same top level, so that a chapter can say where and how its figures were
measured::

    {
      "benchmark": "ops",                      # the name, = the file's stem
      "command": "python benchmarks/bench_ops.py --threads 1",
      "machine": {...},                        # machine_info(): CPU, cores, threads, torch, load, date
      "settings": {...},                       # the script's arguments
      "results": [...] or {...}                # the script's own rows
    }
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    """Where the figures were measured: CPU model, cores, intra-op threads, instruction set that
    PyTorch dispatches to, torch version, the load average at the start, and the date."""
    info = {
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    if hasattr(os, "getloadavg"):
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def write_results(name: str, results, settings: dict | None = None) -> Path:
    """Write ``benchmarks/results/<name>.json`` with the machine, the command and ``results``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "benchmark": name,
        "command": "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "machine": machine_info(),
        "settings": settings or {},
        "results": results,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
