"""Machine descriptions: bundled names, TOML validation naming the key, inheritance, provenance."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from twill.errors import MachineError
from twill.ir.machine import known_machines, load_machine

BUNDLED = ("h100", "h200", "b200")
# Sections that hold the SM itself (not the memory system or the calibrated costs): an H200 is an H100's
# SM with different HBM, so these must come from h100.toml unchanged.
SM_SECTIONS = ("units.", "issue.", "registers.", "memory.", "warps.")


def _h100_text() -> str:
    return (resources.files("twill.machines") / "h100.toml").read_text(encoding="utf-8")


def _edited(tmp_path: Path, old: str, new: str, *, text: str | None = None) -> Path:
    """A copy of h100.toml with ``old`` (which must occur exactly once) replaced by ``new``."""
    text = _h100_text() if text is None else text
    assert text.count(old) == 1, f"fixture drift: {old!r} occurs {text.count(old)} times in h100.toml"
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_known_machines_lists_bundled_ones():
    names = known_machines()
    assert set(BUNDLED) <= set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_machines_load(name):
    m = load_machine(name)
    assert m.name == name
    assert m.family == ("blackwell" if name == "b200" else "hopper")
    # The tile model of the paper (§3.1): each unit kind has capacity 1 on the bundled machines.
    assert m.units["tc"].capacity == 1
    assert m.register_file == 65536 and m.max_regs_per_thread == 255
    assert (m.setmaxnreg_min, m.setmaxnreg_max, m.setmaxnreg_step) == (24, 256, 8)
    assert load_machine(m) is m  # a Machine passes through unchanged


def test_only_blackwell_has_tensor_memory():
    # TMEM: 128 lanes x 512 columns on Blackwell, none on Hopper.
    assert (load_machine("b200").tmem_lanes, load_machine("b200").tmem_columns) == (128, 512)
    assert load_machine("h100").tmem_columns == 0


def test_unknown_machine_lists_known_ones():
    with pytest.raises(MachineError, match="unknown machine 'a100'") as info:
        load_machine("a100")
    for name in BUNDLED:
        assert name in str(info.value)


def test_missing_file_rejected(tmp_path):
    with pytest.raises(MachineError, match="does not exist"):
        load_machine(tmp_path / "nope.toml")


def test_missing_key_named(tmp_path):
    slots_line = next(line for line in _h100_text().splitlines() if line.startswith("slots = "))
    path = _edited(tmp_path, slots_line + "\n", "")
    with pytest.raises(MachineError, match=r"missing key issue\.slots") as info:
        load_machine(path)
    assert info.value.key == "issue.slots"
    assert str(path) in str(info.value)  # the file is named too


def test_missing_required_top_level_key_named(tmp_path):
    path = _edited(tmp_path, 'arch = "sm_90a"\n', "")
    with pytest.raises(MachineError, match="arch") as info:
        load_machine(path)
    assert info.value.key == "arch"


def test_mistyped_value_named(tmp_path):
    path = _edited(tmp_path, "file = { value = 65536,", 'file = { value = "64K",')
    with pytest.raises(MachineError, match=r"registers\.file") as info:
        load_machine(path)
    assert info.value.key == "registers.file"


def test_fractional_integer_named(tmp_path):
    path = _edited(tmp_path, "slots = { value = 4,", "slots = { value = 4.5,")
    with pytest.raises(MachineError, match=r"issue\.slots = 4\.5 must be an integer") as info:
        load_machine(path)
    assert info.value.key == "issue.slots"


def test_zero_capacity_named(tmp_path):
    text = _h100_text()
    tc_block = text[text.index("[units.tc]"):text.index("[units.mufu]")]
    old = re.search(r"capacity = \{ value = 1,", tc_block).group(0)
    new_block = tc_block.replace(old, "capacity = { value = 0,")
    path = _edited(tmp_path, tc_block, new_block)
    with pytest.raises(MachineError, match=r"units\.tc\.capacity = 0") as info:
        load_machine(path)
    assert info.value.key == "units.tc.capacity"


def test_constant_without_source_named(tmp_path):
    path = _edited(tmp_path, 'slots = { value = 4, source = "paper §2: 4 execution contexts',
                   'slots = { value = 4, source = "  ", note = "paper §2: 4 execution contexts')
    with pytest.raises(MachineError, match=r"issue\.slots") as info:
        load_machine(path)
    assert info.value.key == "issue.slots"


def test_unknown_top_level_key_named(tmp_path):
    path = _edited(tmp_path, 'family = "hopper"\n', 'family = "hopper"\ncolour = "green"\n')
    expected = r"top level: unknown key 'colour'; valid keys: arch, base"
    with pytest.raises(MachineError, match=expected) as info:
        load_machine(path)
    assert info.value.key == "colour"


def test_unknown_unit_field_named(tmp_path):
    path = _edited(tmp_path, "[units.tc]\n", "[units.tc]\nspeed = 3\n")
    expected = r"units\.tc: unknown key 'speed'; valid keys: capacity, description"
    with pytest.raises(MachineError, match=expected) as info:
        load_machine(path)
    assert info.value.key == "units.tc"


def test_unknown_constant_field_named(tmp_path):
    path = _edited(tmp_path, "slots = { value = 4,", "slots = { value = 4, unit = \"warps\",")
    expected = r"issue\.slots: unknown key 'unit'; valid keys: estimate, source, value"
    with pytest.raises(MachineError, match=expected) as info:
        load_machine(path)
    assert info.value.key == "issue.slots"


@pytest.mark.parametrize(("section", "key"), [("registers", "file_size"), ("handoff", "mbarier")])
def test_unknown_key_in_fixed_section_named(tmp_path, section, key):
    # A misspelt key in a section with a fixed set of keys would otherwise be ignored silently, and in a
    # file with a base machine the inherited value would stand in for the one the author meant to set.
    path = _edited(tmp_path, f"[{section}]\n",
                   f'[{section}]\n{key} = {{ value = 1, source = "typo" }}\n')
    with pytest.raises(MachineError, match=rf"{section}\.{key}") as info:
        load_machine(path)
    assert info.value.key == f"{section}.{key}"


def test_bad_toml_rejected(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = \n", encoding="utf-8")
    with pytest.raises(MachineError, match="not valid TOML"):
        load_machine(path)


def test_base_machine_overrides_by_key(tmp_path):
    path = tmp_path / "fast_smem.toml"
    path.write_text(
        'schema = 1\nbase = "h100"\nname = "h100-more-smem"\n'
        '[memory]\nsmem_per_cta = { value = 262144, source = "test" }\n', encoding="utf-8")
    m = load_machine(path)
    h100 = load_machine("h100")
    assert m.name == "h100-more-smem" and m.smem_per_cta == 262144
    assert m.units == h100.units and m.register_file == h100.register_file


def test_base_cycle_rejected(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(f'base = "{b}"\nname = "a"\n', encoding="utf-8")
    b.write_text(f'base = "{a}"\nname = "b"\n', encoding="utf-8")
    with pytest.raises(MachineError, match="cycle") as info:
        load_machine(a)
    assert info.value.key == "base"


def test_h200_inherits_h100_sm_constants():
    h100, h200 = load_machine("h100"), load_machine("h200")
    assert h200.name == "h200" and h200.arch == h100.arch == "sm_90a"
    assert h200.units == h100.units
    sm_keys = [k for k in h100.constants if k.startswith(SM_SECTIONS)]
    assert len(sm_keys) >= 12  # units, issue slots, the register file, SMEM and warps, at least
    for key in sm_keys:
        assert h200.constants[key] == h100.constants[key], key
    # The memory system is the H200's own: HBM3e at 4.8 TB/s against the H100's 3.35 TB/s.
    assert h200.const("chip.dram_bytes_per_s") == 4.8e12
    assert h100.const("chip.dram_bytes_per_s") == 3.35e12


@pytest.mark.parametrize("name", BUNDLED)
def test_every_constant_has_a_source(name):
    m = load_machine(name)
    assert m.constants
    for key, constant in m.constants.items():
        assert isinstance(constant.source, str) and constant.source.strip(), key
    for unit in m.units.values():
        assert unit.source.strip(), unit.name


def test_const_names_missing_key():
    with pytest.raises(MachineError, match=r"no constant 'cost\.nothing'") as info:
        load_machine("h100").const("cost.nothing")
    assert info.value.key == "cost.nothing"


def test_handoff_cycles_arithmetic():
    m = load_machine("h100")
    base, per_kb = m.const("handoff.register_base"), m.const("handoff.register_per_kb")
    mbar, named = m.const("handoff.mbarrier"), m.const("handoff.named_barrier")
    # A register value: reg -> SMEM -> reg, then an mbarrier: base + per_kb * KB + mbarrier.
    assert m.handoff_cycles("register", 2048) == round(base + per_kb * 2 + mbar)
    # An SMEM/TMEM value is already shared: one mbarrier; an ordering edge: a named barrier.
    assert m.handoff_cycles("smem", 10**6) == round(mbar)
    assert m.handoff_cycles("none", 0) == round(named)


def test_register_rounding():
    m = load_machine("h100")
    # setmaxnreg values are multiples of 8 in [24, 256].
    assert [m.round_registers(r) for r in (0, 24, 25, 32, 33, 250)] == [24, 24, 32, 32, 40, 256]
