"""Placing tensors on virtual devices: R.to_vdevice and R.hint_on_device (docs/vdevice.md).

``R.to_vdevice(x, "webgpu:0")`` copies x to a vdevice of the module, named by its canonical name;
its value is x's struct info placed there. It has no kernel: the VM copies with its ``to_device``
instruction, so legalization leaves the call alone.

``R.hint_on_device(x, "gpu")`` says where the program wants x: on the module's first vdevice
that runs on that device type ("cpu" or "gpu", with ":id" for another physical device id than 0;
``tessera.target.device_type`` says which kinds run where). Deduction leaves x's info as it is;
``transform.realize_vdevice`` places x there, or turns the hint into a to_vdevice when x must
stay elsewhere.

Both are copies in the numpy reference: one address space holds every device's tensors.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import DeductionError, UnknownVDeviceError
from ..ir.module import IRModule
from ..target import device_type
from .common import on_vdevice, tensor_input
from .registry import register_op

DEVICE_TYPES = ("cpu", "gpu")


def parse_device(device) -> tuple[str, int]:
    """``"gpu:1"`` -> ("gpu", 1); ``"cpu"`` -> ("cpu", 0)."""
    text = device if isinstance(device, str) else ""
    kind, _, number = text.partition(":")
    if kind not in DEVICE_TYPES or (number and not number.isdigit()):
        raise ValueError(f"R.hint_on_device takes a device type, \"cpu\" or \"gpu\", optionally with \":id\" "
                         f"(a physical device id), got {device!r}")
    return kind, int(number or 0)


def hinted_vdevice(mod: IRModule, device: str) -> str:
    """The canonical name of the vdevice ``R.hint_on_device(x, device)`` asks for: the module's first
    whose kind runs on that device type and whose device id (``VDevice.index``) is the hint's."""
    kind, device_id = parse_device(device)
    for position, vdevice in enumerate(mod.vdevices):
        if device_type(vdevice.kind) == kind and vdevice.index == device_id:
            return mod.vdevice_name(position)
    raise UnknownVDeviceError(f"R.hint_on_device(..., {device!r}): no virtual device runs on a {kind} with device id "
                              f"{device_id}; {mod.describe_vdevices()}")


def _deduce_hint(call, ctx):
    tensor_input(call, 0, ctx)
    try:
        parse_device(call.attr("device"))
    except ValueError as error:
        raise DeductionError("invalid attribute", str(error)) from None
    return call.args[0].sinfo  # a hint moves nothing until RealizeVDevice decides


def _deduce_to_vdevice(call, ctx):
    x = tensor_input(call, 0, ctx)
    vdevice = call.attr("vdevice")
    if not isinstance(vdevice, str) or not vdevice:
        raise DeductionError("invalid attribute", f"R.to_vdevice takes the name of a vdevice such as \"webgpu:0\", "
                             f"got {vdevice!r}")
    return on_vdevice(x, vdevice)


def _copy(x, **attrs):
    return np.array(x, copy=True)


# "keep": a copy's dtype is its input's, in a float16 build too.
register_op("hint_on_device", inputs=("x",), attrs={"device": ""}, positional_attrs=("device",),
            deduce=_deduce_hint, reference=_copy, precision="keep")
register_op("to_vdevice", inputs=("x",), attrs={"vdevice": ""}, positional_attrs=("vdevice",),
            deduce=_deduce_to_vdevice, reference=_copy, precision="keep")
