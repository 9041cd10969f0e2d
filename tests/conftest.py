"""Every executable any test writes is checked against the JSON Schemas in docs/ and the loaders' cross-checks,
and every Vulkan launch of any test runs under the Khronos validation layer, which must say nothing."""

import json
import os

import pytest

# Read when the shared Vulkan device opens; a test run wants the layer unless told otherwise.
os.environ.setdefault("TESSERA_VULKAN_VALIDATION", "1")

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "docs", "executable.schema.json")


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """The tiny random-weight Llama GGUF (fixtures/tiny_gguf.py), written once for the whole run;
    tests read it and never change it."""
    from fixtures.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(str(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


@pytest.fixture(autouse=True, scope="session")
def _executables_match_the_schema():
    """What the compiler writes is what its loaders accept: the schemas in docs/ and the cross-checks
    after them (tessera.vm.format_checks), on every executable and tensor cache any test saves."""
    import jsonschema
    from tessera.vm.executable import Executable
    from tessera.vm.format_checks import check_executable, check_tensor_cache
    from tessera.vm.schema import check_against_schema

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    save = Executable.save

    def checked_save(self, directory):
        save(self, directory)
        with open(os.path.join(directory, "executable.json"), encoding="utf-8") as f:
            doc = json.load(f)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            raise AssertionError(f"{directory}/executable.json does not match docs/executable.schema.json at "
                                 f"{where}: {errors[0].message}")
        check_executable(doc, f"{directory}/executable.json", AssertionError)
        with open(os.path.join(directory, "tensor-cache.json"), encoding="utf-8") as f:
            cache = json.load(f)
        check_against_schema(cache, "tensor-cache", f"{directory}/tensor-cache.json", AssertionError)
        check_tensor_cache(cache, f"{directory}/tensor-cache.json", AssertionError)

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
