"""HBM traffic and collectives from an optimised (post-compile) TPU HLO module's text.

XLA's cost_analysis "bytes accessed" sums every operand and result of every op, so a weight the
TPU prefetches into VMEM (memory space S(1)) by an async copy-start / slice-start or a
ConcatBitcast custom-call is counted when it is read from HBM and again when the consumer reads
the VMEM copy. Here each op counts only the buffers that live in HBM (layout without S(n)):
  reads   its HBM operands (a fusion parameter used only through slices / gathers reads their
          results' size, not the whole buffer; a buffer a dynamic-update-slice writes in place
          is not read);
  writes  its HBM results (an in-place dynamic-update-slice writes only its update).
Ops that move no data (parameter, tuple, get-tuple-element, bitcast, constant, *-done) count
nothing; while / conditional / call bodies are walked (a while body times its known trip count,
when the compiler recorded one, or the bound of a `counter < constant` condition: a scan's). `loop_body` returns the per-iteration figure of a decode loop.

Every HBM read or write is attributed to a class given by the caller, e.g. {"weights": {...shapes},
"kv": {...}, "logits": predicate}: an array whose (per-device) shape is in a class's set (or that its
predicate accepts) is of that class; otherwise an array made by a slice, prefetch, copy, bitcast or
reshape takes the class of its source operand (a [1024, 3072] prefetch slice of a [4096, 3072]
weight is a weight read), followed back through those ops.
"""

from __future__ import annotations

import collections
import dataclasses
import re

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5,
                "f8e4m3fn": 1, "f8e5m2": 1}
_ARRAY = re.compile(r"\b(pred|[suf]\d+|bf16|c64|c128|f8e4m3fn|f8e5m2)\[([\d,]*)\](\{[^}]*\})?")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+) .*\{\s*$")
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
         "replica-id", "opt-barrier", "copy-done", "slice-done", "all-reduce-done", "all-gather-done",
         "collective-permute-done", "send-done", "recv-done", "async-done", "iota"}
# ops whose result is (part of) their first operand's data: a result's class is its source's
_PASS = {"slice", "dynamic-slice", "slice-start", "slice-done", "copy", "copy-start", "copy-done", "bitcast",
         "reshape", "transpose", "convert", "get-tuple-element", "all-gather", "all-gather-start",
         "all-gather-done", "custom-call"}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "collective-broadcast")


@dataclasses.dataclass
class Array:
  dtype: str
  dims: tuple[int, ...]
  hbm: bool

  @property
  def bytes(self) -> float:
    n = 1
    for d in self.dims:
      n *= d
    return n * _DTYPE_BYTES.get(self.dtype, 4)


def arrays(type_text: str) -> list[Array]:
  out = []
  for dt, dims, layout in _ARRAY.findall(type_text):
    hbm = not (layout and re.search(r"S\(\d+\)", layout))
    out.append(Array(dt, tuple(int(d) for d in dims.split(",") if d), hbm))
  return out


@dataclasses.dataclass
class Instr:
  name: str
  type_text: str
  op: str
  operands: list[str]
  attrs: str
  raw: str = ""             # the text inside the op's parentheses (a parameter's number)


def _split_operands(rest: str) -> tuple[list[str], str, str]:
  depth, i = 1, 0
  while i < len(rest) and depth:
    depth += {"(": 1, ")": -1}.get(rest[i], 0)
    i += 1
  return re.findall(r"%([\w.\-]+)", rest[: i - 1]), rest[i:], rest[: i - 1]


def parse(text: str) -> tuple[dict[str, list[Instr]], str]:
  """-> ({computation: [instructions]}, entry computation name)."""
  comps: dict[str, list[Instr]] = {}
  entry, cur = "", None
  for line in text.splitlines():
    h = _HEADER.match(line)
    if h and not line.startswith(" "):
      cur = comps.setdefault(h.group(1), [])
      if line.startswith("ENTRY"):
        entry = h.group(1)
      continue
    m = _INSTR.match(line)
    if m and cur is not None:
      ops, attrs, raw = _split_operands(m.group(4))
      cur.append(Instr(m.group(1), m.group(2), m.group(3), ops, attrs, raw))
  return comps, entry


@dataclasses.dataclass
class Traffic:
  read: float = 0.0
  write: float = 0.0
  by_class: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  by_op: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  collectives: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  by_instr: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # "op name: class"

  @property
  def total(self) -> float:
    return self.read + self.write

  def add(self, other: "Traffic", times: float = 1.0):
    self.read += times * other.read
    self.write += times * other.write
    for a, b in ((self.by_class, other.by_class), (self.by_op, other.by_op), (self.collectives, other.collectives),
                 (self.by_instr, other.by_instr)):
      for k, v in b.items():
        a[k] += times * v


class Module:
  def __init__(self, text: str, classes: dict[str, set] | None = None):
    self.comps, self.entry = parse(text)
    self.classes = classes or {}
    self._types = {c: {i.name: i.type_text for i in ins} for c, ins in self.comps.items()}
    self._by_name = {c: {i.name: i for i in ins} for c, ins in self.comps.items()}

  def _class(self, a: Array) -> str:
    for label, shapes in self.classes.items():
      if callable(shapes) and shapes(a) or not callable(shapes) and ((a.dtype, a.dims) in shapes or a.dims in shapes):
        return label
    return "other"

  def label(self, comp: str, name: str, a: Array, _depth: int = 0) -> str:
    """`a`'s class by its shape, else (for a slice / prefetch / copy / bitcast / reshape) its source's."""
    own = self._class(a)
    if own != "other" or _depth > 16:
      return own
    i = self._by_name[comp].get(name)
    if i is None or i.op not in _PASS or not i.operands:
      return own
    src = i.operands[0]
    for b in arrays(self._types[comp].get(src, "")):
      lab = self.label(comp, src, b, _depth + 1)
      if lab != "other":
        return lab
    return own

  def _fusion_io(self, comp: str, instr: Instr) -> tuple[dict[int, float], float | None]:
    """Per parameter index: bytes actually read (slices only), and the bytes written when the
    fusion's root updates a parameter in place (dynamic-update-slice)."""
    ins = self.comps.get(comp, [])
    params = {i.name: int(i.raw) for i in ins if i.op == "parameter" and i.raw.strip().isdigit()}
    users = collections.defaultdict(list)
    for i in ins:
      for o in i.operands:
        users[o].append(i)
    read: dict[int, float] = {}
    types = self._types[comp]
    for pname, idx in params.items():
      us = users.get(pname, [])
      if us and all(u.op in ("dynamic-slice", "slice", "gather") and u.operands[0] == pname for u in us):
        read[idx] = sum(sum(a.bytes for a in arrays(u.type_text)) for u in us)
    root = ins[-1] if ins else None
    roots = [root] if root is not None else []
    if root is not None and root.op == "tuple":
      by_name = {i.name: i for i in ins}
      roots = [by_name[o] for o in root.operands if o in by_name]
    written, in_place = 0.0, False
    for r in roots:
      if r.op == "dynamic-update-slice" and r.operands and r.operands[0] in params:
        in_place = True
        read[params[r.operands[0]]] = 0.0
        written += sum(a.bytes for a in arrays(types.get(r.operands[1], "")))
      else:
        written += sum(a.bytes for a in arrays(r.type_text) if a.hbm)
    return read, (written if in_place else None)

  def traffic(self, comp: str | None = None, _seen=()) -> Traffic:
    comp = comp or self.entry
    t = Traffic()
    types = self._types[comp]
    for i in self.comps[comp]:
      if i.op in ("while", "conditional", "call"):
        for callee, times in self._callees(i):
          if callee not in _seen:
            t.add(self.traffic(callee, _seen + (comp,)), times)
        continue
      if i.op in _FREE:
        continue
      base = i.op.removesuffix("-start")
      outs = arrays(i.type_text)
      if base in COLLECTIVES:
        t.collectives[base] += max(sum(a.bytes for a in outs), sum(sum(a.bytes for a in arrays(types.get(o, "")))
                                                                     for o in i.operands))
      if i.op in ("copy-start", "slice-start"):     # async move: (dest, src, flag) or ((src), dest, flag)
        dest = (outs[1] if i.type_text.startswith("((") else outs[0]) if len(outs) > 1 else None
        src = [a for o in i.operands for a in arrays(types.get(o, ""))]
        if dest is not None:
          lab = self.label(comp, i.name, dest)
          if any(a.hbm for a in src):
            self._count(t, "read", dest.bytes, lab, i)
          if dest.hbm:
            self._count(t, "write", dest.bytes, lab, i)
        continue
      read_override, write_override = {}, None
      if i.op == "dynamic-update-slice":
        # in place, as XLA runs it (where the operand's buffer cannot be reused, copy insertion
        # adds an explicit copy, counted on its own): the update is read and written, not the buffer
        upd = sum(a.bytes for a in arrays(types.get(i.operands[1], ""))) if len(i.operands) > 1 else 0.0
        read_override, write_override = {0: 0.0}, upd
      elif i.op == "fusion":
        m = re.search(r"calls=%([\w.\-]+)", i.attrs)
        if m:
          read_override, write_override = self._fusion_io(m.group(1), i)
      for k, o in enumerate(i.operands):
        for a in arrays(types.get(o, "")):
          if a.hbm:
            self._count(t, "read", read_override.get(k, a.bytes), self.label(comp, o, a), i)
      hbm_outs = [a for a in outs if a.hbm]
      if write_override is not None:
        if hbm_outs:
          self._count(t, "write", write_override, self.label(comp, i.name, hbm_outs[0]), i)
      else:
        for a in hbm_outs:
          self._count(t, "write", a.bytes, self.label(comp, i.name, a), i)
    return t

  def _count(self, t: Traffic, what: str, nbytes: float, label: str, i: Instr):
    setattr(t, what, getattr(t, what) + nbytes)
    t.by_class[f"{label}.{what}"] += nbytes
    t.by_op[i.op.removesuffix("-start")] += nbytes
    t.by_instr[f"{i.op} {i.name}: {label}"] += nbytes

  def _callees(self, i: Instr) -> list[tuple[str, float]]:
    if i.op == "while":
      body = re.search(r"body=%([\w.\-]+)", i.attrs)
      cond = re.search(r"condition=%([\w.\-]+)", i.attrs)
      n = re.search(r'"known_trip_count":\{"n":"(\d+)"', i.attrs)
      times = float(n.group(1)) if n else (self._counted(cond.group(1)) if cond else None) or 1.0
      return [(c.group(1), times) for c in (body, cond) if c]
    if i.op == "conditional":
      names = re.findall(r"%([\w.\-]+)", (re.search(r"branch_computations=\{([^}]*)\}", i.attrs) or
                                          re.search(r"(true_computation=.*)", i.attrs)).group(1))
      return [(n, 1.0 / max(len(names), 1)) for n in names if n in self.comps]   # mean over branches
    m = re.search(r"to_apply=%([\w.\-]+)", i.attrs)
    return [(m.group(1), 1.0)] if m else []

  def _counted(self, cond: str) -> int | None:
    """The trip count of a counted loop whose condition is `counter < constant` and nothing else
    (what lax.scan and fori_loop lower to, the counter starting at 0), where the TPU compiler
    dropped known_trip_count from the while (it does for scans it sinks code into: the EAGLE-3
    tree levels, the two-model draft passes). A data-dependent loop (the decode while_loop: rounds
    < R and not all done) has more in its condition and is counted once."""
    ins = self.comps.get(cond, [])
    if len(ins) != 4 or sorted(i.op for i in ins) != ["compare", "constant", "get-tuple-element", "parameter"]:
      return None
    root = ins[-1]
    const = next(i for i in ins if i.op == "constant")
    if root.op != "compare" or "direction=LT" not in root.attrs or root.operands[1:] != [const.name]:
      return None
    return int(const.raw) if const.raw.strip().isdigit() else None

  def loop_body(self) -> str | None:
    """The entry's largest while body (a decode loop's round), or None."""
    best, size = None, -1
    for i in self.comps[self.entry]:
      if i.op == "while":
        body = re.search(r"body=%([\w.\-]+)", i.attrs).group(1)
        n = len(self.comps.get(body, []))
        if n > size:
          best, size = body, n
    return best
