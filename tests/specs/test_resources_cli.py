"""``distspec resources``: the table, --json, --gpus, unknown names."""

from __future__ import annotations

import json

import pytest

from distspec.cli.main import main


def test_table_lists_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resources"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "CPU", "GPU", "MEMORY", "DEVICES", "CAPABILITIES"]
    assert len(lines) == 1 + 71
    p4d = next(line for line in lines if line.startswith("aws_p4d.24xlarge "))
    assert p4d.split()[:3] == ["aws_p4d.24xlarge", "96", "8"]
    assert "vpc.amazonaws.com/efa=4" in p4d
    assert "node.kubernetes.io/instance-type=p4d.24xlarge" in p4d


def test_json_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resources", "--json", "gpu.large", "aws_trn1.32xlarge"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["gpu.large", "aws_trn1.32xlarge"]
    assert (rows[0]["cpu"], rows[0]["gpu"], rows[0]["mem_mb"]) == (32, 4, 131072)
    assert rows[1]["devices"] == {"vpc.amazonaws.com/efa": 8, "aws.amazon.com/neurondevice": 16}
    assert main(["resources", "--json", "--gpus", "8"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["gpu"] == 8 for r in rows)
    assert "gpu.xlarge" in {r["name"] for r in rows}


def test_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resources", "aws_p3.8xlarg"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "did you mean 'aws_p3.8xlarge' (4 GPUs)?" in err
