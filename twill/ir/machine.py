"""Machine descriptions: functional units, issue slots, registers, memories, hand-off and cost constants.

Machines are TOML files. The bundled ones live in the top-level ``machines/`` folder, installed as the
``twill.machines`` package; :func:`load_machine` takes a bundled name (``"h100"``) or a path. Every number
in a file is a table ``{ value = ..., source = "..." }`` (plus ``estimate = true`` when not yet measured),
so each constant says where it comes from. A file may name ``base = "<machine>"`` and override keys.

    >>> m = load_machine("h100")
    >>> m.units["tc"].capacity, m.register_file, m.smem_per_cta
    (1, 65536, 232448)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from twill.errors import MachineError
from twill.ir.fields import closest, unknown_keys_message

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["Constant", "Machine", "Unit", "known_machines", "load_machine"]

MACHINE_SCHEMA = 1
"""Version of the machine TOML format this twill reads (the ``schema`` key of a machine file)."""
_TOP_KEYS = {"schema", "base", "name", "description", "arch", "family", "chip", "units", "issue",
             "registers", "memory", "tmem", "warps", "handoff", "cost"}
_REQUIRED = {
    "registers": ("file", "max_per_thread", "setmaxnreg_min", "setmaxnreg_max", "setmaxnreg_step",
                  "group_overhead", "small_value"),
    "memory": ("smem_per_cta",),
    "warps": ("max_per_cta", "per_warpgroup"),
    "issue": ("slots",),
    "handoff": ("register_base", "register_per_kb", "mbarrier", "named_barrier"),
}
_TMEM_KEYS = ("lanes", "columns", "alloc_step")


@dataclass(frozen=True)
class Constant:
    """A number with its provenance.

    Parameters
    ----------
    value : int or float
        The number, in the unit its key names (cycles, bytes, per-cycle rates per SM).
    source : str
        Datasheet, paper section or measurement it comes from.
    estimate : bool
        True when not yet measured on hardware.
    """

    value: int | float
    source: str
    estimate: bool = False


@dataclass(frozen=True)
class Unit:
    """A functional-unit kind: ``capacity`` instances, each taking one reservation per cycle."""

    name: str
    capacity: int
    description: str
    source: str


@dataclass(frozen=True)
class Machine:
    """A GPU as the scheduler sees one SM of it.

    Attributes
    ----------
    name, description, arch, family : str
        ``arch`` is the compile target (``sm_90a``); ``family`` is ``hopper`` or ``blackwell``.
    units : mapping of str to Unit
        Functional units and capacities.
    issue_slots : int
        Warp schedulers per SM (instructions issued per cycle).
    register_file : int
        32-bit registers per SM.
    max_regs_per_thread : int
        Registers one thread can address (255).
    setmaxnreg_min, setmaxnreg_max, setmaxnreg_step : int
        Range and granularity of per-warp-group register budgets (``setmaxnreg``).
    group_overhead_regs : int
        Registers per thread a warp group needs besides the tile values the graph accounts for.
    small_value_regs : int
        Values of at most this many registers per thread (row statistics, scalars) are not tracked one by
        one: the fitted overhead absorbs them.
    smem_per_cta : int
        Shared-memory bytes one CTA may use.
    tmem_lanes, tmem_columns, tmem_alloc_step : int
        Tensor memory geometry (0 on machines without it); columns are allocated in ``tmem_alloc_step``.
    max_warps : int
        Warps per CTA.
    warps_per_group : int
        Warps in a hardware warp group (4).
    constants : mapping of str to Constant
        Every number of the file under its dotted key (``"cost.tc_flops_fp16"``), with its source.
    file : str
        The TOML file(s) read.
    """

    name: str
    description: str
    arch: str
    family: str
    units: Mapping[str, Unit]
    issue_slots: int
    register_file: int
    max_regs_per_thread: int
    setmaxnreg_min: int
    setmaxnreg_max: int
    setmaxnreg_step: int
    group_overhead_regs: int
    small_value_regs: int
    smem_per_cta: int
    tmem_lanes: int
    tmem_columns: int
    tmem_alloc_step: int
    max_warps: int
    warps_per_group: int
    constants: Mapping[str, Constant] = field(repr=False)
    file: str = ""

    @property
    def unit_names(self) -> tuple[str, ...]:
        """Unit names in file order."""
        return tuple(self.units)

    def const(self, key: str) -> float:
        """Value of the constant at dotted ``key``; :class:`MachineError` naming the key if it is missing."""
        try:
            return self.constants[key].value
        except KeyError:
            raise MachineError(f"machine {self.name!r} has no constant {key!r}", key=key,
                               file=self.file) from None

    def handoff_cycles(self, carrier: str, nbytes: int) -> int:
        """Cycles to hand a value from one warp group to another.

        A register value goes reg -> SMEM -> reg and then a barrier: ``register_base + register_per_kb *
        KB + mbarrier``. An SMEM or TMEM value is already shared and costs one mbarrier hand-off; a pure
        ordering edge costs a named barrier. Constants: ``[handoff]`` of the machine file.
        """
        if carrier == "register":
            kb = nbytes / 1024.0
            return round(self.const("handoff.register_base") + self.const("handoff.register_per_kb") * kb
                         + self.const("handoff.mbarrier"))
        if carrier in ("smem", "tmem"):
            return round(self.const("handoff.mbarrier"))
        return round(self.const("handoff.named_barrier"))

    def handoff_transfer_cycles(self, nbytes: int) -> int:
        """Cycles the SMEM ports are busy on each side of a register hand-off of ``nbytes`` bytes:
        ``ceil(nbytes / cost.smem_bytes_per_cycle)`` (the producer's STS, then the consumer's LDS; their sum
        is the bandwidth part of ``handoff.register_per_kb``: 2 x 1024 / 128 = 16 cycles per KB against
        the measured 16.1). :class:`MachineError` naming the key if the constant is missing."""
        if nbytes <= 0:
            return 0
        key = "cost.smem_bytes_per_cycle"
        if key not in self.constants:
            raise MachineError(f"machine {self.name!r} has no constant {key!r} (the SMEM port rate; it "
                               f"prices a register value handed between warp groups on the smem unit)",
                               key=key, file=self.file)
        rate = self.const(key)
        if not rate > 0:
            raise MachineError(f"{key} = {rate!r} must be > 0 (bytes per cycle through the SMEM ports)",
                               key=key, file=self.file)
        return math.ceil(nbytes / rate)

    def round_registers(self, regs: int) -> int:
        """Smallest ``setmaxnreg`` value (multiple of the step, at least the minimum) holding ``regs``."""
        step = self.setmaxnreg_step
        return max(self.setmaxnreg_min, -(-regs // step) * step)

    def tmem_round(self, columns: int) -> int:
        """Columns an allocation of ``columns`` takes (rounded up to the allocation step)."""
        if columns <= 0 or self.tmem_alloc_step <= 0:
            return columns
        return -(-columns // self.tmem_alloc_step) * self.tmem_alloc_step

    def summary(self) -> str:
        """One line: name, arch and the unit capacities."""
        units = ", ".join(f"{u.name}:{u.capacity}" for u in self.units.values())
        return f"{self.name} ({self.arch}): {self.description}; units {units}"


def known_machines() -> list[str]:
    """Names of the bundled machines, sorted."""
    folder = _bundled()
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _bundled() -> Any:
    """The folder of bundled machine files: the installed ``twill.machines`` package, or, when ``twill`` is
    imported from a source checkout that is not installed in place (Python started in the repository
    root after ``pip install .``), the checkout's ``machines/`` folder beside the ``twill/`` package."""
    try:
        return resources.files("twill.machines")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "machines"


def _read_toml(name_or_path: str | Path) -> tuple[dict[str, Any], str]:
    text_path = str(name_or_path)
    if text_path.endswith(".toml") or "/" in text_path or Path(text_path).suffix:
        path = Path(text_path)
        if not path.is_file():
            what = "is a folder, not a machine .toml file" if path.is_dir() else "does not exist"
            raise MachineError(f"machine file {text_path!r} {what}")
        data, where = path.read_bytes(), str(path)
    else:
        resource = _bundled() / f"{text_path}.toml"
        if not resource.is_file():
            raise MachineError(f"unknown machine {text_path!r}; known machines: "
                               f"{', '.join(known_machines())}")
        data, where = resource.read_bytes(), f"machines/{text_path}.toml"
    try:
        return tomllib.loads(data.decode("utf-8")), where
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MachineError(f"not valid TOML: {exc}", file=where) from exc


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and "value" not in value:
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _load_raw(name_or_path: str | Path, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    raw, where = _read_toml(name_or_path)
    base = raw.get("base")
    if not seen and not where.startswith("machines/"):
        _check_own_name(raw, where)
    if base is None:
        return raw, where
    if not isinstance(base, str):
        raise MachineError(f"base = {base!r} must be a machine name", key="base", file=where)
    if base in seen:
        raise MachineError(f"base machines form a cycle: {' -> '.join((*seen, base))}", key="base",
                           file=where)
    parent, parent_where = _load_raw(base, (*seen, str(name_or_path)))
    _refuse_new_open_keys(parent, raw, where, base)
    merged = _merge(parent, {k: v for k, v in raw.items() if k != "base"})
    return merged, f"{where} (base {parent_where})"


def _check_own_name(raw: Mapping[str, Any], where: str) -> None:
    """A user's machine file names itself: schedules record the machine's name, and ``twill apply
    --schedule`` resolves a bundled name to the bundled file, so a file that silently inherited its base's
    name would later be applied with the base's costs. (A file may still take a bundled name on purpose:
    an H100 with less shared memory, to apply an ``h100`` schedule under a smaller budget.)"""
    name = raw.get("name")
    if name is None:
        inherited = f" (it would record its base's name, {raw['base']!r})" if "base" in raw else ""
        raise MachineError(f"missing key name: a machine file needs its own name, which schedules "
                           f"record{inherited}", key="name", file=where)


_OPEN_SECTIONS = ("chip", "cost")
"""Sections whose keys are not a fixed set (the cost model reads the constants it needs)."""


def _refuse_new_open_keys(parent: Mapping[str, Any], over: Mapping[str, Any], where: str, base: str) -> None:
    """An override file (``base = "..."``) changes constants of its base. In the open sections a key its
    base does not have overrides nothing: it is a typo (``tc_flops_fp61``) that would leave the base's
    value in place. Refused, naming the key and the base's closest key."""
    for section in _OPEN_SECTIONS:
        table, known = over.get(section), parent.get(section)
        if not isinstance(table, Mapping) or not isinstance(known, Mapping):
            continue
        for key in table:
            if key not in known:
                near = closest(key, known)
                hint = f" (did you mean {section}.{near}?)" if near else ""
                raise MachineError(f"{section}.{key} overrides nothing: base machine {base!r} has no such "
                                   f"key{hint}; an override file changes its base's constants",
                                   key=f"{section}.{key}", file=where)


def _constant(node: Any, key: str, where: str) -> Constant:
    if not isinstance(node, Mapping) or "value" not in node or "source" not in node:
        raise MachineError(f"{key} must be a table {{ value = ..., source = \"...\" }}, got {node!r}",
                           key=key, file=where)
    message = unknown_keys_message(node, ("value", "source", "estimate"), key, "key")
    if message:
        raise MachineError(message, key=key, file=where)
    value = node["value"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MachineError(f"{key}.value = {value!r} must be a number", key=key, file=where)
    if value < 0:
        raise MachineError(f"{key}.value = {value!r} must be >= 0", key=key, file=where)
    source = node["source"]
    if not isinstance(source, str) or not source.strip():
        raise MachineError(f"{key}.source must be a non-empty string", key=key, file=where)
    return Constant(value, source, bool(node.get("estimate", False)))


def _int(constants: Mapping[str, Constant], key: str, where: str, low: int = 0) -> int:
    if key not in constants:
        raise MachineError(f"missing key {key}", key=key, file=where)
    value = constants[key].value
    if not isinstance(value, int) or value < low:
        raise MachineError(f"{key} = {value!r} must be an integer >= {low}", key=key, file=where)
    return value


def _collect(raw: Mapping[str, Any], where: str) -> dict[str, Constant]:
    constants: dict[str, Constant] = {}
    for section in ("chip", "issue", "registers", "memory", "tmem", "warps", "handoff", "cost"):
        table = raw.get(section, {})
        if not isinstance(table, Mapping):
            raise MachineError(f"[{section}] must be a table", key=section, file=where)
        for key, node in table.items():
            constants[f"{section}.{key}"] = _constant(node, f"{section}.{key}", where)
    return constants


_POSITIVE_CHIP = ("sms", "clock_ghz", "dram_bytes_per_s", "max_threads_per_sm", "max_threads_per_cta",
                  "max_ctas_per_sm", "smem_per_sm", "l1_smem_per_sm", "register_alloc_unit")
"""[chip] capacities and rates the cost model and the occupancy model divide by."""


def _is_rate(dotted: str) -> bool:
    """Whether the constant ``dotted`` (``section.key``) is a rate or capacity some cost divides by, which
    must be > 0: every ``*_per_cycle`` / ``*_per_s`` rate, the Tensor Core FLOP rates (``tc_flops_*``), the
    least MMA M (``tc_min_m``) and the [chip] capacities of :data:`_POSITIVE_CHIP`."""
    section, _, key = dotted.partition(".")
    if section == "chip":
        return key in _POSITIVE_CHIP or key.endswith(("_per_cycle", "_per_s"))
    if section == "cost":
        return key.endswith(("_per_cycle", "_per_s")) or key.startswith("tc_flops_") or key == "tc_min_m"
    return False


def _check_rates(constants: Mapping[str, Constant], where: str) -> None:
    """:class:`MachineError` naming the key and the file for a rate or capacity (:func:`_is_rate`) that is
    not > 0 (a zero rate gave a ZeroDivisionError deep in the cost model)."""
    for dotted, constant in sorted(constants.items()):
        if _is_rate(dotted) and not constant.value > 0:
            raise MachineError(f"{dotted}.value = {constant.value!r} must be > 0 (a rate or capacity the "
                               f"cost model divides by)", key=dotted, file=where)


def _reject_unknown_keys(constants: Mapping[str, Constant], where: str) -> None:
    """A key outside the fixed set of its section (a typo) would be ignored, or silently leave a base
    machine's value in place; ``[chip]`` and ``[cost]`` are open (the cost model reads what it needs)."""
    fixed = {**_REQUIRED, "tmem": _TMEM_KEYS}
    for dotted in constants:
        section, key = dotted.split(".", 1)
        if section in fixed and key not in fixed[section]:
            near = closest(key, fixed[section])
            hint = f" (did you mean {section}.{near}?)" if near else ""
            raise MachineError(f"unknown key {dotted}{hint}; [{section}] takes {', '.join(fixed[section])}",
                               key=dotted, file=where)


def _units(raw: Mapping[str, Any], where: str) -> dict[str, Unit]:
    table = raw.get("units")
    if not isinstance(table, Mapping) or not table:
        raise MachineError("missing [units] table (at least one functional unit)", key="units", file=where)
    units = {}
    for name, node in table.items():
        if not isinstance(node, Mapping):
            raise MachineError(f"units.{name} must be a table", key=f"units.{name}", file=where)
        message = unknown_keys_message(node, ("capacity", "description"), f"units.{name}", "key")
        if message:
            raise MachineError(message, key=f"units.{name}", file=where)
        cap = _constant(node.get("capacity"), f"units.{name}.capacity", where)
        if not isinstance(cap.value, int) or cap.value < 1:
            raise MachineError(f"units.{name}.capacity = {cap.value!r}, must be an integer >= 1",
                               key=f"units.{name}.capacity", file=where)
        units[name] = Unit(name, cap.value, str(node.get("description", "")), cap.source)
    return units


def load_machine(machine: str | Path | Machine) -> Machine:
    """Load a machine by bundled name or TOML path (a :class:`Machine` is returned unchanged).

    Raises
    ------
    MachineError
        Unknown name (the message lists the known ones), unreadable TOML, an unknown or missing key, a
        value of the wrong type or range; the message names the file and the dotted key.
    """
    if isinstance(machine, Machine):
        return machine
    raw, where = _load_raw(machine)
    if raw.get("schema", MACHINE_SCHEMA) != MACHINE_SCHEMA:
        raise MachineError(f"schema = {raw['schema']!r}: this twill reads machine files of schema "
                           f"{MACHINE_SCHEMA}", key="schema", file=where)
    message = unknown_keys_message(raw, _TOP_KEYS, "top level", "key")
    if message:
        raise MachineError(message, key=sorted(set(raw) - _TOP_KEYS)[0], file=where)
    for key in ("name", "arch", "family"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise MachineError(f"missing or non-string key {key}", key=key, file=where)
    if raw["family"] not in ("hopper", "blackwell"):
        raise MachineError(f"family = {raw['family']!r} must be 'hopper' or 'blackwell'", key="family",
                           file=where)
    constants = _collect(raw, where)
    _reject_unknown_keys(constants, where)
    _check_rates(constants, where)
    for section, keys in _REQUIRED.items():
        for key in keys:
            if f"{section}.{key}" not in constants:
                raise MachineError(f"missing key {section}.{key}", key=f"{section}.{key}", file=where)
    units = _units(raw, where)
    for key, unit in units.items():
        constants[f"units.{key}.capacity"] = Constant(unit.capacity, unit.source)
    has_tmem = "tmem" in raw
    if has_tmem:
        for key in _TMEM_KEYS:
            if f"tmem.{key}" not in constants:
                raise MachineError(f"missing key tmem.{key}", key=f"tmem.{key}", file=where)
    reg_min = _int(constants, "registers.setmaxnreg_min", where, 1)
    reg_max = _int(constants, "registers.setmaxnreg_max", where, reg_min)
    step = _int(constants, "registers.setmaxnreg_step", where, 1)
    if reg_min % step or reg_max % step:
        raise MachineError(f"setmaxnreg range [{reg_min}, {reg_max}] is not on the step {step}",
                           key="registers.setmaxnreg_step", file=where)
    loaded = Machine(
        name=raw["name"],
        description=str(raw.get("description", "")),
        arch=raw["arch"],
        family=raw["family"],
        units=units,
        issue_slots=_int(constants, "issue.slots", where, 1),
        register_file=_int(constants, "registers.file", where, 1),
        max_regs_per_thread=_int(constants, "registers.max_per_thread", where, 1),
        setmaxnreg_min=reg_min,
        setmaxnreg_max=reg_max,
        setmaxnreg_step=step,
        group_overhead_regs=_int(constants, "registers.group_overhead", where),
        small_value_regs=_int(constants, "registers.small_value", where),
        smem_per_cta=_int(constants, "memory.smem_per_cta", where, 1),
        tmem_lanes=_int(constants, "tmem.lanes", where, 1) if has_tmem else 0,
        tmem_columns=_int(constants, "tmem.columns", where, 1) if has_tmem else 0,
        tmem_alloc_step=_int(constants, "tmem.alloc_step", where, 1) if has_tmem else 0,
        max_warps=_int(constants, "warps.max_per_cta", where, 1),
        warps_per_group=_int(constants, "warps.per_warpgroup", where, 1),
        constants=constants,
        file=where,
    )
    return loaded
