"""When scripts/opensearch_local.py calls a cluster started: the waiting rule alone, with node
handles that answer as scripted (starting real nodes cannot hit the moment this is about)."""

from __future__ import annotations

from dataclasses import dataclass, field

from opensearch_fixture import load_local_module

GREEN = {"status": "green", "number_of_nodes": 2}


@dataclass
class ScriptedNode:
    """A node handle whose own HTTP port stays closed for its first `closed` health checks."""

    closed: int = 0
    asked: list[int] = field(default_factory=list)

    def running(self) -> bool:
        return True

    def health(self) -> dict | None:
        self.asked.append(1)
        return GREEN if len(self.asked) > self.closed else None


def test_a_cluster_is_ready_only_once_every_node_answers_on_its_own_port() -> None:
    # The second node already reports the whole cluster green, but the first node, the one
    # cluster.url points at, has not opened its HTTP port yet: a request there would be refused.
    first, second = ScriptedNode(closed=3), ScriptedNode()
    cluster = load_local_module().LocalCluster([first, second])
    assert cluster.wait_for("green", 2, timeout=30) == GREEN
    assert len(first.asked) > 3  # it waited until the first node answered
