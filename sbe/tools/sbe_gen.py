#!/usr/bin/env python3
"""Generates header-only C++ SBE flyweights from an SBE 1.0 schema XML.

Run by CMake at build time (sbe/CMakeLists.txt); the output lives in the build tree and is
never committed. Supported: primitive fields (char, int8..uint64, float, double), fixed-length
char arrays, enums, composites of primitives/enums, repeating groups (groupSizeEncoding,
nested), variable-length data (length uint8/uint16/uint32 + varData), and schema evolution
(sinceVersion on fields, groups and data). Generated decoders validate a whole message with
the table-driven walk in goblin/sbe/runtime.h before any accessor can run, so no input can
make them read out of bounds.

Usage: sbe_gen.py SCHEMA.xml OUTPUT.h
"""
import re
import sys
import xml.etree.ElementTree as ET

PRIMS = {
    "char": ("char", 1, "0"),
    "int8": ("int8_t", 1, "INT8_MIN"),
    "uint8": ("uint8_t", 1, "UINT8_MAX"),
    "int16": ("int16_t", 2, "INT16_MIN"),
    "uint16": ("uint16_t", 2, "UINT16_MAX"),
    "int32": ("int32_t", 4, "INT32_MIN"),
    "uint32": ("uint32_t", 4, "UINT32_MAX"),
    "int64": ("int64_t", 8, "INT64_MIN"),
    "uint64": ("uint64_t", 8, "UINT64_MAX"),
    "float": ("float", 4, "std::numeric_limits<float>::quiet_NaN()"),
    "double": ("double", 8, "std::numeric_limits<double>::quiet_NaN()"),
}
DATA_KINDS = {"uint8": "kData8", "uint16": "kData16", "uint32": "kData32"}


class GenError(Exception):
    pass


def local(tag):
    return tag.split("}", 1)[-1]


def snake(name):
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return s.lower()


def camel(name):
    return name[0].upper() + name[1:]


def const_name(name):
    return "k" + camel(name)


class Type:
    """A field type: primitive (possibly a char array), enum or composite."""

    def __init__(self, name, kind, cpp, size, null=None, length=1, members=None, values=None,
                 encoding=None):
        self.name, self.kind, self.cpp, self.size = name, kind, cpp, size
        self.null, self.length, self.members, self.values = null, length, members, values
        self.encoding = encoding


class Field:
    def __init__(self, name, type_, offset, since):
        self.name, self.type, self.offset, self.since = name, type_, offset, since


class Section:
    def __init__(self, name, kind, since, block=None):
        self.name, self.kind, self.since, self.block = name, kind, since, block


class Block:
    def __init__(self, path, fields, sections, block_length):
        self.path = path  # e.g. ["Subscribe", "Channels"]
        self.fields, self.sections, self.block_length = fields, sections, block_length

    @property
    def ident(self):
        return "".join(self.path)


def parse_types(root):
    types = {}
    for name, (cpp, size, null) in PRIMS.items():
        types[name] = Type(name, "prim", cpp, size, null)
    data_types = {}
    types_el = [e for e in root if local(e.tag) == "types"]
    for tel in types_el:
        for el in tel:
            tag, name = local(el.tag), el.get("name")
            if tag == "type":
                prim = el.get("primitiveType")
                if prim not in PRIMS:
                    raise GenError(f"type {name}: unknown primitiveType {prim}")
                cpp, size, null = PRIMS[prim]
                length = int(el.get("length", "1"))
                if length != 1 and prim != "char":
                    raise GenError(f"type {name}: arrays are supported for char only")
                if el.get("nullValue") is not None:
                    null = el.get("nullValue")
                types[name] = Type(name, "prim", cpp, size * length, null, length)
            elif tag == "enum":
                enc = el.get("encodingType")
                if enc not in PRIMS or enc in ("float", "double"):
                    raise GenError(f"enum {name}: bad encodingType {enc}")
                cpp, size, null = PRIMS[enc]
                values = [(v.get("name"), v.text.strip()) for v in el if local(v.tag) == "validValue"]
                types[name] = Type(name, "enum", camel(name), size, null, values=values, encoding=cpp)
            elif tag == "composite":
                members = [(m.get("name"), m.get("primitiveType"), m.get("length"))
                           for m in el if local(m.tag) == "type"]
                names = [m[0] for m in members]
                if names in (["length", "varData"],):
                    lp = members[0][1]
                    if lp not in DATA_KINDS:
                        raise GenError(f"varData composite {name}: length must be uint8/16/32")
                    data_types[name] = DATA_KINDS[lp]
                    continue
                if name in ("messageHeader", "groupSizeEncoding"):
                    continue  # fixed by runtime.h
                mlist, off = [], 0
                for mname, mprim, mlen in members:
                    if mprim not in PRIMS or (mlen not in (None, "1")):
                        raise GenError(f"composite {name}: member {mname} must be a scalar primitive")
                    mlist.append((mname, PRIMS[mprim][0], off))
                    off += PRIMS[mprim][1]
                types[name] = Type(name, "composite", camel(name), off, members=mlist)
            else:
                raise GenError(f"unsupported type element <{tag}>")
    return types, data_types


def parse_block(el, path, types, data_types, seen_ids):
    fields, sections, offset = [], [], 0
    for child in el:
        tag = local(child.tag)
        name = child.get("name")
        since = int(child.get("sinceVersion", "0"))
        if tag == "field":
            if sections:
                raise GenError(f"{'.'.join(path)}.{name}: fields must precede groups and data")
            t = types.get(child.get("type"))
            if t is None:
                raise GenError(f"{'.'.join(path)}.{name}: unknown type {child.get('type')}")
            if child.get("offset") is not None:
                off = int(child.get("offset"))
                if off < offset:
                    raise GenError(f"{'.'.join(path)}.{name}: offset overlaps the previous field")
                offset = off
            fields.append(Field(name, t, offset, since))
            offset += t.size
        elif tag == "group":
            if child.get("dimensionType", "groupSizeEncoding") != "groupSizeEncoding":
                raise GenError(f"group {name}: only groupSizeEncoding is supported")
            if any(s.kind != "kGroup" for s in sections):
                raise GenError(f"group {name}: groups must precede data")
            sub = parse_block(child, path + [camel(name)], types, data_types, seen_ids)
            sections.append(Section(name, "kGroup", since, sub))
        elif tag == "data":
            kind = data_types.get(child.get("type"))
            if kind is None:
                raise GenError(f"data {name}: type {child.get('type')} is not a varData composite")
            sections.append(Section(name, kind, since))
        else:
            raise GenError(f"unsupported element <{tag}> in {'.'.join(path)}")
    bl = int(el.get("blockLength", "0")) or offset
    if bl < offset:
        raise GenError(f"{'.'.join(path)}: blockLength {bl} smaller than its fields ({offset})")
    if len(sections) > 16:
        raise GenError(f"{'.'.join(path)}: more than 16 groups and data")
    return Block(path, fields, sections, bl)


def cpp_value_type(t):
    if t.kind == "prim" and t.length > 1:
        return "std::string_view"
    return t.cpp


def emit_tables(block, out):
    """Constexpr descriptors, children first."""
    for s in block.sections:
        if s.block:
            emit_tables(s.block, out)
    ident = block.ident
    if block.fields:
        ext = ", ".join(f"{{{f.since}, {f.offset + f.type.size}}}" for f in block.fields)
        out.append(f"inline constexpr FieldExtent k{ident}Fields[] = {{{ext}}};")
    if block.sections:
        secs = ", ".join(
            f"{{SectionKind::{s.kind}, {s.since}, {('&k' + s.block.ident + 'Block') if s.block else 'nullptr'}}}"
            for s in block.sections)
        out.append(f"inline constexpr SectionDesc k{ident}Sections[] = {{{secs}}};")
    fields = f"k{ident}Fields" if block.fields else "nullptr"
    sections = f"k{ident}Sections" if block.sections else "nullptr"
    out.append(f"inline constexpr BlockDesc k{ident}Block = {{{block.block_length}, {fields}, "
               f"{len(block.fields)}, {sections}, {len(block.sections)}}};")


def emit_field_setters(block, cls, out, ind):
    for f in block.fields:
        t, n = f.type, snake(f.name)
        if t.kind == "prim" and t.length > 1:
            out.append(f"{ind}// Fails the encoder when longer than {t.length} bytes; shorter is NUL-padded.")
            out.append(f"{ind}{cls}& set_{n}(std::string_view v) {{")
            out.append(f"{ind}  if (block_ == nullptr) return *this;")
            out.append(f"{ind}  if (v.size() > {t.length}) {{ st_->Fail(); return *this; }}")
            out.append(f"{ind}  std::memset(block_ + {f.offset}, 0, {t.length});")
            out.append(f"{ind}  std::memcpy(block_ + {f.offset}, v.data(), v.size());")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")
        elif t.kind == "composite":
            out.append(f"{ind}{cls}& set_{n}(const {t.cpp}& v) {{")
            out.append(f"{ind}  if (block_ != nullptr) v.Encode(block_ + {f.offset});")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")
        elif t.kind == "enum":
            out.append(f"{ind}{cls}& set_{n}({t.cpp} v) {{")
            out.append(f"{ind}  if (block_ != nullptr) Store<{t.encoding}>(block_ + {f.offset}, static_cast<{t.encoding}>(v));")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")
        else:
            out.append(f"{ind}{cls}& set_{n}({t.cpp} v) {{")
            out.append(f"{ind}  if (block_ != nullptr) Store<{t.cpp}>(block_ + {f.offset}, v);")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")


def emit_section_setters(block, cls, depth, out, ind):
    for i, s in enumerate(block.sections):
        n = snake(s.name)
        if s.block:
            g = camel(s.name) + "Encoder"
            out.append(f"{ind}// Starts group '{s.name}'; add entries with Next(). Sections before it that")
            out.append(f"{ind}// were not written are encoded empty; going back to them fails the encoder.")
            out.append(f"{ind}{g} Begin{camel(s.name)}() {{")
            out.append(f"{ind}  if (!st_->EnterSection({depth}, {i})) return {g}(st_, nullptr);")
            out.append(f"{ind}  uint8_t* h = st_->Reserve(kGroupHeaderSize);")
            out.append(f"{ind}  if (h != nullptr) {{")
            out.append(f"{ind}    Store<uint16_t>(h, {s.block.block_length});")
            out.append(f"{ind}    Store<uint16_t>(h + 2, 0);")
            out.append(f"{ind}  }}")
            out.append(f"{ind}  return {g}(st_, h);")
            out.append(f"{ind}}}")
        else:
            out.append(f"{ind}{cls}& set_{n}(std::string_view v) {{")
            out.append(f"{ind}  if (st_->EnterSection({depth}, {i})) WriteData(*st_, SectionKind::{s.kind}, v.data(), v.size());")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")
            out.append(f"{ind}{cls}& set_{n}(std::span<const uint8_t> v) {{")
            out.append(f"{ind}  if (st_->EnterSection({depth}, {i})) WriteData(*st_, SectionKind::{s.kind}, v.data(), v.size());")
            out.append(f"{ind}  return *this;")
            out.append(f"{ind}}}")


def emit_group_encoder(sec, depth, out, ind):
    """Nested encoder class for group `sec` whose entries sit at nesting depth+1."""
    b = sec.block
    g = camel(sec.name) + "Encoder"
    out.append(f"{ind}class {g} {{")
    out.append(f"{ind} public:")
    for s in b.sections:
        if s.block:
            emit_group_encoder(s, depth + 1, out, ind + "  ")
    out.append(f"{ind}  {g}(EncoderState* st, uint8_t* header) : st_(st), header_(header) {{}}")
    out.append(f"{ind}  // Appends an entry (fields zeroed) and makes it current; closes the previous one.")
    out.append(f"{ind}  {g}& Next() {{")
    out.append(f"{ind}    block_ = nullptr;")
    out.append(f"{ind}    if (header_ == nullptr || !st_->AtSection({depth - 1}, section_index_)) {{")
    out.append(f"{ind}      st_->Fail();")
    out.append(f"{ind}      return *this;")
    out.append(f"{ind}    }}")
    out.append(f"{ind}    uint16_t count = Load<uint16_t>(header_ + 2);")
    out.append(f"{ind}    if (count == UINT16_MAX) {{")
    out.append(f"{ind}      st_->Fail();")
    out.append(f"{ind}      return *this;")
    out.append(f"{ind}    }}")
    out.append(f"{ind}    st_->CloseBlocksFrom({depth});")
    out.append(f"{ind}    uint8_t* p = st_->Reserve({b.block_length});")
    out.append(f"{ind}    if (p == nullptr) return *this;")
    out.append(f"{ind}    std::memset(p, 0, {b.block_length});")
    out.append(f"{ind}    Store<uint16_t>(header_ + 2, static_cast<uint16_t>(count + 1));")
    out.append(f"{ind}    st_->OpenBlock({depth}, &detail::k{b.ident}Block);")
    out.append(f"{ind}    block_ = p;")
    out.append(f"{ind}    return *this;")
    out.append(f"{ind}  }}")
    out.append(f"{ind}  uint16_t count() const {{ return header_ ? Load<uint16_t>(header_ + 2) : 0; }}")
    emit_field_setters(b, g, out, ind + "  ")
    emit_section_setters(b, g, depth, out, ind + "  ")
    out.append(f"{ind} private:")
    out.append(f"{ind}  EncoderState* st_;")
    out.append(f"{ind}  uint8_t* header_;")
    out.append(f"{ind}  uint8_t* block_ = nullptr;")
    out.append(f"{ind}  static constexpr uint8_t section_index_ = {sec._index};")
    out.append(f"{ind}}};")


def null_of(t):
    if t.kind == "composite":
        return f"{t.cpp}{{}}"
    if t.kind == "enum":
        return f"static_cast<{t.cpp}>({t.null})"
    if t.kind == "prim" and t.length > 1:
        return "std::string_view{}"
    return f"static_cast<{t.cpp}>({t.null})"


def emit_field_getters(block, out, ind):
    for f in block.fields:
        t, n = f.type, snake(f.name)
        vt = cpp_value_type(t)
        guard = f"if (version_ < {f.since}) return {null_of(t)};\n{ind}  " if f.since > 0 else ""
        if t.kind == "prim" and t.length > 1:
            expr = f"FixedString(block_ + {f.offset}, {t.length})"
        elif t.kind == "composite":
            expr = f"{t.cpp}::Decode(block_ + {f.offset})"
        elif t.kind == "enum":
            expr = f"static_cast<{t.cpp}>(Load<{t.encoding}>(block_ + {f.offset}))"
        else:
            expr = f"Load<{t.cpp}>(block_ + {f.offset})"
        out.append(f"{ind}{vt} {n}() const {{")
        out.append(f"{ind}  {guard}return {expr};")
        out.append(f"{ind}}}")


def emit_section_getters(block, out, ind):
    for i, s in enumerate(block.sections):
        n = snake(s.name)
        if s.block:
            out.append(f"{ind}{camel(s.name)}Decoder {n}() const {{ return {camel(s.name)}Decoder(buf_, size_, offsets_[{i}], version_); }}")
        else:
            out.append(f"{ind}std::string_view {n}() const {{ return ReadData(buf_, offsets_[{i}], SectionKind::{s.kind}); }}")
            out.append(f"{ind}std::span<const uint8_t> {n}_bytes() const {{")
            out.append(f"{ind}  std::string_view v = {n}();")
            out.append(f"{ind}  return {{reinterpret_cast<const uint8_t*>(v.data()), v.size()}};")
            out.append(f"{ind}}}")


def emit_group_decoder(sec, out, ind):
    b = sec.block
    g = camel(sec.name) + "Decoder"
    ns = max(1, len(b.sections))
    out.append(f"{ind}class {g} {{")
    out.append(f"{ind} public:")
    for s in b.sections:
        if s.block:
            emit_group_decoder(s, out, ind + "  ")
    out.append(f"{ind}  // One entry of the group; valid while the message buffer is.")
    out.append(f"{ind}  class Entry {{")
    out.append(f"{ind}   public:")
    out.append(f"{ind}    Entry(const uint8_t* buf, size_t size, size_t pos, uint16_t block_length, uint16_t version)")
    out.append(f"{ind}        : buf_(buf), size_(size), block_(buf + pos), version_(version) {{")
    out.append(f"{ind}      DecodeError err = DecodeError::kNone;")
    out.append(f"{ind}      end_ = WalkSections(detail::k{b.ident}Block, buf, size, pos + block_length, version, offsets_, 1, &err);")
    out.append(f"{ind}    }}")
    out.append(f"{ind}    size_t end() const {{ return end_; }}")
    emit_field_getters(b, out, ind + "    ")
    emit_section_getters(b, out, ind + "    ")
    out.append(f"{ind}   private:")
    out.append(f"{ind}    const uint8_t* buf_;")
    out.append(f"{ind}    size_t size_;")
    out.append(f"{ind}    const uint8_t* block_;")
    out.append(f"{ind}    uint16_t version_;")
    out.append(f"{ind}    size_t end_ = 0;")
    out.append(f"{ind}    size_t offsets_[{ns}] = {{}};")
    out.append(f"{ind}  }};")
    out.append(f"{ind}  // Holds copies, not a pointer to the group: `d.{snake(sec.name)}().begin()` is safe.")
    out.append(f"{ind}  class Iterator {{")
    out.append(f"{ind}   public:")
    out.append(f"{ind}    Iterator(const {g}& g, uint16_t index, size_t pos)")
    out.append(f"{ind}        : buf_(g.buf_), size_(g.size_), block_length_(g.block_length_), version_(g.version_), index_(index), pos_(pos) {{}}")
    out.append(f"{ind}    Entry operator*() const {{ return Entry(buf_, size_, pos_, block_length_, version_); }}")
    out.append(f"{ind}    Iterator& operator++() {{")
    out.append(f"{ind}      pos_ = (**this).end();")
    out.append(f"{ind}      ++index_;")
    out.append(f"{ind}      return *this;")
    out.append(f"{ind}    }}")
    out.append(f"{ind}    bool operator==(const Iterator& o) const {{ return index_ == o.index_; }}")
    out.append(f"{ind}   private:")
    out.append(f"{ind}    const uint8_t* buf_;")
    out.append(f"{ind}    size_t size_;")
    out.append(f"{ind}    uint16_t block_length_;")
    out.append(f"{ind}    uint16_t version_;")
    out.append(f"{ind}    uint16_t index_;")
    out.append(f"{ind}    size_t pos_;")
    out.append(f"{ind}  }};")
    out.append(f"{ind}  {g}(const uint8_t* buf, size_t size, size_t pos, uint16_t version)")
    out.append(f"{ind}      : buf_(buf), size_(size), version_(version) {{")
    out.append(f"{ind}    if (pos == SIZE_MAX) return;  // absent: added in a later version")
    out.append(f"{ind}    block_length_ = Load<uint16_t>(buf + pos);")
    out.append(f"{ind}    count_ = Load<uint16_t>(buf + pos + 2);")
    out.append(f"{ind}    first_ = pos + kGroupHeaderSize;")
    out.append(f"{ind}  }}")
    out.append(f"{ind}  uint16_t size() const {{ return count_; }}")
    out.append(f"{ind}  bool empty() const {{ return count_ == 0; }}")
    out.append(f"{ind}  Iterator begin() const {{ return Iterator(*this, 0, first_); }}")
    out.append(f"{ind}  Iterator end() const {{ return Iterator(*this, count_, 0); }}")
    out.append(f"{ind} private:")
    out.append(f"{ind}  const uint8_t* buf_;")
    out.append(f"{ind}  size_t size_;")
    out.append(f"{ind}  uint16_t version_;")
    out.append(f"{ind}  uint16_t block_length_ = 0;")
    out.append(f"{ind}  uint16_t count_ = 0;")
    out.append(f"{ind}  size_t first_ = 0;")
    out.append(f"{ind}}};")


def emit_debug_body(block, out, ind, var):
    """Appends `name=value` pairs of decoder/entry `var` to std::string `out`."""
    first = True
    for f in block.fields:
        t, n = f.type, snake(f.name)
        sep = "" if first else ", "
        first = False
        if t.kind == "enum":
            out.append(f'{ind}out += "{sep}{n}="; out += ToString({var}.{n}());')
        elif t.kind == "composite":
            parts = " + \", \" + ".join(f'\"{snake(m[0])}=\" + std::to_string({var}.{n}().{snake(m[0])})' for m in t.members)
            out.append(f'{ind}out += "{sep}{n}={{"; out += std::string() + {parts}; out += "}}";')
        elif t.kind == "prim" and t.length > 1:
            out.append(f'{ind}out += "{sep}{n}="; AppendQuoted(out, {var}.{n}());')
        elif t.cpp == "char":
            out.append(f'{ind}out += "{sep}{n}="; out += std::to_string(static_cast<int>({var}.{n}()));')
        else:
            out.append(f'{ind}out += "{sep}{n}="; out += std::to_string({var}.{n}());')
    for s_ in block.sections:
        n = snake(s_.name)
        sep = "" if first else ", "
        first = False
        if s_.block:
            out.append(f'{ind}out += "{sep}{n}=[";')
            out.append(f'{ind}{{')
            out.append(f'{ind}  bool first_entry = true;')
            out.append(f'{ind}  for (auto e{len(ind)} : {var}.{n}()) {{')
            out.append(f'{ind}    if (!first_entry) out += ", ";')
            out.append(f'{ind}    first_entry = false;')
            out.append(f'{ind}    out += "{{";')
            emit_debug_body(s_.block, out, ind + "    ", f"e{len(ind)}")
            out.append(f'{ind}    out += "}}";')
            out.append(f'{ind}  }}')
            out.append(f'{ind}}}')
            out.append(f'{ind}out += "]";')
        else:
            out.append(f'{ind}out += "{sep}{n}="; AppendQuoted(out, {var}.{n}());')


def index_sections(block):
    for i, s in enumerate(block.sections):
        s._index = i
        if s.block:
            index_sections(s.block)


def generate(schema_path):
    tree = ET.parse(schema_path)
    root = tree.getroot()
    if local(root.tag) != "messageSchema":
        raise GenError("root element must be messageSchema")
    if root.get("byteOrder", "littleEndian") != "littleEndian":
        raise GenError("only littleEndian schemas are supported")
    package = root.get("package")
    schema_id = int(root.get("id"))
    version = int(root.get("version", "0"))
    types, data_types = parse_types(root)
    messages, ids, names = [], set(), set()
    for el in root:
        if local(el.tag) != "message":
            continue
        name, mid = el.get("name"), int(el.get("id"))
        if mid in ids or name in names:
            raise GenError(f"duplicate message id or name: {name} ({mid})")
        ids.add(mid)
        names.add(name)
        block = parse_block(el, [camel(name)], types, data_types, set())
        index_sections(block)
        messages.append((camel(name), mid, block, (el.get("description") or "").strip()))

    ns = package.replace(".", "::")
    o = []
    o.append(f"// Generated by sbe/tools/sbe_gen.py from {schema_path.split('/')[-1]}. Do not edit.")
    o.append(f"// Schema {package} id {schema_id} version {version}.")
    o.append("#pragma once")
    o.append("")
    o.append("#include <cstdint>")
    o.append("#include <cstring>")
    o.append("#include <limits>")
    o.append("#include <span>")
    o.append("#include <string>")
    o.append("#include <string_view>")
    o.append("#include <vector>")
    o.append("")
    o.append('#include "goblin/common/status.h"')
    o.append('#include "goblin/sbe/runtime.h"')
    o.append("")
    o.append("#if defined(__clang__)")
    o.append("#pragma clang diagnostic push")
    o.append("#pragma clang diagnostic ignored \"-Wunused-private-field\"  // uniform flyweight layout")
    o.append("#endif")
    o.append("")
    o.append(f"namespace {ns} {{")
    o.append("")
    o.append("using namespace ::goblin::sbe;  // runtime helpers")
    o.append("")
    o.append(f"inline constexpr uint16_t kSchemaId = {schema_id};")
    o.append(f"inline constexpr uint16_t kSchemaVersion = {version};")
    o.append("")
    for t in types.values():
        if t.kind == "enum":
            o.append(f"enum class {t.cpp} : {t.encoding} {{")
            for vn, vv in t.values:
                val = f"'{vv}'" if t.encoding == "char" and not vv.isdigit() else vv
                o.append(f"  {const_name(vn)} = {val},")
            o.append(f"  kNullValue = {t.null},")
            o.append("};")
            o.append(f"inline std::string_view ToString({t.cpp} v) {{")
            o.append("  switch (v) {")
            for vn, _ in t.values:
                o.append(f"    case {t.cpp}::{const_name(vn)}: return \"{vn}\";")
            o.append(f"    case {t.cpp}::kNullValue: return \"null\";")
            o.append("  }")
            o.append("  return \"unknown\";")
            o.append("}")
            o.append("")
    for t in types.values():
        if t.kind == "composite":
            o.append(f"struct {t.cpp} {{")
            o.append(f"  static constexpr size_t kEncodedLength = {t.size};")
            for mn, mcpp, _ in t.members:
                o.append(f"  {mcpp} {snake(mn)} = 0;")
            o.append("  void Encode(uint8_t* p) const {")
            for mn, mcpp, off in t.members:
                o.append(f"    Store<{mcpp}>(p + {off}, {snake(mn)});")
            o.append("  }")
            o.append(f"  static {t.cpp} Decode(const uint8_t* p) {{")
            o.append(f"    {t.cpp} v;")
            for mn, mcpp, off in t.members:
                o.append(f"    v.{snake(mn)} = Load<{mcpp}>(p + {off});")
            o.append("    return v;")
            o.append("  }")
            o.append(f"  friend bool operator==(const {t.cpp}&, const {t.cpp}&) = default;")
            o.append("};")
            o.append("")

    o.append("enum class TemplateId : uint16_t {")
    for name, mid, _, _ in messages:
        o.append(f"  {const_name(name)} = {mid},")
    o.append("};")
    o.append("inline constexpr uint16_t kAllTemplateIds[] = {" + ", ".join(str(m[1]) for m in messages) + "};")
    o.append("inline std::string_view TemplateName(uint16_t id) {")
    o.append("  switch (id) {")
    for name, mid, _, _ in messages:
        o.append(f"    case {mid}: return \"{name}\";")
    o.append("  }")
    o.append("  return \"unknown\";")
    o.append("}")
    o.append("")
    o.append("namespace detail {")
    for _, _, block, _ in messages:
        emit_tables(block, o)
    o.append("}  // namespace detail")
    o.append("")

    for name, mid, block, desc in messages:
        nsec = max(1, len(block.sections))
        if desc:
            o.append(f"// {desc}")
        # Encoder
        enc = f"{name}Encoder"
        o.append(f"// Encodes a {name} (header included) into a caller buffer. Not movable: group")
        o.append("// encoders point into it. Finish() returns the length, 0 if it did not fit or was misused.")
        o.append(f"class {enc} {{")
        o.append(" public:")
        o.append(f"  static constexpr uint16_t kTemplateId = {mid};")
        o.append(f"  static constexpr uint16_t kBlockLength = {block.block_length};")
        for s in block.sections:
            if s.block:
                emit_group_encoder(s, 1, o, "  ")
        o.append(f"  {enc}(uint8_t* buf, size_t capacity) : state_(buf, capacity), st_(&state_) {{")
        o.append(f"    uint8_t* h = state_.Reserve(MessageHeader::kSize + kBlockLength);")
        o.append("    if (h == nullptr) return;")
        o.append("    MessageHeader{kBlockLength, kTemplateId, kSchemaId, kSchemaVersion}.Write(h);")
        o.append("    block_ = h + MessageHeader::kSize;")
        o.append("    std::memset(block_, 0, kBlockLength);")
        o.append(f"    state_.OpenBlock(0, &detail::k{block.ident}Block);")
        o.append("  }")
        o.append(f"  {enc}(std::span<uint8_t> buf) : {enc}(buf.data(), buf.size()) {{}}")
        o.append(f"  {enc}(const {enc}&) = delete;")
        o.append(f"  {enc}& operator=(const {enc}&) = delete;")
        o.append("  bool ok() const { return state_.ok(); }")
        o.append("  size_t Finish() { return state_.Finish(); }")
        emit_field_setters(block, enc, o, "  ")
        emit_section_setters(block, enc, 0, o, "  ")
        o.append(" private:")
        o.append("  EncoderState state_;")
        o.append("  EncoderState* st_;")
        o.append("  uint8_t* block_ = nullptr;")
        o.append("};")
        o.append("")
        # Decoder
        dec = f"{name}Decoder"
        o.append(f"// Decodes a {name}. Decode() validates the whole message (every length against the")
        o.append("// buffer) first; accessors then never read out of bounds. Views point into the buffer.")
        o.append(f"class {dec} {{")
        o.append(" public:")
        o.append(f"  static constexpr uint16_t kTemplateId = {mid};")
        for s in block.sections:
            if s.block:
                emit_group_decoder(s, o, "  ")
        o.append("  // Checks the header too: schema id and template id must match.")
        o.append(f"  static Result<{dec}> Decode(std::span<const uint8_t> buf) {{")
        o.append(f"    {dec} d;")
        o.append("    DecodeError e = d.Wrap(buf);")
        o.append("    if (e != DecodeError::kNone) {")
        o.append(f"      return Err(StatusCode::kInvalidArgument, \"{name}: {{}}\", DecodeErrorName(e));")
        o.append("    }")
        o.append("    return d;")
        o.append("  }")
        o.append("  // A decoder is a view: a temporary buffer would be gone before it is read.")
        o.append(f"  static Result<{dec}> Decode(std::vector<uint8_t>&&) = delete;")
        o.append("  // The no-allocation form for hot paths.")
        o.append("  DecodeError Wrap(std::span<const uint8_t> buf) {")
        o.append("    MessageHeader h;")
        o.append("    if (!MessageHeader::Read(buf, &h)) return DecodeError::kTruncated;")
        o.append("    if (h.schema_id != kSchemaId) return DecodeError::kWrongSchema;")
        o.append("    if (h.template_id != kTemplateId) return DecodeError::kWrongTemplate;")
        o.append("    return WrapBody(buf, h.block_length, h.version);")
        o.append("  }")
        o.append("  // For a header already read by a dispatcher.")
        o.append("  DecodeError WrapBody(std::span<const uint8_t> buf, uint16_t block_length, uint16_t version) {")
        # (a peer of this schema version or later: the fields' extent, known at compile time)
        o.append(f"    constexpr uint16_t kFullMin = detail::k{block.ident}Block.MinBlockLength(kSchemaVersion);")
        o.append(f"    if (block_length < (version >= kSchemaVersion ? kFullMin : detail::k{block.ident}Block.MinBlockLength(version))) {{")
        o.append("      return DecodeError::kShortBlock;")
        o.append("    }")
        o.append("    if (buf.size() < MessageHeader::kSize || buf.size() - MessageHeader::kSize < block_length) {")
        o.append("      return DecodeError::kTruncated;")
        o.append("    }")
        o.append("    DecodeError err = DecodeError::kNone;")
        if all(x.kind != "kGroup" for x in block.sections):  # (none at all too)
            o.append(f"    size_t end = WalkDataSections(detail::k{block.ident}Block, buf.data(), buf.size(),")
            o.append("                                  MessageHeader::kSize + block_length, version, offsets_, &err);")
        else:
            o.append(f"    size_t end = WalkSections(detail::k{block.ident}Block, buf.data(), buf.size(),")
            o.append("                              MessageHeader::kSize + block_length, version, offsets_, 0, &err);")
        o.append("    if (end == SIZE_MAX) return err;")
        o.append("    buf_ = buf.data();")
        o.append("    size_ = buf.size();")
        o.append("    block_ = buf_ + MessageHeader::kSize;")
        o.append("    version_ = version;")
        o.append("    end_ = end;")
        o.append("    return DecodeError::kNone;")
        o.append("  }")
        o.append("  uint16_t acting_version() const { return version_; }")
        o.append("  // Bytes this decoder understood (header through its last known section).")
        o.append("  size_t encoded_length() const { return end_; }")
        emit_field_getters(block, o, "  ")
        emit_section_getters(block, o, "  ")
        o.append(" private:")
        o.append("  const uint8_t* buf_ = nullptr;")
        o.append("  size_t size_ = 0;")
        o.append("  const uint8_t* block_ = nullptr;")
        o.append("  uint16_t version_ = 0;")
        o.append("  size_t end_ = 0;")
        o.append(f"  size_t offsets_[{nsec}] = {{}};")
        o.append("};")
        o.append("")
    o.append("// Quoted, escaped, at most 48 bytes shown, with the length when cut.")
    o.append("inline void AppendQuoted(std::string& out, std::string_view v) {")
    o.append("  static constexpr char kHex[] = \"0123456789abcdef\";")
    o.append("  out += '\"';")
    o.append("  for (size_t i = 0; i < v.size() && i < 48; ++i) {")
    o.append("    unsigned char c = static_cast<unsigned char>(v[i]);")
    o.append("    if (c >= 0x20 && c < 0x7f && c != '\"' && c != '\\\\') {")
    o.append("      out += static_cast<char>(c);")
    o.append("    } else {")
    o.append("      out += \"\\\\x\";")
    o.append("      out += kHex[c >> 4];")
    o.append("      out += kHex[c & 15];")
    o.append("    }")
    o.append("  }")
    o.append("  out += '\"';")
    o.append("  if (v.size() > 48) out += \"...(\" + std::to_string(v.size()) + \" bytes)\";")
    o.append("}")
    o.append("")
    for name, mid, block, _ in messages:
        o.append(f"inline std::string DebugString(const {name}Decoder& d) {{")
        o.append(f'  std::string out = "{name}{{";')
        emit_debug_body(block, o, "  ", "d")
        o.append('  out += "}";')
        o.append("  return out;")
        o.append("}")
    o.append("// Any message of this schema as text, or why it could not be decoded.")
    o.append("inline std::string DebugString(std::span<const uint8_t> buf) {")
    o.append("  MessageHeader h;")
    o.append("  if (!MessageHeader::Read(buf, &h)) return \"<truncated header>\";")
    o.append("  if (h.schema_id != kSchemaId) return \"<schema \" + std::to_string(h.schema_id) + \">\";")
    o.append("  switch (h.template_id) {")
    for name, mid, block, _ in messages:
        o.append(f"    case {mid}: {{")
        o.append(f"      {name}Decoder d;")
        o.append(f"      DecodeError e = d.WrapBody(buf, h.block_length, h.version);")
        o.append(f"      if (e != DecodeError::kNone) return \"<{name}: \" + std::string(DecodeErrorName(e)) + \">\";")
        o.append(f"      return DebugString(d);")
        o.append(f"    }}")
    o.append("  }")
    o.append("  return \"<unknown template \" + std::to_string(h.template_id) + \">\";")
    o.append("}")
    o.append("")
    o.append(f"}}  // namespace {ns}")
    o.append("")
    o.append("#if defined(__clang__)")
    o.append("#pragma clang diagnostic pop")
    o.append("#endif")
    return "\n".join(o) + "\n"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        text = generate(sys.argv[1])
    except (GenError, ET.ParseError, ValueError, TypeError) as e:
        print(f"sbe_gen: {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    with open(sys.argv[2], "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
