"""Simulated multi-agent runs through the handshake library, with known faults.

Quick start::

    from collector.simulator import SimulationConfig, run_simulation

    config = SimulationConfig(workflows=200, seed=7, faults={"slow-validation": 0.05})
    result = run_simulation(config, "runs/demo")
    print(result.figures["success_rate"], result.expected_findings)

The same from the command line: ``handoffscope simulate --out runs/demo --workflows 200
--seed 7 --fault slow-validation=0.05``. Every handoff runs the library's own code on a
virtual clock; ``runs/demo/manifest.json`` lists each injected fault and the rule that must
flag it. This package needs the ``[sdk]`` extra (the OpenTelemetry SDK and the JSON file
exporter).
"""

from __future__ import annotations

from collector.simulator.config import (
    DEFAULT_PIPELINE,
    SimulationConfig,
    parse_duration,
    parse_fault,
    parse_pipeline,
)
from collector.simulator.faults import FAULTS, Fault, fault_by_name, fault_names
from collector.simulator.manifest import MANIFEST_NAME, FaultEntry, load_manifest
from collector.simulator.run import SimulationResult, run_simulation
from collector.simulator.stats import analytic_success, wilson_interval

__all__ = [
    "DEFAULT_PIPELINE",
    "FAULTS",
    "Fault",
    "FaultEntry",
    "MANIFEST_NAME",
    "SimulationConfig",
    "SimulationResult",
    "analytic_success",
    "fault_by_name",
    "fault_names",
    "load_manifest",
    "parse_duration",
    "parse_fault",
    "parse_pipeline",
    "run_simulation",
    "wilson_interval",
]
