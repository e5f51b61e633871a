"""Spark's auto-discovery can find the raftq format in an installed wheel."""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

from pyspark.sql.datasource import DataSource

ROOT = Path(__file__).resolve().parents[2]


def test_pyspark_raftq_is_packaged_and_exposes_a_default_source_named_raftq() -> None:
    # What pyspark.sql.worker.lookup_data_sources does with each pyspark_* module it finds.
    found = [m.name for m in pkgutil.iter_modules([str(ROOT)]) if m.name.startswith("pyspark_")]
    assert found == ["pyspark_raftq"]
    module = importlib.import_module("pyspark_raftq")
    assert issubclass(module.DefaultSource, DataSource)
    assert module.DefaultSource.name() == "raftq"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "pyspark_raftq*" in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
