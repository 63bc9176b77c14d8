"""Named host types: TorchX's names and sizes, lookup, listing, did-you-mean."""

from __future__ import annotations

import pytest

from distspec.errors import SpecError
from distspec.specs.app import Resource
from distspec.specs.resources import (
    BUILTIN_RESOURCES,
    EFA_DEVICE,
    K8S_INSTANCE_TYPE,
    NEURON_DEVICE,
    NamedResources,
)

# Written down from torchx nightly 2026.10.26 (torchx.specs.named_resources_generic
# and named_resources_aws, printed once by hand): name -> (cpu, gpu, memMB, EFA, Neuron).
TORCHX = {
    "gpu.small": (8, 1, 32768, 0, 0),
    "gpu.medium": (16, 2, 65536, 0, 0),
    "gpu.large": (32, 4, 131072, 0, 0),
    "gpu.xlarge": (64, 8, 262144, 0, 0),
    "cpu.nano": (1, 0, 512, 0, 0),
    "cpu.micro": (1, 0, 1024, 0, 0),
    "cpu.small": (1, 0, 2048, 0, 0),
    "cpu.medium": (2, 0, 4096, 0, 0),
    "cpu.large": (2, 0, 8192, 0, 0),
    "cpu.xlarge": (8, 0, 32768, 0, 0),
    "aws_t3.medium": (2, 0, 3932, 0, 0),
    "aws_m5.2xlarge": (8, 0, 31456, 0, 0),
    "aws_c5.18xlarge": (72, 0, 139586, 0, 0),
    "aws_p3.2xlarge": (8, 1, 59963, 0, 0),
    "aws_p3.8xlarge": (32, 4, 239852, 0, 0),
    "aws_p3.16xlarge": (64, 8, 479704, 0, 0),
    "aws_p3dn.24xlarge": (96, 8, 754944, 1, 0),
    "aws_p4d.24xlarge": (96, 8, 1132416, 4, 0),
    "aws_p5.48xlarge": (192, 8, 2013184, 32, 0),
    "aws_p6e-gb200.36xlarge": (144, 4, 943680, 16, 0),
    "aws_g4dn.12xlarge": (48, 4, 188736, 1, 0),
    "aws_g5.48xlarge": (192, 8, 754944, 1, 0),
    "aws_g6e.24xlarge": (96, 4, 754944, 2, 0),
    "aws_trn1.32xlarge": (128, 0, 503296, 8, 16),
    "aws_inf2.48xlarge": (192, 0, 754944, 0, 12),
}


@pytest.mark.parametrize("name", sorted(TORCHX))
def test_same_machine_as_torchx(name: str) -> None:
    cpu, gpu, mem, efa, neuron = TORCHX[name]
    r = NamedResources().get(name)
    assert (r.cpu, r.gpu, r.mem_mb) == (cpu, gpu, mem)
    devices = {k: v for k, v in ((EFA_DEVICE, efa), (NEURON_DEVICE, neuron)) if v}
    assert dict(r.devices) == devices
    if name.startswith("aws_"):
        assert dict(r.capabilities) == {K8S_INSTANCE_TYPE: name.removeprefix("aws_")}
    else:
        assert not r.capabilities


def test_every_torchx_name_is_there() -> None:
    # 10 generic + 61 AWS names in the nightly; none of distspec's old sizes remain
    assert len(BUILTIN_RESOURCES) == 71
    assert all(n.startswith(("gpu.", "cpu.", "aws_")) for n in BUILTIN_RESOURCES)


def test_unknown_name_suggests_same_gpu_count() -> None:
    without = NamedResources({k: v for k, v in BUILTIN_RESOURCES.items() if k != "aws_p3.8xlarge"})
    for name in ("aws_p3.8xlarge", "aws_p3.8xlarg", "aws_p3.8xl"):
        with pytest.raises(SpecError) as info:
            without.get(name)
        text = str(info.value)
        assert "8 GPUs" not in text and "16xlarge" not in text, text
        assert "no similar host type with 4 GPUs" in text
    with pytest.raises(SpecError, match=r"did you mean 'aws_p3.8xlarge' \(4 GPUs\)\?"):
        NamedResources().get("aws_p3.8xlarg")


def test_unknown_generic_names_keep_gpu_or_cpu() -> None:
    with pytest.raises(SpecError) as info:
        NamedResources().get("gpu.lrge")
    assert "'gpu.large' (4 GPUs)" in str(info.value)
    assert "cpu." not in str(info.value)
    with pytest.raises(SpecError) as info:
        NamedResources().get("cpu.smal")
    assert "'cpu.small'" in str(info.value) and "gpu." not in str(info.value)


def test_unknown_name_without_hint_points_to_the_list() -> None:
    with pytest.raises(SpecError, match="no similar host type.*distspec resources"):
        NamedResources().get("zzz")


def test_extra_and_listing() -> None:
    extra = {"mybox": lambda: Resource(cpu=3, gpu=2, mem_mb=100)}
    named = NamedResources(extra=extra)
    assert named.get("mybox").gpu == 2
    rows = list(named.items())
    assert [r.name for r in rows[:5]] == [
        "gpu.small",
        "gpu.medium",
        "gpu.large",
        "gpu.xlarge",
        "cpu.nano",
    ]
    assert rows[-1].name == "mybox" and rows[-1].origin == "extra"
    p3 = [r.name for r in rows if r.name.startswith("aws_p3.")]
    assert p3 == ["aws_p3.2xlarge", "aws_p3.8xlarge", "aws_p3.16xlarge"]  # by size
    assert rows[4].to_dict()["mem_mb"] == 512


def test_builtin_is_not_hidden_by_extra() -> None:
    named = NamedResources(extra={"gpu.small": lambda: Resource(gpu=99)})
    assert named.get("gpu.small").gpu == 1


def test_kubernetes_selects_the_instance_type() -> None:
    from distspec.components.binder import bind
    from distspec.components.loader import load
    from distspec.schedulers.kubernetes import KubernetesScheduler

    backend = KubernetesScheduler("t")
    argv = ["-h", "aws_p4d.24xlarge", "-j", "2", "--image", "img:1", "--script", "t.py"]
    app = bind(load("dist.spmd"), argv)

    def render(**cfg: str) -> str:
        request = backend.compile(app, backend.parse_options(cfg), app_id="t-0000abcd")
        return str(request.render())

    text = render()
    assert "nodeSelector:\n        node.kubernetes.io/instance-type: p4d.24xlarge\n" in text
    assert 'vpc.amazonaws.com/efa: "4"' in text
    text = render(node_selector="node.kubernetes.io/instance-type=other;zone=a")
    assert "node.kubernetes.io/instance-type: other\n        zone: a\n" in text
    plain = bind(
        load("dist.ddp"), ["--gpu", "1", "-j", "1x1", "--image", "img:1", "--script", "t.py"]
    )
    request = backend.compile(plain, backend.parse_options({}), app_id="t-0000abcd")
    assert "nodeSelector" not in request.render()


def test_names_ignore_case_as_in_torchx() -> None:
    assert NamedResources().get("GPU.Small") == NamedResources().get("gpu.small")
    assert NamedResources().get("AWS_P4D.24XLARGE").gpu == 8
    two = NamedResources(extra={"Box": lambda: Resource(gpu=1), "box": lambda: Resource(gpu=2)})
    assert two.get("box").gpu == 2  # an exact name wins
    with pytest.raises(SpecError, match="matches Box, box ignoring case"):
        two.get("BOX")
