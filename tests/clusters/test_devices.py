"""Device inventory, ``--gpus`` parsing and resolution, against a fake NVML."""

from __future__ import annotations

import doctest
import sys

import pytest
from conftest import FAKE_NVML_DIR, TWO_GPUS
from hypothesis import given, settings
from hypothesis import strategies as st

import daskgpu
import daskgpu.clusters.devices
import daskgpu.toolkit.chunking
import daskgpu.toolkit.numeric
import daskgpu.toolkit.params
from daskgpu.clusters import devices
from daskgpu.errors import DaskGPUError, DeviceSelectionError

UUID0 = TWO_GPUS["gpus"][0]["uuid"]  # GPU-1a2b3c4d-...
UUID1 = TWO_GPUS["gpus"][1]["uuid"]  # GPU-9f8e7d6c-...
MIG_A = "MIG-1111aaaa-0000-1111-2222-333344445555"
MIG_B = "MIG-1111bbbb-0000-1111-2222-333344445555"

# GPU 1 in MIG mode with two instances; the MIG UUIDs share the prefix "MIG-1111".
MIG_GPUS = {
    "gpus": [
        TWO_GPUS["gpus"][0],
        {
            **TWO_GPUS["gpus"][1],
            "migs": [
                {"uuid": MIG_A, "memory_total": 20 * 2**30, "memory_free": 19 * 2**30},
                {"uuid": MIG_B, "memory_total": 40 * 2**30},
            ],
        },
    ]
}

# Two GPUs whose UUIDs share a long prefix.
TWINS = {
    "gpus": [
        {"name": "Twin A", "uuid": "GPU-abcd0000-0000-0000-0000-000000000000"},
        {"name": "Twin B", "uuid": "GPU-abcd1111-0000-0000-0000-000000000000"},
    ]
}


@pytest.fixture
def two(fake_nvml):
    """The inventory of TWO_GPUS, read through the fake NVML."""
    fake_nvml(TWO_GPUS)
    return devices.inventory()


@pytest.fixture
def mig(fake_nvml):
    """The inventory of MIG_GPUS, read through the fake NVML."""
    fake_nvml(MIG_GPUS)
    return devices.inventory()


@pytest.fixture(scope="module")
def mig_module():
    """MIG_GPUS inventory for property tests (function-scoped fixtures upset Hypothesis)."""
    import json

    saved = sys.modules.pop("pynvml", None)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DASKGPU_TEST_NVML", json.dumps(MIG_GPUS))
            mp.syspath_prepend(str(FAKE_NVML_DIR))
            inv = devices.inventory()
    finally:  # leave no fake pynvml behind for later tests
        sys.modules.pop("pynvml", None)
        if saved is not None:
            sys.modules["pynvml"] = saved
    assert len(inv.all_devices()) == 4
    return inv


def _one_line(exc: BaseException) -> bool:
    text = str(exc)
    return bool(text.strip()) and "\n" not in text and "\r" not in text


# --------------------------------------------------------------------------------------------
# inventory()


def test_inventory_lists_gpus_in_nvidia_smi_order(two):
    assert two.reason is None
    assert len(two.devices) == len(TWO_GPUS["gpus"])
    for position, (dev, spec) in enumerate(zip(two.devices, TWO_GPUS["gpus"], strict=True)):
        assert dev.index == position
        assert dev.label == str(position)
        assert dev.name == spec["name"]
        assert dev.uuid == spec["uuid"]
        assert dev.memory_total == spec["memory_total"]
        assert dev.memory_free == spec["memory_free"]
        assert dev.pci_bus_id == spec["pci_bus_id"]
        assert dev.mig_index is None
        assert dev.migs == ()
    assert two.all_devices() == list(two.devices)


def test_inventory_follows_nvml_enumeration_order(fake_nvml):
    spec = {"gpus": list(reversed(TWO_GPUS["gpus"])) + [{"uuid": "GPU-cccc", "name": "Third"}]}
    fake_nvml(spec)
    inv = devices.inventory()
    assert [d.uuid for d in inv.devices] == [g["uuid"] for g in spec["gpus"]]
    assert [d.index for d in inv.devices] == [0, 1, 2]
    third = inv.devices[2]
    assert third.name == "Third"
    assert third.memory_free == third.memory_total > 0


def test_inventory_as_dict_is_json_ready(two):
    import json

    out = json.loads(json.dumps(two.devices[1].as_dict()))
    assert out["uuid"] == UUID1
    assert out["index"] == 1
    assert out["memory_free"] == TWO_GPUS["gpus"][1]["memory_free"]
    assert "mig_index" not in out
    assert "migs" not in out


def test_inventory_lists_mig_instances_under_their_gpu(mig):
    assert mig.reason is None
    gpu0, gpu1 = mig.devices
    assert gpu0.migs == ()
    assert [m.uuid for m in gpu1.migs] == [MIG_A, MIG_B]
    assert [m.label for m in gpu1.migs] == ["1/mig0", "1/mig1"]
    assert [m.mig_index for m in gpu1.migs] == [0, 1]
    for m in gpu1.migs:
        assert m.index == 1
        assert m.pci_bus_id == gpu1.pci_bus_id
        assert m.name == gpu1.name
        assert m.migs == ()
    assert gpu1.migs[0].memory_total == 20 * 2**30
    assert gpu1.migs[0].memory_free == 19 * 2**30
    assert gpu1.migs[1].memory_free == gpu1.migs[1].memory_total == 40 * 2**30
    # MIG instances are not whole GPUs, but all_devices() lists them after their GPU.
    assert [d.uuid for d in mig.all_devices()] == [UUID0, UUID1, MIG_A, MIG_B]
    described = gpu1.as_dict()
    assert [m["uuid"] for m in described["migs"]] == [MIG_A, MIG_B]
    assert [m["mig_index"] for m in described["migs"]] == [0, 1]


@pytest.mark.parametrize(
    ("error", "expected"),
    [("LibraryNotFound", "NVML library not found"), ("DriverNotLoaded", "driver not loaded")],
)
def test_inventory_explains_nvml_failure(fake_nvml, error, expected):
    fake_nvml({"error": error})
    inv = devices.inventory()
    assert inv.devices == ()
    assert inv.all_devices() == []
    assert expected in inv.reason


def test_inventory_with_zero_gpus_gives_a_reason(fake_nvml):
    fake_nvml({"gpus": []})
    inv = devices.inventory()
    assert inv.devices == ()
    assert inv.reason
    assert "no GPU" in inv.reason


def test_inventory_without_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    inv = devices.inventory()
    assert inv.devices == ()
    assert "nvidia-ml-py" in inv.reason


# --------------------------------------------------------------------------------------------
# parse_selection()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", ["all"]),
        ("ALL", ["all"]),
        ("  all\t", ["all"]),
        ("0", [0]),
        ("12", [12]),
        ("0,1", [0, 1]),
        ("1,0", [1, 0]),
        (" 0 , 1 ", [0, 1]),
        ("0-3", [(0, 3)]),
        ("2-2", [(2, 2)]),
        ("0,2-3", [0, (2, 3)]),
        ("GPU-1a2b", ["GPU-1a2b"]),
        ("gpu-1a2b", ["GPU-1a2b"]),
        (MIG_A, [MIG_A]),
        ("mig-1111aaaa", ["MIG-1111aaaa"]),
        (f"0, {UUID1} ,1-2", [0, UUID1, (1, 2)]),
    ],
)
def test_parse_selection_accepts(text, expected):
    assert devices.parse_selection(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("0,,1", "empty item"),
        ("0,", "empty item"),
        (",0", "empty item"),
        ("a", "'a' is not a GPU index"),
        ("1.5", "'1.5' is not a GPU index"),
        ("0 1", "'0 1' is not a GPU index"),
        ("0-", "'0-' is not a GPU index"),
        ("-1", "indices start at 0"),
        ("3-1", "write 1-3"),
        ("", "empty"),
        ("   ", "empty"),
        ("all,0", "'all' cannot be combined"),
        ("0,all", "'all' cannot be combined"),
        ("GPU-", "incomplete UUID"),
        ("0,MIG-", "incomplete UUID"),
    ],
)
def test_parse_selection_rejects_with_helpful_message(text, fragment):
    with pytest.raises(DeviceSelectionError) as err:
        devices.parse_selection(text)
    message = str(err.value)
    assert fragment in message
    assert message.startswith("--gpus")
    assert _one_line(err.value)


@pytest.mark.parametrize("text", ["a", "0,,1", ""])
def test_parse_selection_message_shows_the_valid_syntax(text):
    with pytest.raises(DeviceSelectionError, match="0-3") as err:
        devices.parse_selection(text)
    assert "all" in str(err.value)


def test_parse_selection_rejects_none():
    with pytest.raises(DeviceSelectionError):
        devices.parse_selection(None)


@pytest.mark.parametrize("module", [daskgpu.clusters.devices, daskgpu.toolkit.params,
                                    daskgpu.toolkit.chunking, daskgpu.toolkit.numeric])
def test_doctests(module):
    result = doctest.testmod(module, verbose=False, report=True)
    assert result.attempted > 0
    assert result.failed == 0


# --------------------------------------------------------------------------------------------
# select(): plain machine


@pytest.mark.parametrize(
    ("text", "positions"),
    [
        ("0", [0]),
        ("1", [1]),
        ("0,1", [0, 1]),
        ("1,0", [1, 0]),
        ("0-1", [0, 1]),
        ("1-1", [1]),
        ("all", [0, 1]),
        (" 1 , 0 ", [1, 0]),
        (UUID1, [1]),
        (UUID1.lower(), [1]),
        (UUID0[:8], [0]),
        ("GPU-9f8e", [1]),
        (f"GPU-9f,{UUID0}", [1, 0]),
    ],
)
def test_select_resolves(two, text, positions):
    chosen = devices.select(text, two)
    assert chosen == [two.devices[p] for p in positions]


def test_select_reads_nvml_when_no_inventory_given(fake_nvml):
    fake_nvml(TWO_GPUS)
    assert [d.uuid for d in devices.select("1,0")] == [UUID1, UUID0]


def test_select_unique_prefix_but_ambiguous_prefix_fails(fake_nvml):
    fake_nvml(TWINS)
    inv = devices.inventory()
    assert devices.select("GPU-abcd1", inv) == [inv.devices[1]]
    with pytest.raises(DeviceSelectionError, match="matches 2 devices") as err:
        devices.select("GPU-abcd", inv)
    assert "give more of the UUID" in str(err.value)
    assert _one_line(err.value)


def test_select_exact_uuid_wins_over_longer_ones(fake_nvml):
    # One UUID is a prefix of another: the exact match is not ambiguous.
    fake_nvml({"gpus": [{"uuid": "GPU-abcd-1"}, {"uuid": "GPU-abcd"}]})
    inv = devices.inventory()
    assert devices.select("GPU-abcd", inv) == [inv.devices[1]]


def test_select_mig_uuid_selects_the_mig_instance(mig):
    (chosen,) = devices.select(MIG_B, mig)
    assert chosen.uuid == MIG_B
    assert chosen.label == "1/mig1"
    assert chosen.mig_index == 1
    both = devices.select(f"0,{MIG_A}", mig)
    assert [d.label for d in both] == ["0", "1/mig0"]
    # Indices and 'all' mean whole GPUs, never MIG instances.
    assert devices.select("all", mig) == list(mig.devices)
    # "MIG-1111" is a prefix of both instances.
    with pytest.raises(DeviceSelectionError, match="matches 2 devices"):
        devices.select("MIG-1111", mig)


def test_select_unknown_uuid_lists_what_is_available(two):
    with pytest.raises(DeviceSelectionError) as err:
        devices.select("GPU-ffff", two)
    message = str(err.value)
    assert "'GPU-ffff'" in message
    assert UUID0 in message and UUID1 in message
    assert _one_line(err.value)


def test_select_unknown_mig_uuid_lists_mig_instances(mig):
    with pytest.raises(DeviceSelectionError) as err:
        devices.select("MIG-ffff", mig)
    assert MIG_A in str(err.value) and MIG_B in str(err.value)


@pytest.mark.parametrize("text", ["2", "0,2", "0-2", "7", "1-5"])
def test_select_index_out_of_range_says_how_many(two, text):
    with pytest.raises(DeviceSelectionError) as err:
        devices.select(text, two)
    message = str(err.value)
    assert "out of range" in message
    assert "2 GPU(s)" in message
    assert "0-1" in message
    assert UUID0 in message and UUID1 in message
    assert _one_line(err.value)


@pytest.mark.parametrize(
    "text", ["0,0", "0-1,1", "1,0-1", "0,1,0", f"0,{UUID0}", f"{UUID1},1", "GPU-9f8e,1", "all,all"]
)
def test_select_duplicates(two, text):
    if text == "all,all":  # not a duplicate: 'all' cannot be combined at all
        with pytest.raises(DeviceSelectionError, match="cannot be combined"):
            devices.select(text, two)
        return
    with pytest.raises(DeviceSelectionError, match="selected twice") as err:
        devices.select(text, two)
    assert _one_line(err.value)


def test_select_same_mig_twice(mig):
    with pytest.raises(DeviceSelectionError, match="selected twice"):
        devices.select(f"{MIG_A},MIG-1111a", mig)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"error": "LibraryNotFound"}, "NVML library not found"),
        ({"error": "DriverNotLoaded"}, "driver not loaded"),
        ({"gpus": []}, "no GPU"),
    ],
)
@pytest.mark.parametrize("text", ["0", "all", "GPU-1a2b"])
def test_select_without_gpu_suggests_cpu(fake_nvml, spec, reason, text):
    fake_nvml(spec)
    with pytest.raises(DeviceSelectionError) as err:
        devices.select(text)
    message = str(err.value)
    assert "--cpu" in message
    assert reason in message
    assert _one_line(err.value)


# --------------------------------------------------------------------------------------------
# select() with CUDA_VISIBLE_DEVICES already set


def test_cuda_visible_index_renumbers(two):
    assert devices.select("0", two, cuda_visible="1") == [two.devices[1]]
    assert devices.select("all", two, cuda_visible="1") == [two.devices[1]]
    with pytest.raises(DeviceSelectionError) as err:
        devices.select("1", two, cuda_visible="1")
    message = str(err.value)
    assert "out of range" in message
    assert "CUDA_VISIBLE_DEVICES=1" in message
    assert "1 GPU(s)" in message
    assert _one_line(err.value)


def test_select_reads_cuda_visible_devices_from_environment(two, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.select("0", two) == [two.devices[1]]
    assert devices.select("0", two, use_environment=False) == [two.devices[0]]
    # An explicit value wins over the environment.
    assert devices.select("0", two, cuda_visible="0") == [two.devices[0]]
    with pytest.raises(DeviceSelectionError, match="out of range"):
        devices.select("1", two)


def test_select_environment_empty_hides_everything(two, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceSelectionError, match="hides every GPU"):
        devices.select("0", two)


@pytest.mark.parametrize(
    "cuda_visible", [f"{UUID1},{UUID0}", "GPU-9f8e,GPU-1a2b", f" {UUID1} , {UUID0} ", "1,0"]
)
def test_cuda_visible_reordered_positions_follow_the_list(two, cuda_visible):
    d0, d1 = two.devices
    assert devices.visible_devices(two, cuda_visible) == [d1, d0]
    assert devices.select("0", two, cuda_visible=cuda_visible) == [d1]
    assert devices.select("1", two, cuda_visible=cuda_visible) == [d0]
    assert devices.select("all", two, cuda_visible=cuda_visible) == [d1, d0]
    assert devices.select("0-1", two, cuda_visible=cuda_visible) == [d1, d0]
    assert devices.select(UUID0, two, cuda_visible=cuda_visible) == [d0]


def test_cuda_visible_devices_outside_cannot_be_chosen(two):
    d0, d1 = two.devices
    assert devices.select(UUID1, two, cuda_visible=UUID1) == [d1]
    with pytest.raises(DeviceSelectionError, match="out of range"):
        devices.select("1", two, cuda_visible=UUID1)
    with pytest.raises(DeviceSelectionError) as err:
        devices.select(UUID0, two, cuda_visible=UUID1)
    message = str(err.value)
    assert "CUDA_VISIBLE_DEVICES" in message
    assert UUID0 in message
    assert _one_line(err.value)
    with pytest.raises(DeviceSelectionError, match="CUDA_VISIBLE_DEVICES"):
        devices.select("GPU-1a2b", two, cuda_visible="1")


@pytest.mark.parametrize(
    ("cuda_visible", "positions"),
    [
        ("0,7,1", [0]),
        ("1,GPU-ffff,0", [1]),
        ("0,foo,1", [0]),
        ("1,1,0", [1]),
        ("0,-1,1", [0]),
        ("0,1", [0, 1]),
    ],
)
def test_cuda_visible_invalid_entry_truncates_like_cuda(two, cuda_visible, positions):
    expected = [two.devices[p] for p in positions]
    assert devices.visible_devices(two, cuda_visible) == expected
    assert devices.select("all", two, cuda_visible=cuda_visible) == expected
    with pytest.raises(DeviceSelectionError, match="out of range"):
        devices.select(str(len(positions)), two, cuda_visible=cuda_visible)


@pytest.mark.parametrize("cuda_visible", ["", "7", "-1", "GPU-ffff", "NoDevFiles"])
def test_cuda_visible_hiding_everything_is_a_clear_error(two, cuda_visible):
    assert devices.visible_devices(two, cuda_visible) == []
    with pytest.raises(DeviceSelectionError) as err:
        devices.select("0", two, cuda_visible=cuda_visible)
    message = str(err.value)
    assert "hides every GPU" in message
    assert f"CUDA_VISIBLE_DEVICES={cuda_visible!r}" in message
    assert _one_line(err.value)


def test_cuda_visible_mig_instance(mig):
    assert devices.select("0", mig, cuda_visible=MIG_B) == [mig.devices[1].migs[1]]
    assert devices.select(MIG_B, mig, cuda_visible=MIG_B) == [mig.devices[1].migs[1]]
    with pytest.raises(DeviceSelectionError, match="CUDA_VISIBLE_DEVICES"):
        devices.select(MIG_A, mig, cuda_visible=MIG_B)


def test_cuda_visible_whole_gpu_allows_its_mig_instances(mig):
    assert devices.select(MIG_A, mig, cuda_visible="1") == [mig.devices[1].migs[0]]
    with pytest.raises(DeviceSelectionError, match="CUDA_VISIBLE_DEVICES"):
        devices.select(MIG_A, mig, cuda_visible="0")


def test_visible_devices_unset_means_every_gpu(mig):
    assert devices.visible_devices(mig, None) == list(mig.devices)


# --------------------------------------------------------------------------------------------
# Errors


ERROR_CASES = [
    ("0,,1", None),
    ("a", None),
    ("3-1", None),
    ("", None),
    ("GPU-", None),
    ("2", None),
    ("0,0", None),
    ("GPU-ffff", None),
    ("GPU-", UUID1),
    ("1", "1"),
    (UUID0, UUID1),
    ("0", ""),
    ("1", "0,7"),
]


@pytest.mark.parametrize(("text", "cuda_visible"), ERROR_CASES)
def test_every_error_is_a_one_line_device_selection_error(two, text, cuda_visible):
    with pytest.raises(DaskGPUError) as err:
        devices.select(text, two, cuda_visible=cuda_visible, use_environment=False)
    assert type(err.value) is DeviceSelectionError
    assert err.value.exit_code == 2
    assert _one_line(err.value)


def test_errors_without_gpu_are_one_line(fake_nvml):
    fake_nvml({"error": "LibraryNotFound"})
    with pytest.raises(DeviceSelectionError) as err:
        devices.select("0-1")
    assert isinstance(err.value, DaskGPUError)
    assert err.value.exit_code == 2
    assert _one_line(err.value)


@pytest.mark.parametrize("text", ["0,\n0", "0\n,1,0"])
def test_error_with_newline_in_selection_is_still_one_line(two, text):
    with pytest.raises(DeviceSelectionError) as err:
        devices.select(text, two, use_environment=False)
    assert _one_line(err.value)


@pytest.mark.parametrize("text", ["1" * 5000, "0-" + "9" * 5000])
def test_huge_index_is_a_selection_error(two, text):
    with pytest.raises(DeviceSelectionError):
        devices.select(text, two, use_environment=False)


@pytest.mark.parametrize("text", ["\u00b2", "0,\u00b9", "\u2460"])
def test_non_decimal_digits_are_selection_errors(two, text):
    # str.isdigit() accepts superscripts and circled digits, which int() refuses.
    with pytest.raises(DeviceSelectionError):
        devices.select(text, two, use_environment=False)


def test_other_decimal_digits_are_indices(two):
    # int() reads any Unicode decimal digit: Arabic-Indic one is index 1.
    assert devices.select("\u0661", two, use_environment=False) == [two.devices[1]]


@pytest.mark.parametrize("cuda_visible", ["\u00b2", "0,\u00b2"])
def test_non_decimal_digit_in_cuda_visible_devices_truncates(two, cuda_visible):
    visible_before = cuda_visible.count(",")  # the entries before the bad one
    assert devices.visible_devices(two, cuda_visible) == list(two.devices[:visible_before])


# --------------------------------------------------------------------------------------------
# Property: any text either selects distinct devices or raises DeviceSelectionError


SELECTION_LIKE = st.text(alphabet=st.sampled_from("0123456789,-aGPUMI "), max_size=24)
UUID_LIKE = st.builds(
    lambda kind, tail: f"{kind}-{tail}",
    st.sampled_from(["GPU", "MIG", "gpu", "mig"]),
    st.text(alphabet="0123456789abcdef-", max_size=12),
)
# Digits beyond ASCII: decimal ones (int() reads them) and others (superscripts, circled).
ODD_DIGITS = st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=3)
SELECTIONS = st.one_of(
    st.text(),
    SELECTION_LIKE,
    st.lists(st.one_of(SELECTION_LIKE, ODD_DIGITS), min_size=1, max_size=3).map(",".join),
    st.lists(st.one_of(SELECTION_LIKE, UUID_LIKE), min_size=1, max_size=4).map(",".join),
)


def _check_outcome(text, inv, cuda_visible):
    try:
        chosen = devices.select(text, inv, cuda_visible=cuda_visible, use_environment=False)
    except DeviceSelectionError:
        return
    assert isinstance(chosen, list)
    assert chosen, f"{text!r} selected nothing without an error"
    assert all(isinstance(d, devices.Device) for d in chosen)
    assert len(set(chosen)) == len(chosen)
    assert all(d in inv.all_devices() for d in chosen)


@settings(max_examples=300, deadline=None)
@given(text=SELECTIONS)
def test_select_property_never_crashes(mig_module, text):
    _check_outcome(text, mig_module, None)


@settings(max_examples=150, deadline=None)
@given(
    text=SELECTIONS,
    cuda_visible=st.one_of(
        st.text(max_size=12),
        st.lists(st.one_of(SELECTION_LIKE, UUID_LIKE), max_size=3).map(",".join),
    ),
)
def test_select_property_with_cuda_visible_devices(mig_module, text, cuda_visible):
    _check_outcome(text, mig_module, cuda_visible)
