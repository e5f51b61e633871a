"""configs/monitoring/: the alert rules pass promtool, and the dashboard is valid JSON."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

MONITORING = Path(__file__).resolve().parents[2] / "configs" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus; make setup installs it)"
)


def referenced_metrics() -> set[str]:
    """Every raftq_ metric name the rules and the dashboard use."""
    text = (MONITORING / "rules.yml").read_text() + (
        MONITORING / "grafana-dashboard.json"
    ).read_text()
    return set(re.findall(r"\braftq_[a-z_]+\b", text))


@needs_promtool
@pytest.mark.parametrize(
    "args",
    [("check", "rules", "rules.yml"), ("check", "config", "prometheus.yml"),
     ("test", "rules", "rules_test.yml")],
)  # fmt: skip
def test_promtool_accepts_the_monitoring_configs(args: tuple[str, ...]) -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, *args], cwd=MONITORING, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_panels_each_query_prometheus() -> None:
    dash = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dash["uid"] and dash["panels"]
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
    assert len(referenced_metrics()) > 20
