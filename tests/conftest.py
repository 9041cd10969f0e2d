"""Every executable any test writes is checked against the JSON Schema in docs/ (format version 2),
and every Vulkan launch of any test runs under the Khronos validation layer, which must say nothing."""

import json
import os

import pytest

# Read when the shared Vulkan device opens; a test run wants the layer unless told otherwise.
os.environ.setdefault("TESSERA_VULKAN_VALIDATION", "1")

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "docs", "executable.schema.json")


@pytest.fixture(autouse=True, scope="session")
def _executables_match_the_schema():
    import jsonschema
    from tessera.vm.executable import Executable

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    save = Executable.save

    def checked_save(self, directory):
        save(self, directory)
        with open(os.path.join(directory, "executable.json"), encoding="utf-8") as f:
            errors = sorted(validator.iter_errors(json.load(f)), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            raise AssertionError(f"{directory}/executable.json does not match docs/executable.schema.json at "
                                 f"{where}: {errors[0].message}")

    Executable.save = checked_save
    yield
    Executable.save = save


@pytest.fixture(autouse=True)
def _vulkan_validation_stays_silent():
    """A test fails if the validation layer reported anything while it used the shared Vulkan device."""
    from tessera.vm.devices.vulkan import VulkanDevice

    before = len(VulkanDevice._shared.validation_messages) if VulkanDevice._shared is not None else 0
    yield
    device = VulkanDevice._shared
    if device is not None and len(device.validation_messages) > before:
        new = device.validation_messages[before:]
        pytest.fail(f"the Vulkan validation layer reported {len(new)} message(s), first: {new[0]}")
