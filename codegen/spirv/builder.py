"""A small SPIR-V module builder: ids, interned types and constants, the sections in spec order.

A module is a list of 32-bit words: a five-word header (magic, version, generator, id bound,
schema 0), then instructions, each ``(word count << 16) | opcode`` followed by its operands. The
specification fixes the order of the sections (2.4 "Logical Layout of a Module"), which
``assemble`` writes from separate lists, so that a caller may add a capability, a name or a
type at any point while it emits a function body:

capabilities, extensions, ext-inst imports, memory model, entry points, execution modes,
debug names, decorations, types / constants / global variables, functions.

Types and constants are interned (SPIR-V forbids two identical non-aggregate type declarations),
so asking for ``float32`` twice gives the same id. Capabilities and extensions form sets,
declared only when something asked for them. A function body is written as one list of
instructions after its entry block's ``OpVariable``s, which the spec wants first in that block.
"""

from __future__ import annotations

import struct

from .spec import (
    ADDRESSING_LOGICAL,
    EXECUTION_MODE_LOCAL_SIZE,
    EXECUTION_MODEL_GLCOMPUTE,
    FUNCTION_CONTROL_NONE,
    GENERATOR,
    GLSL,
    MAGIC,
    MEMORY_MODEL_GLSL450,
    VERSION_1_3,
    Capability,
    Op,
)


def string_words(text: str) -> list[int]:
    """A literal string: UTF-8, nul-terminated, padded with nuls to whole little-endian words."""
    data = text.encode() + b"\0"
    data += b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def instruction(opcode: int, *operands: int) -> list[int]:
    return [(len(operands) + 1) << 16 | opcode, *operands]


class Module:
    """One SPIR-V module under construction (see the module docstring for the layout)."""

    def __init__(self):
        self.bound = 1  # ids start at 1; the header records one past the largest
        self.capabilities: dict[int, None] = {Capability.Shader: None}  # ordered sets
        self.extensions: dict[str, None] = {}
        self.imports: dict[str, int] = {}
        self.entry_points: list[list[int]] = []
        self.execution_modes: list[list[int]] = []
        self.names: list[list[int]] = []
        self.annotations: list[list[int]] = []
        self.globals: list[list[int]] = []  # types, constants and module-scope variables
        self.functions: list[list[int]] = []
        self._interned: dict[tuple, int] = {}
        self._decorated: set[tuple] = set()

    def fresh(self) -> int:
        self.bound += 1
        return self.bound - 1

    # -- module-level facts ---------------------------------------------------------------

    def capability(self, capability: int) -> None:
        self.capabilities[capability] = None

    def extension(self, name: str) -> None:
        self.extensions[name] = None

    def glsl(self) -> int:
        """The id of the GLSL.std.450 extended instruction set, imported on first use."""
        if GLSL.IMPORT_NAME not in self.imports:
            self.imports[GLSL.IMPORT_NAME] = self.fresh()
        return self.imports[GLSL.IMPORT_NAME]

    def name(self, target: int, text: str) -> None:
        self.names.append(instruction(Op.Name, target, *string_words(text)))

    def member_name(self, struct_type: int, member: int, text: str) -> None:
        self.names.append(instruction(Op.MemberName, struct_type, member, *string_words(text)))

    def decorate(self, target: int, decoration: int, *operands: int) -> None:
        """A decoration, written once however often it is asked for (interned types share theirs)."""
        key = ("decorate", target, decoration, operands)
        if key not in self._decorated:
            self._decorated.add(key)
            self.annotations.append(instruction(Op.Decorate, target, decoration, *operands))

    def member_decorate(self, struct_type: int, member: int, decoration: int, *operands: int) -> None:
        key = ("member", struct_type, member, decoration, operands)
        if key not in self._decorated:
            self._decorated.add(key)
            self.annotations.append(instruction(Op.MemberDecorate, struct_type, member, decoration, *operands))

    def compute_entry_point(self, function: int, name: str, interface: list[int],
                            local_size: tuple[int, int, int]) -> None:
        self.entry_points.append(instruction(Op.EntryPoint, EXECUTION_MODEL_GLCOMPUTE, function,
                                             *string_words(name), *interface))
        self.execution_modes.append(instruction(Op.ExecutionMode, function, EXECUTION_MODE_LOCAL_SIZE, *local_size))

    # -- types ------------------------------------------------------------------------------

    def _intern(self, key: tuple, opcode: int, *operands: int, result_type: int | None = None) -> int:
        """The id of a type (no ``result_type``) or constant, declared on first use."""
        if key not in self._interned:
            result = self.fresh()
            head = (result,) if result_type is None else (result_type, result)
            self.globals.append(instruction(opcode, *head, *operands))
            self._interned[key] = result
        return self._interned[key]

    def type_void(self) -> int:
        return self._intern(("void",), Op.TypeVoid)

    def type_bool(self) -> int:
        return self._intern(("bool",), Op.TypeBool)

    def type_int(self, width: int, signed: bool) -> int:
        return self._intern(("int", width, signed), Op.TypeInt, width, int(signed))

    def type_float(self, width: int) -> int:
        if width == 16:
            # Any f16 value in a kernel is computed with; a kernel that only moves f16 words would
            # need StorageBuffer16BitAccess alone, which no Tessera kernel does.
            self.capability(Capability.Float16)
        return self._intern(("float", width), Op.TypeFloat, width)

    def type_vector(self, component: int, count: int) -> int:
        return self._intern(("vector", component, count), Op.TypeVector, component, count)

    def type_pointer(self, storage_class: int, pointee: int) -> int:
        return self._intern(("pointer", storage_class, pointee), Op.TypePointer, storage_class, pointee)

    def type_runtime_array(self, element: int) -> int:
        return self._intern(("runtime_array", element), Op.TypeRuntimeArray, element)

    def type_array(self, element: int, length: int) -> int:
        return self._intern(("array", element, length), Op.TypeArray, element, self.constant_u32(length))

    def type_struct(self, *members: int) -> int:
        """Structs are interned too: the buffers of one element type share one Block struct."""
        return self._intern(("struct", members), Op.TypeStruct, *members)

    def type_function(self, result: int, *params: int) -> int:
        return self._intern(("function", result, params), Op.TypeFunction, result, *params)

    # -- constants ----------------------------------------------------------------------------

    def constant(self, type_id: int, *words: int) -> int:
        """A numeric constant from its literal words (the value's bits, low word first)."""
        return self._intern(("constant", type_id, words), Op.Constant, *words, result_type=type_id)

    def constant_bool(self, type_id: int, value: bool) -> int:
        return self._intern(("true" if value else "false", type_id), Op.ConstantTrue if value else Op.ConstantFalse,
                            result_type=type_id)

    def constant_composite(self, type_id: int, *parts: int) -> int:
        return self._intern(("composite", type_id, parts), Op.ConstantComposite, *parts, result_type=type_id)

    def constant_u32(self, value: int) -> int:
        return self.constant(self.type_int(32, False), value & 0xFFFFFFFF)

    # -- variables --------------------------------------------------------------------------

    def global_variable(self, pointer_type: int, storage_class: int, name: str | None = None) -> int:
        variable = self.fresh()
        self.globals.append(instruction(Op.Variable, pointer_type, variable, storage_class))
        if name:
            self.name(variable, name)
        return variable

    # -- output -------------------------------------------------------------------------------

    def words(self) -> list[int]:
        out = [MAGIC, VERSION_1_3, GENERATOR, self.bound, 0]
        for capability in self.capabilities:
            out += instruction(Op.Capability, capability)
        for name in self.extensions:
            out += instruction(Op.Extension, *string_words(name))
        for name, result in self.imports.items():
            out += instruction(Op.ExtInstImport, result, *string_words(name))
        out += instruction(Op.MemoryModel, ADDRESSING_LOGICAL, MEMORY_MODEL_GLSL450)
        for section in (self.entry_points, self.execution_modes, self.names, self.annotations, self.globals,
                        self.functions):
            for inst in section:
                out += inst
        return out

    def assemble(self) -> bytes:
        words = self.words()
        return struct.pack(f"<{len(words)}I", *words)


class FunctionBuilder:
    """The body of one function: ``emit`` appends an instruction, ``variable`` a Function-class
    variable to the entry block (where the spec requires all of them), ``label`` starts a block."""

    def __init__(self, module: Module, result_type: int, function_type: int):
        self.module = module
        self.result_type = result_type
        self.function_type = function_type
        self.id = module.fresh()
        self.entry = module.fresh()
        self.block = self.entry  # the label of the block being written
        self.variables: list[list[int]] = []
        self.preamble: list[list[int]] = []  # entry-block instructions every later block can use
        self.body: list[list[int]] = []

    def emit(self, opcode: int, result_type: int | None, *operands: int) -> int | None:
        """Appends an instruction; with a result type, allocates and returns its result id."""
        if result_type is None:
            self.body.append(instruction(opcode, *operands))
            return None
        result = self.module.fresh()
        self.body.append(instruction(opcode, result_type, result, *operands))
        return result

    def emit_in_preamble(self, opcode: int, result_type: int, *operands: int) -> int:
        """A value computed once at the top of the entry block, which dominates every block."""
        result = self.module.fresh()
        self.preamble.append(instruction(opcode, result_type, result, *operands))
        return result

    def variable(self, pointer_type: int, storage_class: int, name: str | None = None) -> int:
        result = self.module.fresh()
        self.variables.append(instruction(Op.Variable, pointer_type, result, storage_class))
        if name:
            self.module.name(result, name)
        return result

    def label(self, label: int) -> None:
        self.body.append(instruction(Op.Label, label))
        self.block = label

    def finish(self) -> None:
        """Ends the function with OpReturn and adds it to the module."""
        self.body.append(instruction(Op.Return))
        words = instruction(Op.Function, self.result_type, self.id, FUNCTION_CONTROL_NONE, self.function_type)
        words += instruction(Op.Label, self.entry)
        for inst in self.variables + self.preamble + self.body:
            words += inst
        words += instruction(Op.FunctionEnd)
        self.module.functions.append(words)

