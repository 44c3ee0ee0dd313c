"""`groupshift topics ...` through click's CliRunner, against real ZooKeeper and a tmp log root."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cli.main import main


def run(*args, input=None, ok=True):
    result = CliRunner().invoke(main, ["topics", *args], input=input)
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


def test_create_produce_describe_list_tail(zk, zk_connect, tmp_path):
    data = str(tmp_path / "data")
    common = ["--zk", zk_connect, "--data", data]
    assert "created topic clicks with 3 partitions" in run("create", "clicks", "-p", "3", *common).output
    assert zk.get("/brokers/topics/clicks")[0] == b'{"version":1,"partitions":{"0":[0],"1":[0],"2":[0]}}'

    out = run("produce", "clicks", "--count", "3000", "--keys", "7", "--data", data).output
    assert "produced 3000 records" in out
    src = tmp_path / "in.txt"
    src.write_text("".join(f"k{i}\tvalue {i}\n" for i in range(5)))
    out = run(
        "produce", "clicks", "--file", str(src), "--key-separator", "\t", "--partition", "1", "--data", data
    )
    assert "partition 1: 5 records" in out.output

    desc = json.loads(run("describe", "clicks", "--json", *common).output)
    assert desc["registered"] and sum(p["latest"] for p in desc["partitions"]) == 3005
    assert all(p["replicas"] == [0] for p in desc["partitions"])
    text = run("describe", "clicks", *common).output
    assert "PartitionCount: 3" in text and "Records: 3005" in text
    assert run("list", *common).output.split() == ["clicks"]

    lines = run("tail", "clicks", "--partition", "1", "-n", "3", "--json", "--data", data).output.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["key"] for r in rows] == ["k2", "k3", "k4"] and rows[-1]["value"] == "value 4"
    everything = run("tail", "clicks", "--from-beginning", "--data", data).output.splitlines()
    assert len(everything) == 3005
    limited = run("tail", "clicks", "--from-beginning", "--follow", "--limit", "20", "--data", data)
    assert len(limited.output.splitlines()) == 20

    run("add-partitions", "clicks", "-p", "4", *common)
    assert json.loads(zk.get("/brokers/topics/clicks")[0])["partitions"].keys() == {"0", "1", "2", "3"}
    assert "earliest offset" in run("retain", "clicks", "--max-segments", "1", "--data", data).output
    run("delete", "clicks", *common)
    assert run("list", *common).output == "" and not zk.exists("/brokers/topics/clicks")


def test_user_errors_are_one_line(zk_connect, tmp_path):
    data = str(tmp_path / "data")
    bad = run("create", "no/slash", "-p", "1", "--zk", zk_connect, "--data", data, ok=False)
    assert bad.exit_code == 1 and "illegal" in bad.output and "Traceback" not in bad.output
    unknown = run("produce", "missing", "--count", "1", "--data", data, ok=False)
    assert unknown.exit_code == 1 and "does not exist" in unknown.output
    run("create", "t", "-p", "1", "--zk", zk_connect, "--data", data)
    nopart = run("produce", "t", "--count", "1", "--partition", "3", "--data", data, ok=False)
    assert nopart.exit_code == 1 and "no partition 3" in nopart.output
    again = run("create", "t", "-p", "1", "--zk", zk_connect, "--data", data, ok=False)
    assert again.exit_code == 1 and "already exists" in again.output
