"""``placer calibrate``: measure what each op of the step program costs on this machine, as functions of
size, and write it into a hardware spec (``op_costs``) with a source comment per number.

Modules:
- timing.py:  medians of synchronized calls, sizes per mode (--quick: seconds; full: minutes at most)
- benches.py: the runner's own embedding ops timed (lookup, sort, segment_reduce, update, pack_grad cold and
              warm, strided and indexed elementwise ops, tiny ops for the fixed costs), each rate inverted
              from the formula placer/program/opcosts.py prices with
- gemm.py:    GEMM rates (cold and warm) at a DLRM-like grid and at the exact shapes and operand layouts of
              given workloads' dense steps
- cold.py:    the cold-operand pool: timed ops take a fresh stretch of >= 2 x the last-level cache per repeat
- dense.py:   ``fixed_us.dense_op`` by least squares over synthetic dense models' real steps (checks: the
              given workloads' dense steps)
- machine.py: ``calibrate()``: all of it in order, the link and memory facts, the schema's scalar fields
- record.py:  ``Calibration`` (samples, entries, legacy values), ``price`` (a sample under given op costs)
- writer.py:  ``to_yaml`` / ``template``: the spec, every number with its comment; ``op_costs`` / ``checked``:
              what the planner will price with, and every sample priced under it
"""
from placer.calibrate.machine import calibrate, measure_link
from placer.calibrate.record import Calibration, Entry, Measurement, OpCostEntries, Sample, price
from placer.calibrate.timing import meminfo
from placer.calibrate.writer import template, to_yaml

_meminfo = meminfo  # the name validation/exchange_cpu.py imported

__all__ = ["Calibration", "Entry", "Measurement", "OpCostEntries", "Sample", "calibrate", "measure_link", "meminfo",
           "price", "template", "to_yaml"]
