"""Routes on a cluster of identical nodes are found once per pair of node positions and renamed (topology.py
NodeSymmetry, issue 47): they must equal the routes searched device by device."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.specs.hardware import load_hardware
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent


def _pair(name: str) -> tuple[Topology, Topology]:
    spec = load_hardware(ROOT / "hardware_specs" / name)
    fast, plain = Topology(spec), Topology(spec)
    plain._node_symmetry = None  # every route searched from its own source
    return fast, plain


@pytest.mark.parametrize("name", ["dgx-h100-2node.yaml", "dgx-h100-16node.yaml"])
def test_renamed_routes_equal_searched_ones(name):
    fast, plain = _pair(name)
    assert fast._node_symmetry is not None
    gpus, hosts = fast.gpus, fast.hosts
    picks = [gpus[0], gpus[5], gpus[-1], gpus[len(gpus) // 2 + 3], hosts[0], hosts[-1]]
    for src in picks:
        for dst in picks + [f"{fast.node_of[gpus[-2]]}/nic1"]:
            assert dict(fast.route_shares(src, dst)) == pytest.approx(dict(plain.route_shares(src, dst)))
            assert fast.path_latency_s(src, dst) == pytest.approx(plain.path_latency_s(src, dst))
            assert fast.bottleneck_bw(src, dst) == plain.bottleneck_bw(src, dst)
            assert len(fast.route(src, dst)) == len(plain.route(src, dst))


def test_collectives_price_alike():
    fast, plain = _pair("dgx-h100-2node.yaml")
    ring = tuple(fast.gpus)
    assert dict(fast.traffic.unit_allreduce(ring)) == pytest.approx(dict(plain.traffic.unit_allreduce(ring)))
    for dev in (fast.gpus[3], fast.gpus[12], fast.hosts[1]):
        for outgoing in (True, False):
            assert (dict(fast.traffic.unit_exchange(dev, outgoing))
                    == pytest.approx(dict(plain.traffic.unit_exchange(dev, outgoing))))
    assert fast.traffic.fixed_latency_s(6, 1, 3, 5) == pytest.approx(plain.traffic.fixed_latency_s(6, 1, 3, 5))


def test_nodes_of_different_templates_search_every_route():
    one = load_hardware(ROOT / "hardware_specs" / "dgx-h100.yaml")  # one node: nothing to rename
    assert Topology(one)._node_symmetry is None
    spec = load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml")
    (name, t), = spec.templates.items()
    slower = t.model_copy(update={"nics": t.nics.model_copy(update={"bw_GBps": t.nics.bw_GBps / 2})})
    mixed = spec.model_copy(update={"templates": {name: t, "slower": slower},
                                    "nodes": [spec.nodes[0].model_copy(update={"count": 1, "template": name}),
                                              spec.nodes[0].model_copy(update={"count": 1, "template": "slower"})]})
    topo = Topology(mixed)
    assert topo._node_symmetry is None
    assert topo.bottleneck_bw(topo.gpus[0], topo.gpus[-1]) < Topology(spec).bottleneck_bw(topo.gpus[0], topo.gpus[-1])
