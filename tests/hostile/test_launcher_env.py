"""Hostile launcher environments: ``detect()`` gives one RuntimeEnvError naming the variable, or the right ranks.

Every launcher variable distspec reads (torchrun's, Slurm's, MPICH's, Open MPI's,
PALS's, PBS's, ``MASTER_PORT``, ``DISTSPEC_DEGREES``) is fed malformed, zero,
huge and inconsistent values, and every file a variable names (``PBS_NODEFILE``,
``PALS_APINFO``, ``HYDRA_HOST_FILE``, ``--hostfile``) is fed every kind of file
that is not a readable list of hosts. The contract: a
:class:`~distspec.errors.RuntimeEnvError` whose variables name the culprit, never
another exception, never a hang (each test runs under a timeout), never a wrong rank.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distspec.errors import RuntimeEnvError, SpecError
from distspec.runtime.env import DistEnv, detect
from distspec.runtime.hosts import (
    MAX_FILE_BYTES,
    MAX_RANKS,
    clip,
    expand_nodelist,
    read_apinfo,
    read_nodefile,
    tasks_per_node,
)
from distspec.specs.degrees import Degrees

pytestmark = pytest.mark.timeout(120)

APINFO = Path(__file__).resolve().parent.parent / "data" / "runtime" / "apinfo-2x2.bin"
FIXED = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# ---------------------------------------------------------------------------
# valid environments, one per launcher (see tests/runtime/test_env.py for where they come from)

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "n0", "MASTER_PORT": "29400",
}  # fmt: skip
SRUN = {
    "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[0-1]", "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "n[0-1]", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
}  # fmt: skip
# A Slurm without the SLURM_STEP_* sizes: the job-wide ones are read instead.
SRUN_JOB_VARS = {
    "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[0-1]", "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
    "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)",
}  # fmt: skip
MPICH = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
         "MASTER_ADDR": "n0"}  # fmt: skip
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "n0",
}  # fmt: skip
CRAY_PALS = {
    "PALS_RANKID": "5", "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "1", "PMI_RANK": "5",
    "PMI_SIZE": "8", "PALS_LOCAL_SIZE": "4", "MASTER_ADDR": "x1000c0s0b0n0",
}  # fmt: skip
PALS_APINFO = {"PALS_RANKID": "2", "PALS_NODEID": "1", "PALS_APINFO": str(APINFO)}
PBSDSH = {"PBS_JOBID": "7.server", "PBS_VNODENUM": "3", "PBS_TASKNUM": "4"}  # + PBS_NODEFILE
NODEFILE = "a\na\nb\nb\n"

#: (environment, expected (rank, local_rank, world, local_world, node_rank, num_nodes)).
BASES: dict[str, tuple[dict[str, str], tuple[int, ...]]] = {
    "torchrun": (TORCHRUN, (5, 1, 8, 4, 1, 2)),
    "srun": (SRUN, (3, 1, 4, 2, 1, 2)),
    "srun-job-vars": (SRUN_JOB_VARS, (3, 1, 4, 2, 1, 2)),
    "mpich": (MPICH, (3, 1, 4, 2, 1, 2)),
    "openmpi": (OPENMPI, (3, 1, 4, 2, 1, 2)),
    "cray-pals": (CRAY_PALS, (5, 1, 8, 4, 1, 2)),
    "pals-apinfo": (PALS_APINFO, (2, 0, 4, 2, 1, 2)),
    "pbsdsh": (PBSDSH, (3, 1, 4, 2, 1, 2)),
}

#: The numeric variables each launcher reads: (base, variable, is a count (>= 1)).
NUMERIC = [
    ("torchrun", "RANK", False), ("torchrun", "WORLD_SIZE", True),
    ("torchrun", "LOCAL_RANK", False), ("torchrun", "LOCAL_WORLD_SIZE", True),
    ("torchrun", "GROUP_RANK", False), ("torchrun", "GROUP_WORLD_SIZE", True),
    ("torchrun", "MASTER_PORT", True),
    ("srun", "SLURM_PROCID", False), ("srun", "SLURM_LOCALID", False),
    ("srun", "SLURM_NODEID", False), ("srun", "SLURM_STEP_NUM_TASKS", True),
    ("srun", "SLURM_STEP_NUM_NODES", True),
    ("srun-job-vars", "SLURM_NTASKS", True), ("srun-job-vars", "SLURM_NNODES", True),
    ("mpich", "PMI_RANK", False), ("mpich", "PMI_SIZE", True),
    ("mpich", "MPI_LOCALRANKID", False), ("mpich", "MPI_LOCALNRANKS", True),
    ("openmpi", "OMPI_COMM_WORLD_RANK", False), ("openmpi", "OMPI_COMM_WORLD_SIZE", True),
    ("openmpi", "OMPI_COMM_WORLD_LOCAL_RANK", False),
    ("openmpi", "OMPI_COMM_WORLD_LOCAL_SIZE", True),
    ("cray-pals", "PALS_RANKID", False), ("cray-pals", "PALS_LOCAL_RANKID", False),
    ("cray-pals", "PALS_NODEID", False), ("cray-pals", "PMI_RANK", False),
    ("cray-pals", "PMI_SIZE", True), ("cray-pals", "PALS_LOCAL_SIZE", True),
    ("pals-apinfo", "PALS_RANKID", False), ("pals-apinfo", "PALS_NODEID", False),
    ("pbsdsh", "PBS_VNODENUM", False), ("pbsdsh", "PBS_TASKNUM", False),
]  # fmt: skip
NUMERIC_IDS = [f"{base}-{var}" for base, var, _ in NUMERIC]


@pytest.fixture
def nodefile(tmp_path: Path) -> Path:
    path = tmp_path / "nodefile"
    path.write_text(NODEFILE)
    return path


def _env(base: str, nodefile: Path) -> dict[str, str]:
    env = dict(BASES[base][0])
    if base == "pbsdsh":
        env["PBS_NODEFILE"] = str(nodefile)
    return env


def _layout(env: DistEnv) -> tuple[int, ...]:
    return (env.rank, env.local_rank, env.world_size, env.local_world_size, env.node_rank,
            env.num_nodes)  # fmt: skip


def _refused(environ: dict[str, str]) -> RuntimeEnvError:
    with pytest.raises(RuntimeEnvError) as info:
        detect(environ)
    return info.value


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_base_environments_are_valid(base: str, nodefile: Path) -> None:
    """Not a hostile class: the environments the classes below break are themselves valid."""
    assert _layout(detect(_env(base, nodefile))) == BASES[base][1]


# ---------------------------------------------------------------------------
# numbers

# What int() accepts but a launcher never writes, and plain garbage.
_INT_ACCEPTS = ["1_0", " 3", "3 ", "+3", "\uff13", "\u0663", "\u0967", "\t2\n", "0_0", "-0"]
_NOT_DIGITS = st.one_of(
    st.sampled_from(
        [*_INT_ACCEPTS, "-1", "0x1", "1e3", "1.0", "one", "3a", "\u00b2", "\x00", "\u202e1"]
    ),
    st.integers(max_value=-1).map(str),
    st.text(alphabet=st.characters(categories=["Nd"]), min_size=1).filter(
        lambda s: not s.isascii()
    ),
    st.text(min_size=1).filter(lambda s: re.fullmatch("[0-9]+", s) is None),
)


@pytest.mark.parametrize(("base", "var", "count"), NUMERIC, ids=NUMERIC_IDS)
@FIXED
@given(value=_NOT_DIGITS)
def test_non_numeric_launcher_values(
    base: str, var: str, count: bool, value: str, nodefile: Path
) -> None:
    """Launcher variables that are not ASCII digits (int()'s extras, signs, other scripts' digits, text).

    20 Hypothesis examples per variable: values int() accepts ('1_0', ' 3', '+3',
    fullwidth and Arabic-Indic digits), negatives, non-ASCII digits and arbitrary text.
    """
    error = _refused(_env(base, nodefile) | {var: value})
    assert error.variables == {var: clip(value)}
    assert "not a whole number" in str(error)


@pytest.mark.parametrize(("base", "var"), [(b, v) for b, v, c in NUMERIC if c],
                         ids=[i for i, (_, _, c) in zip(NUMERIC_IDS, NUMERIC, strict=True) if c])  # fmt: skip
@pytest.mark.parametrize("zero", ["0", "00"])
def test_zero_sizes(base: str, var: str, zero: str, nodefile: Path) -> None:
    """A world size, local size, node count or port of zero."""
    error = _refused(_env(base, nodefile) | {var: zero})
    assert error.variables == {var: zero} and "at least 1" in str(error)


@pytest.mark.parametrize(("base", "var", "count"), NUMERIC, ids=NUMERIC_IDS)
@FIXED
@given(value=st.one_of(
    st.integers(min_value=MAX_RANKS + 1, max_value=10**40).map(str),
    st.integers(min_value=13, max_value=20_000).map(lambda n: "9" * n),
    st.sampled_from(["16777217", "18446744073709551616", "0" * 30 + "1" * 13]),
))  # fmt: skip
def test_huge_launcher_values(base: str, var: str, count: bool, value: str, nodefile: Path) -> None:
    """Numbers past any real machine (more than 2**24 ranks, 13+ digits, 20,000 digits).

    20 Hypothesis examples per variable. The message stays short.
    """
    error = _refused(_env(base, nodefile) | {var: value})
    assert error.variables == {var: clip(value)} and "larger than" in str(error)
    assert len(str(error)) < 300


@pytest.mark.parametrize("port", ["65536", "70000", "99999", "0"])
def test_ports_out_of_range(port: str) -> None:
    """MASTER_PORT outside 1..65535."""
    error = _refused(TORCHRUN | {"MASTER_PORT": port})
    assert error.variables == {"MASTER_PORT": port}


# ---------------------------------------------------------------------------
# indices past their counts: the diagnosis names the index and the count


def _past(base: str, index: int, size: int) -> tuple[dict[str, str], tuple[str, ...], str]:
    """``base``'s environment with its rank ``index`` of ``size`` ranks (index >= size)."""
    if base == "torchrun":
        return (TORCHRUN | {"RANK": str(index), "WORLD_SIZE": str(size), "LOCAL_WORLD_SIZE": "1",
                            "LOCAL_RANK": "0", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": str(size)},
                ("RANK", "WORLD_SIZE"), "not below the world size")  # fmt: skip
    if base == "env":
        return ({"RANK": str(index), "WORLD_SIZE": str(size)}, ("RANK", "WORLD_SIZE"),
                "not below the world size")  # fmt: skip
    if base == "srun":
        return (SRUN | {"SLURM_PROCID": str(index), "SLURM_STEP_NUM_TASKS": str(size),
                        "SLURM_STEP_TASKS_PER_NODE": f"{size}", "SLURM_STEP_NUM_NODES": "1",
                        "SLURM_STEP_NODELIST": "n0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0"},
                ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"), "not below the world size")  # fmt: skip
    if base == "mpich":
        return ({"PMI_RANK": str(index), "PMI_SIZE": str(size), "MPI_LOCALRANKID": "0",
                 "MPI_LOCALNRANKS": "1"}, ("PMI_RANK", "PMI_SIZE"),
                "not below the world size")  # fmt: skip
    if base == "openmpi":
        return ({"OMPI_COMM_WORLD_RANK": str(index), "OMPI_COMM_WORLD_SIZE": str(size),
                 "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
                ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                "not below the world size")  # fmt: skip
    if base == "cray-pals":
        return ({"PALS_RANKID": str(index), "PMI_RANK": str(index), "PMI_SIZE": str(size),
                 "PALS_LOCAL_RANKID": "0", "PALS_LOCAL_SIZE": "1"},
                ("PALS_RANKID", "PMI_SIZE"), "not below the world size")  # fmt: skip
    if base == "pals-apinfo":
        return (PALS_APINFO | {"PALS_RANKID": str(index + 4 - size)}, ("PALS_RANKID",),
                "not among the 4 ranks")  # fmt: skip
    assert base == "pbsdsh"
    return ({"PBS_VNODENUM": str(index + 4 - size)}, ("PBS_VNODENUM",), "past the 4 lines")


_PAST_BASES = ["torchrun", "env", "srun", "mpich", "openmpi", "cray-pals", "pals-apinfo", "pbsdsh"]


@pytest.mark.parametrize("base", _PAST_BASES)
@FIXED
@given(size=st.integers(1, 4), extra=st.one_of(st.integers(0, 3), st.integers(0, MAX_RANKS - 5)))
def test_rank_not_below_world_size(base: str, size: int, extra: int, nodefile: Path) -> None:
    """A global rank at or past the world size (says so; never "set MASTER_ADDR").

    20 Hypothesis examples per launcher: world sizes 1..4, ranks from the size up to 2**24.
    """
    environ, names, words = _past(base, size + extra, size)
    if base == "pbsdsh":
        environ = PBSDSH | {"PBS_NODEFILE": str(nodefile)} | environ
    error = _refused(environ)
    assert words in str(error) and "MASTER_ADDR" not in str(error)
    assert set(names) <= set(error.variables)


_LOCAL = {
    "torchrun": (TORCHRUN, "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    "mpich": (MPICH, "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    "openmpi": (OPENMPI, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    "cray-pals": (CRAY_PALS, "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),
    "srun": (SRUN, "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
}


@pytest.mark.parametrize("base", sorted(_LOCAL))
@FIXED
@given(extra=st.one_of(st.integers(0, 3), st.integers(0, MAX_RANKS - 5)))
def test_local_rank_not_below_local_size(base: str, extra: int) -> None:
    """A local rank at or past the processes on its node.

    20 Hypothesis examples per launcher, local ranks from the local size up to 2**24.
    """
    environ, lrank, lsize = _LOCAL[base]
    size = 2 if base == "srun" else int(environ[lsize])
    error = _refused(environ | {lrank: str(size + extra)})
    assert "not below the" in str(error) and "processes on this node" in str(error)
    assert {lrank, lsize} <= set(error.variables)


_NODE = {
    "torchrun": (TORCHRUN, "GROUP_RANK", "node rank"),
    "srun": (SRUN, "SLURM_NODEID", "past the 2 nodes"),
    "cray-pals": (CRAY_PALS, "PALS_NODEID", "node rank"),
    "pals-apinfo": (PALS_APINFO, "PALS_NODEID", "disagrees with the apinfo file"),
}


@pytest.mark.parametrize("base", sorted(_NODE))
@FIXED
@given(node=st.one_of(st.integers(2, 5), st.integers(2, MAX_RANKS)))
def test_node_rank_not_below_node_count(base: str, node: int) -> None:
    """A node index at or past the job's node count (2 nodes here).

    20 Hypothesis examples per launcher.
    """
    environ, var, words = _NODE[base]
    error = _refused(environ | {var: str(node)})
    assert words in str(error) and var in error.variables


_DISAGREE = {
    "tasks-per-node-sum": (SRUN | {"SLURM_STEP_TASKS_PER_NODE": "3,2"},
                           {"SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"}),
    "tasks-per-node-length": (SRUN | {"SLURM_STEP_TASKS_PER_NODE": "1(x4)"},
                              {"SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES"}),
    "step-nodelist-vs-num-nodes": (SRUN | {"SLURM_STEP_NODELIST": "n[0-2]"},
                                   {"SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES"}),
    "more-nodes-than-tasks": (SRUN | {"SLURM_STEP_NUM_NODES": "5"},
                              {"SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS"}),
    "job-vars-tasks-sum": (SRUN_JOB_VARS | {"SLURM_NTASKS": "5"},
                           {"SLURM_TASKS_PER_NODE", "SLURM_NTASKS"}),
    "torch-nodes-times-local": (TORCHRUN | {"GROUP_WORLD_SIZE": "6"},
                                {"GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE", "WORLD_SIZE"}),
    "torch-local-above-world": (TORCHRUN | {"LOCAL_WORLD_SIZE": "9", "GROUP_WORLD_SIZE": "1",
                                            "GROUP_RANK": "0"},
                                {"LOCAL_WORLD_SIZE", "WORLD_SIZE"}),
    "mpich-local-above-world": (MPICH | {"MPI_LOCALNRANKS": "5"}, {"MPI_LOCALNRANKS", "PMI_SIZE"}),
    "openmpi-vs-mpich": (MPICH | OPENMPI | {"OMPI_COMM_WORLD_SIZE": "8"},
                         {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}),
    "pals-vs-pmi-rank": (CRAY_PALS | {"PMI_RANK": "4"}, {"PALS_RANKID", "PMI_RANK"}),
    "pals-local-vs-apinfo": (PALS_APINFO | {"PALS_LOCAL_RANKID": "1"},
                             {"PALS_LOCAL_RANKID", "PALS_APINFO"}),
    "torch-half-local-pair": ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"},
                              {"LOCAL_RANK"}),
}  # fmt: skip


@pytest.mark.parametrize(("environ", "names"), list(_DISAGREE.values()), ids=list(_DISAGREE))
def test_sizes_that_disagree(environ: dict[str, str], names: set[str]) -> None:
    """Two variables (or a variable and a file) that describe different jobs."""
    error = _refused(environ)
    assert names <= set(error.variables), str(error)
    assert "MASTER_ADDR" not in str(error)


# ---------------------------------------------------------------------------
# valid layouts: the right ranks, for every launcher


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[list[int], int]:
    """Processes per node (uneven allowed) and a global rank."""
    per_node = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    return per_node, draw(st.integers(0, sum(per_node) - 1))


def _where(per_node: list[int], rank: int) -> tuple[int, int]:
    node, start = 0, 0
    while rank >= start + per_node[node]:
        start += per_node[node]
        node += 1
    return node, rank - start


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "mpich", "openmpi", "pbsdsh"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(layout=_layouts())
def test_valid_layouts_give_the_right_ranks(
    launcher: str, layout: tuple[list[int], int], tmp_path: Path
) -> None:
    """Not a hostile class: random valid layouts, as each launcher writes them, detect exactly.

    40 Hypothesis examples per launcher; MPI and torchrun layouts are even (their
    variables cannot describe uneven nodes), Slurm's and PBS's uneven.
    """
    per_node, rank = layout
    if launcher in ("torchrun", "mpich", "openmpi"):
        per_node = [per_node[0]] * len(per_node)
        rank %= sum(per_node)
    node, local = _where(per_node, rank)
    world, lw, nodes = sum(per_node), per_node[node], len(per_node)
    hosts = [f"h{i}" for i in range(nodes)]
    environ: dict[str, str]
    if launcher == "torchrun":
        environ = {"TORCHELASTIC_RUN_ID": "r", "RANK": str(rank), "WORLD_SIZE": str(world),
                   "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(lw),
                   "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nodes), "MASTER_ADDR": "h0",
                   "MASTER_PORT": "29400"}  # fmt: skip
    elif launcher == "srun":
        environ = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
                   "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
                   "SLURM_STEP_NUM_TASKS": str(world), "SLURM_STEP_NUM_NODES": str(nodes),
                   "SLURM_STEP_TASKS_PER_NODE": ",".join(map(str, per_node)),
                   "SLURM_STEP_NODELIST": ",".join(hosts)}  # fmt: skip
    elif launcher == "mpich":
        environ = {"PMI_RANK": str(rank), "PMI_SIZE": str(world), "MPI_LOCALRANKID": str(local),
                   "MPI_LOCALNRANKS": str(lw), "MASTER_ADDR": "h0"}  # fmt: skip
    elif launcher == "openmpi":
        environ = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
                   "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                   "OMPI_COMM_WORLD_LOCAL_SIZE": str(lw), "MASTER_ADDR": "h0"}  # fmt: skip
    else:
        path = tmp_path / "nodes"
        path.write_text("".join(f"{h}\n" * n for h, n in zip(hosts, per_node, strict=True)))
        environ = {"PBS_JOBID": "1.s", "PBS_NODEFILE": str(path), "PBS_VNODENUM": str(rank)}
    env = detect(environ)
    assert _layout(env) == (rank, local, world, lw, node, nodes)
    assert env.master_addr == (
        "127.0.0.1" if nodes == 1 and launcher in ("srun", "pbsdsh") else "h0"
    )


# ---------------------------------------------------------------------------
# Slurm's compressed forms, MASTER_ADDR, DISTSPEC_DEGREES

_NODELISTS = {
    "unbalanced": "n[0-1",
    "nested": "n[[0-1]]",
    "reversed-range": "n[5-1]",
    "one-huge-range": "n[0-99999999]",
    "many-ranges-past-the-cap": ",".join(f"r{i}x[0-99999]" for i in range(3)),
    "non-ascii-digits": "n[\uff10-\uff11]",
    "control-character": "n0,\x1b[31mn1",
    "bidi-override": "n0,\u202en1",
    "space": "n0 n1",
    "only-commas": ",,,",
}


@pytest.mark.parametrize("value", list(_NODELISTS.values()), ids=list(_NODELISTS))
@pytest.mark.parametrize("var", ["SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST"])
def test_malformed_slurm_node_lists(var: str, value: str) -> None:
    """Slurm node lists that do not parse, name no host, or name millions of hosts."""
    environ = SRUN | {var: value}
    if var == "SLURM_JOB_NODELIST":
        del environ["SLURM_STEP_NODELIST"]  # else the step's list is read
    error = _refused(environ)
    assert var in str(error)
    assert "\x1b" not in str(error) and "\u202e" not in str(error)


_TASKS = ["", "2(x2", "2(x)", "x2", "2(x2),", "-1", "0", "2(x0)", "1(x100000000)",
          "1(x262144),1", "\uff12(x2)", "2(x2)\n", "2 (x2)", "1_0", "+2", "9" * 40]  # fmt: skip


@pytest.mark.parametrize("value", _TASKS, ids=[repr(v)[:30] for v in _TASKS])
def test_malformed_tasks_per_node(value: str) -> None:
    """SLURM_STEP_TASKS_PER_NODE that is not N(xK),...: garbage, zero, non-ASCII, millions of nodes."""
    if value == "":
        # unset: the local size comes from the task and node counts instead
        assert detect(SRUN | {"SLURM_STEP_TASKS_PER_NODE": value}).local_world_size == 2
        return
    error = _refused(SRUN | {"SLURM_STEP_TASKS_PER_NODE": value})
    assert error.variables == {"SLURM_STEP_TASKS_PER_NODE": clip(value)}


_ADDRS = [
    "h\u202eost",
    "h\x1b[31m",
    "two words",
    "a" * 300,
    "\uff48\uff4f\uff53\uff54",
    "host\n",
    "host;rm",
]


@pytest.mark.parametrize("value", _ADDRS, ids=[repr(v)[:20] for v in _ADDRS])
def test_malformed_master_addr(value: str) -> None:
    """MASTER_ADDR that is not a host name or address; control characters come back escaped."""
    error = _refused(TORCHRUN | {"MASTER_ADDR": value})
    assert "MASTER_ADDR" in str(error)
    assert not any(c in str(error) for c in "\u202e\x1b\n")
    assert len(str(error)) < 300


_DEGREES = ["tp=\uff13", "tp=\u0663", "tp=1_0", "tp=+2", "tp=-2", "tp=\u00b2", "tp=0", "tp=" + "9" * 5000,
            "tp=2,tp=2", "xx=2", "tp", "tp=2.0"]  # fmt: skip


@pytest.mark.parametrize("value", _DEGREES, ids=[repr(v)[:20] for v in _DEGREES])
def test_malformed_degrees(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DISTSPEC_DEGREES with non-ASCII digits, signs, underscores, zero, 5000 digits, repeats."""
    from distspec.runtime.initialize import _degrees

    with pytest.raises(SpecError):
        Degrees.parse(value)
    monkeypatch.setenv("DISTSPEC_DEGREES", value)
    with pytest.raises(RuntimeEnvError) as info:
        _degrees(None, 4)
    assert "DISTSPEC_DEGREES" in str(info.value) or "tp=0" in str(info.value)
    assert len(str(info.value)) < 300


# ---------------------------------------------------------------------------
# files named by the environment


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _symlink(path: Path, target: str | Path) -> Path:
    path.symlink_to(target)
    return path


def _write(data: bytes) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(data)
        return path

    return make


def _sparse(path: Path) -> Path:
    with path.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


_KINDS: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "dev-zero": lambda p: Path("/dev/zero"),
    "dev-null": lambda p: Path("/dev/null"),
    "directory": lambda p: p.parent,
    "unix-socket": _socket,
    "dangling-symlink": lambda p: _symlink(p, p.parent / "nothing"),
    "symlink-loop": lambda p: _symlink(p, p),
    "symlink-to-fifo": lambda p: _symlink(p, _fifo(p.parent / "fifo")),
    "symlink-to-dev-zero": lambda p: _symlink(p, "/dev/zero"),
    "larger-than-16MiB": _sparse,
    "empty": _write(b""),
    "nul-bytes": _write(b"a\n\0\0\0\n"),
    "not-utf8": _write(b"\xff\xfe\x80host\n"),
    "comments-only": _write(b"# nothing\n\n   \n"),
    "control-characters": _write(b"h\x1b[31m0\n"),
    "non-ascii-host": _write("h\u00f4st\n".encode()),
    "zero-slots": _write(b"h0:0\n"),
    "huge-slots": _write(b"h0:99999999999999\n"),
    "slots-past-the-cap": _write(b"h0:16777216\nh1:1\n"),
    "proc-self-environ": lambda p: Path("/proc/self/environ"),
}
# What reads each file: (consumer, variable named in the error).
_CONSUMERS = ["PBS_NODEFILE", "PALS_APINFO", "HYDRA_HOST_FILE", "--hostfile"]


def _consume(consumer: str, path: Path) -> object:
    if consumer == "PBS_NODEFILE":
        return detect({"PBS_JOBID": "1.s", "PBS_NODEFILE": str(path), "PBS_VNODENUM": "0"})
    if consumer == "PALS_APINFO":
        return detect({"PALS_RANKID": "0", "PALS_APINFO": str(path)})
    if consumer == "HYDRA_HOST_FILE":
        return detect(MPICH | {"MASTER_ADDR": "", "HYDRA_HOST_FILE": str(path)}, mpi_comm=None)
    return read_nodefile(str(path), name="--hostfile")


@pytest.fixture(autouse=True)
def _no_mpi4py(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A bare mpiexec environment would otherwise ask mpi4py (when installed) first.
    monkeypatch.setattr("distspec.runtime.env._mpi4py_world", lambda: None)
    yield


@pytest.mark.timeout(20)
@pytest.mark.parametrize("consumer", _CONSUMERS)
@pytest.mark.parametrize("kind", list(_KINDS), ids=list(_KINDS))
def test_files_that_are_not_host_lists(kind: str, consumer: str, tmp_path: Path) -> None:
    """Files named by PBS_NODEFILE, PALS_APINFO, HYDRA_HOST_FILE or --hostfile that are not readable host lists.

    FIFOs, devices, directories, sockets, dangling symlinks, symlink loops, files past
    16 MiB, binary, non-UTF-8, empty, bad host names, impossible slot counts. Each is
    refused without blocking (a FIFO with no writer would block an ordinary open).
    """
    path = _KINDS[kind](tmp_path / "file")
    with pytest.raises(RuntimeEnvError) as info:
        _consume(consumer, path)
    assert consumer in str(info.value)


def _apinfo(
    *, pes: list[tuple[int, int, int]], nodes: list[str], pe_size: int = 12, node_size: int = 68,
    npes: int | None = None, nnodes: int | None = None, version: int = 1,
) -> bytes:  # fmt: skip
    header = struct.Struct("<i4xQQQi4xQQi4xQQi4xQQi4xQQi4x")
    pe_off = header.size
    node_off = pe_off + pe_size * len(pes)
    body = b"".join(struct.pack("<iii", *pe).ljust(pe_size, b"\0") for pe in pes)
    body += b"".join(
        (struct.pack("<i", i) + n.encode()).ljust(node_size, b"\0") for i, n in enumerate(nodes)
    )
    fields = (version, 0, 0, 0, 0, 0, 0, 0, pe_size, pe_off,
              len(pes) if npes is None else npes, node_size, node_off,
              len(nodes) if nnodes is None else nnodes, 0, 0, 0)  # fmt: skip
    return header.pack(*fields) + body


def test_the_apinfo_writer_matches_the_recorded_file(tmp_path: Path) -> None:
    """Not a hostile class: _apinfo writes what Slurm's cray_shasta wrote here."""
    recorded = read_apinfo(APINFO)
    assert recorded is not None
    path = tmp_path / "a"
    path.write_bytes(_apinfo(pes=list(recorded.pes), nodes=list(recorded.nodes)))
    assert read_apinfo(path) == recorded


_BAD_APINFO = {
    "node-index-past-the-nodes": dict(pes=[(0, 0, 0), (0, 0, 5)], nodes=["n0", "n1"]),
    "negative-node-index": dict(pes=[(0, 0, 0), (0, 0, -1)], nodes=["n0", "n1"]),
    "duplicate-local-rank": dict(pes=[(0, 0, 0), (0, 0, 0)], nodes=["n0"]),
    "negative-local-rank": dict(pes=[(-1, 0, 0)], nodes=["n0"]),
    "zero-pe-size-and-2**31-ranks": dict(pes=[(0, 0, 0)], nodes=["n0"], pe_size=0, npes=2**31 - 1),
    "ranks-past-the-file": dict(pes=[(0, 0, 0)], nodes=["n0"], npes=1000),
    "nodes-past-the-file": dict(pes=[(0, 0, 0)], nodes=["n0"], nnodes=2**31 - 1),
    "no-ranks": dict(pes=[], nodes=["n0"]),
    "bad-host-name": dict(pes=[(0, 0, 0)], nodes=["n\x1b0"]),
    "non-ascii-host-name": dict(pes=[(0, 0, 0)], nodes=["n\u00f6"]),
}


@pytest.mark.parametrize("spec", list(_BAD_APINFO.values()), ids=list(_BAD_APINFO))
def test_inconsistent_apinfo_files(spec: dict[str, object], tmp_path: Path) -> None:
    """Version-1 apinfo files whose tables contradict themselves or the file's size."""
    path = tmp_path / "apinfo"
    path.write_bytes(_apinfo(**spec))  # type: ignore[arg-type]
    with pytest.raises(RuntimeEnvError, match="PALS_APINFO"):
        detect({"PALS_RANKID": "0", "PALS_APINFO": str(path)})


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=600), version1=st.booleans())
def test_random_bytes_as_apinfo_and_host_files(data: bytes, version1: bool, tmp_path: Path) -> None:
    """Random bytes (half of them behind a version-1 apinfo header) as an apinfo file and as a nodefile.

    200 Hypothesis examples: each read gives a RuntimeEnvError, None (not a
    version-1 apinfo file) or a result whose every index is in range.
    """
    if version1:
        data = struct.pack("<i", 1) + data
    path = tmp_path / "f"
    path.write_bytes(data)
    try:
        info = read_apinfo(path)
    except RuntimeEnvError:
        info = None
    if info is not None:
        assert info.pes and all(0 <= pe[2] < len(info.nodes) and pe[0] >= 0 for pe in info.pes)
    try:
        slots = read_nodefile(path)
    except RuntimeEnvError:
        return
    assert slots and all(re.fullmatch(r"[A-Za-z0-9_.:%\[\]-]+", s) for s in slots)


# ---------------------------------------------------------------------------
# the readers called directly (launch uses them)


@pytest.mark.parametrize(
    ("call", "value"),
    [
        (lambda v: expand_nodelist(v, name="X"), "n[0-99999],m[0-99999],o[0-99999]"),
        (lambda v: tasks_per_node(v, name="X"), "1(x200000),1(x200000)"),
        (lambda v: tasks_per_node(v, name="X"), "0(x2)"),
    ],
    ids=["nodelist-300000-hosts", "tasks-400000-nodes", "tasks-zero"],
)
def test_hosts_helpers_bound_what_they_build(call: Callable[[str], object], value: str) -> None:
    """Compressed forms that would expand to hundreds of thousands of entries (or none)."""
    with pytest.raises(RuntimeEnvError) as info:
        call(value)
    assert "X" in str(info.value)
