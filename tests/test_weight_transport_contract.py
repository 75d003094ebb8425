"""The built-in weight transports pass the weight-transport contract suite (rlcore_testkit)."""

from __future__ import annotations

from rlcore_testkit.contracts import WeightTransportContract


class TestNaive(WeightTransportContract):
    component_name = "naive"


class TestDelta(WeightTransportContract):
    component_name = "delta"
