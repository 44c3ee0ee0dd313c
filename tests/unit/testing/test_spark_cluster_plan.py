"""What `SparkCluster.start` refuses before it starts or creates anything: at most 8 workers, a whole
number of cores, a memory size Spark reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from testing.spark_cluster import SparkCluster, SparkClusterError


def _cluster_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("groupshift-spark-*"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"workers": 0}, "workers must be a whole number from 1 to 8, not 0"),
        ({"workers": 9}, "workers must be a whole number from 1 to 8, not 9"),
        ({"workers": True}, "workers must be a whole number from 1 to 8, not True"),
        ({"workers": 2.0}, "workers must be a whole number from 1 to 8, not 2.0"),
        ({"cores": 0}, "cores must be a whole number from 1 to 64, not 0"),
        ({"memory": "1 GB"}, "memory must be a size such as 512m or 1g, not '1 GB'"),
        ({"memory": "1024"}, "memory must be a size such as 512m or 1g, not '1024'"),
        ({"memory": "0g"}, "memory must be a size such as 512m or 1g, not '0g'"),
    ],
)
def test_a_cluster_out_of_bounds_is_refused_before_anything_starts(kwargs, message):
    before = _cluster_dirs()
    with pytest.raises(SparkClusterError) as refused:
        SparkCluster.start(**kwargs)
    assert str(refused.value) == message
    assert _cluster_dirs() == before
