"""Threads sized to the CPU the container may use: OUROBOROS_THREADS, else the cgroup quota capped
by the cores seen, else the affinity set, else os.cpu_count(); cgroup files are laid out in
tmp_path."""

from __future__ import annotations

import pytest
import torch

from ouroboros_core.config import ConfigError
from ouroboros_core.cpu import ThreadChoice, choose_threads, set_torch_threads, v2_cgroup_dirs


def lay_out(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def v1(quota: str, period: str = "100000", controller: str = "cpu") -> dict[str, str]:
    return {
        f"{controller}/cpu.cfs_quota_us": quota + "\n",
        f"{controller}/cpu.cfs_period_us": period + "\n",
    }


@pytest.mark.parametrize(
    "cpu_max, affinity, expected",
    [
        ("150000 100000\n", 4, ThreadChoice(1, "cgroup v2 cpu.max quota 150000/100000")),
        ("250000 100000\n", 8, ThreadChoice(2, "cgroup v2 cpu.max quota 250000/100000")),
        # half a core still runs one
        ("50000 100000\n", 4, ThreadChoice(1, "cgroup v2 cpu.max quota 50000/100000")),
        ("max 100000\n", 3, ThreadChoice(3, "CPU affinity (3 cores)")),
    ],
)
def test_a_cgroup_v2_quota_rounds_down_to_whole_threads(tmp_path, cpu_max, affinity, expected):
    root = lay_out(tmp_path, {"cpu.max": cpu_max})
    assert choose_threads(None, root, "0::/\n", affinity=affinity, cpu_count=64) == expected


def test_a_quota_above_the_cores_seen_is_capped_by_them(tmp_path):
    root = lay_out(tmp_path, {"cpu.max": "250000 100000\n"})
    assert choose_threads(None, root, affinity=1, cpu_count=64) == ThreadChoice(
        1, "cgroup v2 cpu.max quota 250000/100000, capped at the 1 cores seen"
    )
    # Without an affinity set the host's core count is the cap.
    assert (
        choose_threads(None, lay_out(tmp_path, {"cpu.max": "800000 100000"}), cpu_count=4).count
        == 4
    )


@pytest.mark.parametrize("controller", ["cpu", "cpu,cpuacct"])
def test_a_cgroup_v1_cfs_quota_counts_under_either_mount_name(tmp_path, controller):
    root = lay_out(tmp_path, v1("200000", controller=controller))
    assert choose_threads(None, root, affinity=8) == ThreadChoice(
        2, "cgroup v1 cfs quota 200000/100000"
    )


def test_an_unlimited_v1_quota_falls_to_the_affinity_set_then_the_core_count(tmp_path):
    root = lay_out(tmp_path, v1("-1"))
    assert choose_threads(None, root, affinity=3, cpu_count=64) == ThreadChoice(
        3, "CPU affinity (3 cores)"
    )
    assert choose_threads(None, root, affinity=None, cpu_count=6) == ThreadChoice(6, "cores seen")
    assert choose_threads(None, root, affinity=None, cpu_count=None) == ThreadChoice(
        1, "no CPU count known"
    )


@pytest.mark.parametrize(
    "cpu_max",
    [
        "garbage",
        "",
        "\n",
        "150000 -100000",
        "150000 0",
        "0 100000",
        "-1 100000",
        "150000",
        "1.5 100000",
        "150000 100000 7",
        "max",
        "\x00\x01",
        "\u00e9 100000",
    ],
)
def test_a_malformed_cpu_max_falls_through_to_the_next_source(tmp_path, cpu_max):
    assert (
        choose_threads(None, lay_out(tmp_path, {"cpu.max": cpu_max}), affinity=3).source
        == "CPU affinity (3 cores)"
    )
    assert choose_threads(None, lay_out(tmp_path, v1("100000")), affinity=3) == ThreadChoice(
        1, "cgroup v1 cfs quota 100000/100000"
    )


@pytest.mark.parametrize(
    "files",
    [
        v1("abc"),
        v1("150000", "-5"),
        v1("150000", ""),
        v1("0"),
        {"cpu/cpu.cfs_quota_us": "150000"},
        {"cpu.max/oops": "a directory, not a file"},
    ],
)
def test_malformed_or_unreadable_cgroup_files_never_stop_start_up(tmp_path, files):
    assert choose_threads(None, lay_out(tmp_path, files), affinity=2) == ThreadChoice(
        2, "CPU affinity (2 cores)"
    )


def test_a_nested_cgroup_reads_its_own_cpu_max_and_its_parents(tmp_path):
    root = lay_out(tmp_path, {"cpu.max": "max 100000", "kubepods/pod1/c1/cpu.max": "100000 100000"})
    assert choose_threads(
        None, root, "1:cpu:/\n0::/kubepods/pod1/c1\n", affinity=8
    ) == ThreadChoice(1, "cgroup v2 cpu.max quota 100000/100000 at /kubepods/pod1/c1")
    # A limit on a parent (the pod) binds the container below it; the tightest one wins.
    root = lay_out(
        tmp_path,
        {
            "kubepods/pod1/c1/cpu.max": "max 100000",
            "kubepods/pod1/cpu.max": "200000 100000",
            "kubepods/cpu.max": "400000 100000",
        },
    )
    assert choose_threads(None, root, "0::/kubepods/pod1/c1\n", affinity=8) == ThreadChoice(
        2, "cgroup v2 cpu.max quota 200000/100000 at /kubepods/pod1"
    )


def test_a_nested_path_missing_under_the_root_falls_back_to_the_roots_cpu_max(tmp_path):
    # Inside a cgroup namespace the container's own cgroup is mounted at the root.
    root = lay_out(tmp_path, {"cpu.max": "300000 100000"})
    assert choose_threads(None, root, "0::/docker/abc123\n", affinity=8).source == (
        "cgroup v2 cpu.max quota 300000/100000"
    )


def test_the_v2_directories_run_innermost_first_and_never_climb_out_of_the_root(tmp_path):
    assert v2_cgroup_dirs(tmp_path, "0::/a/b\n") == [tmp_path / "a" / "b", tmp_path / "a", tmp_path]
    assert v2_cgroup_dirs(tmp_path, "0::/\n") == v2_cgroup_dirs(tmp_path, None) == [tmp_path]
    assert v2_cgroup_dirs(tmp_path, "0::/../../etc\n") == [tmp_path]
    # v1 lines name no v2 path
    assert v2_cgroup_dirs(tmp_path, "4:memory:/x\n1:cpu:/y\n") == [tmp_path]


@pytest.mark.parametrize("override, expected", [("3", 3), (" 2\n", 2), ("1024", 1024)])
def test_a_valid_override_wins_over_every_quota(tmp_path, override, expected):
    root = lay_out(tmp_path, {"cpu.max": "100000 100000", **v1("100000")})
    assert choose_threads(override, root, affinity=1) == ThreadChoice(expected, "OUROBOROS_THREADS")


def test_a_blank_override_counts_as_unset(tmp_path):
    root = lay_out(tmp_path, {"cpu.max": "100000 100000"})
    assert (
        choose_threads("", root, affinity=4).count
        == choose_threads("  ", root, affinity=4).count
        == 1
    )


@pytest.mark.parametrize("override", ["0", "-2", "two", "1.5", "1025", "+2", "2 threads", "\u0663"])
def test_a_bad_override_is_an_error_naming_the_variable_and_the_allowed_values(tmp_path, override):
    with pytest.raises(ConfigError) as raised:
        choose_threads(override, tmp_path, affinity=4)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == (
        f"OUROBOROS_THREADS must be a whole number of threads from 1 to 1024 "
        f"(or unset, to follow the container's CPU quota); got {override!r}"
    )


def test_a_choice_prints_as_its_count_and_where_it_came_from():
    assert (
        str(ThreadChoice(1, "cgroup v2 cpu.max quota 150000/100000"))
        == "1 (cgroup v2 cpu.max quota 150000/100000)"
    )


def test_set_torch_threads_changes_torchs_thread_count_and_a_bad_value_changes_nothing():
    old = torch.get_num_threads()
    wanted = 2 if old != 2 else 1
    try:
        assert set_torch_threads({"OUROBOROS_THREADS": str(wanted)}) == ThreadChoice(
            wanted, "OUROBOROS_THREADS"
        )
        assert torch.get_num_threads() == wanted
        with pytest.raises(ConfigError, match="OUROBOROS_THREADS"):
            set_torch_threads({"OUROBOROS_THREADS": "0"})
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(old)
